package postgres

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// cancelManySQL is cancelSQL for a batch of jobs (its ids, distinct and
// sorted, in $1): the jobs that wait are CANCELED, the RUNNING ones (%s
// adds them, or not: LeaveRunning) asked to stop, one job.state_changed
// row for the batch and a wakeup per job asked. The job is joined a
// second time as prev, as in cancelSQL: a row that changed after the
// statement's snapshot is left out, and told from a finished one by its
// state in that snapshot (cur; read only for the jobs left out), so that
// the caller runs the statement again for it alone. The arrays are
// unnested in the select list, as in finishSQL, so the rows are reached
// through the primary key in the order of the sorted ids (the lock order
// of every batch of jobs).
//
// $1 ids, $2 now, $3 last_error of the jobs canceled (NULL: keep theirs).
var cancelManySQL = `
WITH ids AS (
	SELECT unnest((SELECT $1::uuid[])) AS id, unnest(ARRAY(SELECT generate_series(1, cardinality($1::uuid[])))) AS ord
),
c AS (
	UPDATE docket_jobs j SET
		state            = CASE WHEN j.state = 'RUNNING' THEN j.state ELSE 'CANCELED' END,
		cancel_requested = j.cancel_requested OR j.state = 'RUNNING',
		last_error       = CASE WHEN j.state = 'RUNNING' THEN j.last_error ELSE coalesce($3::text, j.last_error) END,
		finished_at      = CASE WHEN j.state = 'RUNNING' THEN j.finished_at ELSE $2::timestamptz END,
		updated_at       = $2::timestamptz,
		version          = j.version + 1
	FROM ids, docket_jobs prev
	WHERE j.id = ids.id AND prev.id = j.id AND j.state = prev.state
		AND j.state || '' IN ('CREATED', 'QUEUED', 'RETRY'%s)
	RETURNING j.id, j.job_type, j.queue, j.attempt, j.state, prev.state AS prev_state
),
outbox AS (` + outboxStateChanged("c WHERE state = 'CANCELED'", "prev_state", "state", "$2::timestamptz") + `),
notify AS (SELECT pg_notify('` + channelJobCancel + `', id::text) FROM c WHERE state = 'RUNNING')
SELECT ids.ord, c.state, (SELECT cur.state FROM docket_jobs cur WHERE cur.id = ids.id AND c.id IS NULL)
FROM ids LEFT JOIN c ON c.id = ids.id
WHERE ` + notifyGuard("notify")

var (
	cancelManyAskSQL   = fmt.Sprintf(cancelManySQL, ", 'RUNNING'")
	cancelManyLeaveSQL = fmt.Sprintf(cancelManySQL, "")
)

// JobCancelMany implements store.Store: each statement its own
// transaction, run again when it was a deadlock's victim.
func (s *Store) JobCancelMany(ctx context.Context, p *store.JobCancelManyParams) ([]store.JobCancelManyResult, error) {
	return jobCancelMany(ctx, p, func(fn func() error) error { return retryDeadlock(fn) }, s.pool)
}

// JobCancelMany implements store.Tx: the statements on the transaction;
// the holders of the RUNNING jobs asked are woken when it commits.
func (t *storeTx) JobCancelMany(ctx context.Context, p *store.JobCancelManyParams) ([]store.JobCancelManyResult, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return jobCancelMany(ctx, p, func(fn func() error) error { return fn() }, t.tx)
}

// jobCancelMany cancels p's jobs through c, each statement through run
// (which may run it again).
func jobCancelMany(ctx context.Context, p *store.JobCancelManyParams, run func(func() error) error, c conn) ([]store.JobCancelManyResult, error) {
	out := make([]store.JobCancelManyResult, len(p.IDs))
	if len(p.IDs) == 0 {
		return out, nil
	}
	// The distinct ids, sorted: the lock order, and each job once.
	ids := lockOrder(p.IDs)
	query := cancelManyAskSQL
	if p.LeaveRunning {
		query = cancelManyLeaveSQL
	}
	var lastError *string
	if p.Error != "" {
		e := p.ErrorText()
		lastError = &e
	}
	now := dbTime(p.Now)
	got := make(map[uuid.UUID]store.JobCancelManyResult, len(ids))
	for range guardedRetries {
		var raced []uuid.UUID
		err := run(func() error {
			raced = raced[:0]
			rs, err := c.Query(ctx, query, ids, now, lastError)
			if err != nil {
				return err
			}
			defer rs.Close()
			var (
				ord        int
				state, cur *string
			)
			for rs.Next() {
				if err := rs.Scan(&ord, &state, &cur); err != nil {
					return err
				}
				id := ids[ord-1]
				switch {
				case state != nil: // changed by the statement
					got[id] = store.JobCancelManyResult{State: job.State(*state), Canceled: *state == string(job.StateCanceled)}
				case cur == nil: // no such job
					got[id] = store.JobCancelManyResult{}
				case cancelable(job.State(*cur), p.LeaveRunning):
					raced = append(raced, id) // changed under the statement
				default: // finished, or RUNNING and left so
					got[id] = store.JobCancelManyResult{State: job.State(*cur)}
				}
			}
			return rs.Err()
		})
		if err != nil {
			return nil, fmt.Errorf("cancel %d jobs: %w", len(ids), err)
		}
		if len(raced) == 0 {
			for i, id := range p.IDs {
				out[i] = got[id]
			}
			return out, nil
		}
		// Still cancellable: they changed between the statement's
		// snapshot and its lock. Try them again.
		ids = lockOrder(raced)
	}
	return nil, fmt.Errorf("cancel %d jobs: lost %d races", len(p.IDs), guardedRetries)
}

// cancelable reports whether cancelManySQL changes a job in state s.
func cancelable(s job.State, leaveRunning bool) bool {
	switch s {
	case job.StateCreated, job.StateQueued, job.StateRetry:
		return true
	case job.StateRunning:
		return !leaveRunning
	}
	return false
}

// lockOrder is ids sorted and without repeats, in a new slice: the order
// in which a statement over many rows locks them (JobCancelMany,
// UnitCancelMany, and the rows they try again after a race), so that two
// such statements never wait for each other's rows in opposite orders.
func lockOrder(ids []uuid.UUID) []uuid.UUID {
	ids = slices.Clone(ids)
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return slices.Compact(ids)
}
