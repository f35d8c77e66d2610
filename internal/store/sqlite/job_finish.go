package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// recordAttemptSQL writes the history row of a job's current attempt, if the
// job is still RUNNING at that attempt (and, with ?6 = 1, its lease expired
// before ?7).
const recordAttemptSQL = `INSERT INTO docket_job_attempts
	(job_id, attempt, node, started_at, finished_at, outcome, error)
SELECT id, attempt, coalesce(lease_owner, ''), coalesce(attempted_at, ?3), ?3, ?4, ?5
FROM docket_jobs
WHERE id = ?1 AND state = 'RUNNING' AND attempt = ?2 AND (?6 = 0 OR lease_expires_at < ?7)`

// The finish of a batch is two statements whatever its size, each taking
// the whole batch as one JSON array parameter (json_each), so neither the
// statement count nor the SQL text grows with the batch:
//
//  1. finishUpdateSQL moves the jobs still RUNNING at the attempt being
//     finished (and, for the rescuer, whose lease expired) and returns
//     what the history and the events need; a job not returned was fenced
//     off. The unary + keeps the planner from driving the join from the
//     state index instead of looking each job up by id.
//  2. finishAttemptsSQL writes the history rows of the applied ones, but
//     for successes: the job row keeps all a successful attempt's history
//     (its lease_owner too) and never changes again, so JobAttemptList
//     reads it from there.
//
// An attempt ending in RETRY while a cancel is requested ends the job
// CANCELED instead, so the request is not lost to the next attempt: the
// CASEs below, reading the row as it was.

// finishUpdateSQL: ?1 is a JSON array of
// [id, attempt, state, result, run_at, last_error, finished_at, refund, rowid],
// where a null result or last_error keeps the column, refund 1 (an
// attempt interrupted by its worker's shutdown) moves attempt_base up so
// the attempt does not count against max attempts, and rowid is the job's
// rowid hint (rowidHints) or null to search by id; ?2 is Now; ?3 = 1 for
// expired leases only. last_error is null unless job.SetsLastError says
// the end replaces it (JobFinishMany decides, in Go): the coalesce must stay
// the only writer of last_error here, so the statement agrees with that
// function, as PostgreSQL's finishSQL does.
const finishUpdateSQL = `WITH f AS MATERIALIZED (
	SELECT value ->> 0 AS id, value ->> 1 AS attempt, value ->> 2 AS state,
		value ->> 3 AS result, value ->> 4 AS run_at, value ->> 5 AS last_error,
		value ->> 6 AS finished_at, value ->> 7 AS refund, value ->> 8 AS rowid
	FROM jsonb_each(?1))
UPDATE docket_jobs SET
	state = CASE WHEN f.state = 'RETRY' AND docket_jobs.cancel_requested THEN 'CANCELED' ELSE f.state END,
	result = coalesce(f.result, docket_jobs.result),
	attempt_base = docket_jobs.attempt_base + f.refund,
	run_at = CASE WHEN f.state = 'RETRY' AND NOT docket_jobs.cancel_requested THEN f.run_at ELSE docket_jobs.run_at END,
	last_error = coalesce(f.last_error, docket_jobs.last_error),
	finished_at = CASE WHEN f.state = 'RETRY' AND NOT docket_jobs.cancel_requested THEN NULL ELSE f.finished_at END,
	lease_expires_at = NULL, updated_at = ?2, version = docket_jobs.version + 1
FROM f
WHERE docket_jobs.rowid = coalesce(f.rowid, (SELECT j.rowid FROM docket_jobs AS j WHERE j.id = f.id))
	AND docket_jobs.id = f.id AND +docket_jobs.state = 'RUNNING' AND docket_jobs.attempt = f.attempt
	AND (?3 = 0 OR docket_jobs.lease_expires_at < ?2)
RETURNING docket_jobs.id, docket_jobs.attempt, docket_jobs.state, docket_jobs.job_type, docket_jobs.queue,
	coalesce(docket_jobs.lease_owner, ''), docket_jobs.attempted_at`

// finishElem is one element of finishUpdateSQL's array, encoded by
// appendFinishElems without reflection or a boxed value per field (the
// batch used to be a [][]any for encoding/json: about five allocations
// per job).
type finishElem struct {
	id                      string
	attempt                 int
	state                   job.State
	result, lastError       string
	hasResult, hasLastError bool
	runAt                   int64
	hasRunAt                bool
	finishedAt              int64
	refund                  int
	rowid                   int64 // the rowid hint; 0: none, search by id
}

// appendFinishElems appends the JSON array of es to b: per element
// [id, attempt, state, result, run_at, last_error, finished_at, refund, rowid],
// null for what an element has not.
func appendFinishElems(b []byte, es []finishElem) []byte {
	b = append(b, '[')
	for i := range es {
		e := &es[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = appendJSONString(b, e.id)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(e.attempt), 10)
		b = append(b, ',')
		b = appendJSONString(b, string(e.state))
		b = append(b, ',')
		b = appendJSONStringOrNull(b, e.result, e.hasResult)
		b = append(b, ',')
		if e.hasRunAt {
			b = strconv.AppendInt(b, e.runAt, 10)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, ',')
		b = appendJSONStringOrNull(b, e.lastError, e.hasLastError)
		b = append(b, ',')
		b = strconv.AppendInt(b, e.finishedAt, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(e.refund), 10)
		b = append(b, ',')
		if e.rowid != 0 {
			b = strconv.AppendInt(b, e.rowid, 10)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, ']')
	}
	return append(b, ']')
}

func appendJSONStringOrNull(b []byte, s string, ok bool) []byte {
	if !ok {
		return append(b, "null"...)
	}
	return appendJSONString(b, s)
}

// appendJSONString appends s as a JSON string: as is between quotes when
// it holds only printable ASCII that needs no escape (ids, states, most
// messages), else as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			q, err := json.Marshal(s)
			if err != nil { // a string always encodes
				panic(fmt.Sprintf("encode a string as JSON: %v", err))
			}
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// finishAttemptsSQL: ?1 is a JSON array of
// [job_id, attempt, node, started_at, finished_at, outcome, error].
const finishAttemptsSQL = `INSERT INTO docket_job_attempts
	(job_id, attempt, node, started_at, finished_at, outcome, error)
SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6
FROM json_each(?1)`

// finished is what finishUpdateSQL returns of a job it moved.
type finished struct {
	to          job.State
	jobType     string
	queue       string
	owner       string
	attemptedAt sql.NullInt64
}

// attemptKey identifies one attempt of a job in a batch.
type attemptKey struct {
	id      string
	attempt int
}

// JobFinishMany implements store.Store: one write transaction.
func (s *Store) JobFinishMany(ctx context.Context, p *store.JobFinishManyParams) ([]job.State, error) {
	return s.jobFinishMany(ctx, p, func(fn func(tx *sql.Tx) error) error { return s.write(ctx, fn) })
}

// JobFinishMany implements store.Tx: in a savepoint of the transaction.
func (t *storeTx) JobFinishMany(ctx context.Context, p *store.JobFinishManyParams) ([]job.State, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return t.s.jobFinishMany(ctx, p, func(fn func(tx *sql.Tx) error) error { return t.savepoint(ctx, fn) })
}

// jobFinishMany writes the finishes by the statements of one transaction,
// which in gives it.
func (s *Store) jobFinishMany(ctx context.Context, p *store.JobFinishManyParams, in func(func(tx *sql.Tx) error) error) ([]job.State, error) {
	for _, f := range p.Jobs {
		if err := f.Validate(); err != nil {
			return nil, fmt.Errorf("finish jobs: %w", err)
		}
	}
	applied := make([]job.State, len(p.Jobs))
	if len(p.Jobs) == 0 {
		return applied, nil
	}
	now := micros(p.Now)
	ids := make([]string, len(p.Jobs))
	ats := make([]int64, len(p.Jobs)) // when each attempt ended
	// The first finish of an attempt in the batch applies; a second one of
	// the same attempt is fenced off (the job is no longer RUNNING).
	first := make(map[attemptKey]int, len(p.Jobs))
	updates := make([]finishElem, 0, len(p.Jobs))
	keys := make([]attemptKey, 0, len(p.Jobs)) // of updates
	for i, f := range p.Jobs {
		ids[i] = f.ID.String()
		ats[i] = micros(orNow(f.FinishedAt, p.Now))
		k := attemptKey{ids[i], f.Attempt}
		if _, dup := first[k]; dup {
			continue
		}
		first[k] = i
		u := finishElem{id: ids[i], attempt: f.Attempt, state: f.State, finishedAt: ats[i]}
		if f.State == job.StateSuccess && f.Result != nil {
			u.result, u.hasResult = string(f.Result), true
		}
		if job.SetsLastError(job.StateRunning, f.State, f.Error) {
			u.lastError, u.hasLastError = f.ErrorText(), true
		}
		if f.State == job.StateRetry {
			u.runAt, u.hasRunAt = micros(orNow(f.RunAt, p.Now)), true
		}
		if f.Outcome == job.OutcomeInterrupted {
			u.refund = 1
		}
		u.rowid = s.hints.take(f.ID)
		updates = append(updates, u)
		keys = append(keys, k)
	}
	updatesJSON := appendFinishElems(nil, updates)
	expiredOnly := 0
	if p.ExpiredOnly {
		expiredOnly = 1
	}
	err := in(func(tx *sql.Tx) error {
		clear(applied)
		moved, err := finishUpdate(ctx, tx, string(updatesJSON), len(updates), now, expiredOnly)
		if err != nil {
			return err
		}
		// A hint that missed is tried again by id: most misses are fenced
		// finishes, which miss again.
		var retry []finishElem
		for j, u := range updates {
			if u.rowid != 0 && moved[keys[j]] == nil {
				u.rowid = 0
				retry = append(retry, u)
			}
		}
		if len(retry) > 0 {
			retryJSON := appendFinishElems(nil, retry)
			more, err := finishUpdate(ctx, tx, string(retryJSON), len(retry), now, expiredOnly)
			if err != nil {
				return err
			}
			maps.Copy(moved, more)
		}
		if len(moved) == 0 {
			return nil
		}
		var attempts [][]any
		ts := make([]job.Transition, 0, len(moved))
		for i, f := range p.Jobs {
			k := attemptKey{ids[i], f.Attempt}
			m := moved[k]
			if m == nil || first[k] != i {
				continue // fenced off
			}
			applied[i] = m.to
			at := ats[i]
			started := at
			if m.attemptedAt.Valid {
				started = m.attemptedAt.Int64
			}
			if outcome := job.OutcomeOf(f.State, f.Outcome); m.to != job.StateSuccess || outcome != job.OutcomeSuccess {
				attempts = append(attempts, []any{ids[i], f.Attempt, m.owner, started, at, outcome, f.ErrorText()})
			}
			ts = append(ts, job.Transition{JobID: f.ID, JobType: m.jobType, Queue: m.queue,
				From: job.StateRunning, To: m.to, Attempt: f.Attempt})
		}
		if len(attempts) > 0 {
			attemptsJSON, err := json.Marshal(attempts)
			if err != nil {
				return fmt.Errorf("finish jobs: %w", err)
			}
			if _, err := tx.ExecContext(ctx, finishAttemptsSQL, string(attemptsJSON)); err != nil {
				return fmt.Errorf("record %d finished attempts: %w", len(attempts), err)
			}
		}
		return insertStateChanged(ctx, tx, ts, p.Now)
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// finishUpdate runs finishUpdateSQL and returns the jobs it moved.
// n is the batch's length.
func finishUpdate(ctx context.Context, tx *sql.Tx, updatesJSON string, n int, now int64, expiredOnly int) (map[attemptKey]*finished, error) {
	rows, err := tx.QueryContext(ctx, finishUpdateSQL, updatesJSON, now, expiredOnly)
	if err != nil {
		return nil, fmt.Errorf("finish jobs: %w", err)
	}
	defer rows.Close()
	// One set of scan destinations for every row, and the moved jobs in
	// one slice (at most one per element of the batch): not three
	// allocations per job.
	moved := make(map[attemptKey]*finished, n)
	all := make([]finished, 0, n)
	var (
		k     attemptKey
		state string
		m     finished
	)
	for rows.Next() {
		m = finished{}
		if err := rows.Scan(&k.id, &k.attempt, &state, &m.jobType, &m.queue, &m.owner, &m.attemptedAt); err != nil {
			return nil, fmt.Errorf("finish jobs: %w", err)
		}
		m.to = job.State(state)
		if len(all) == cap(all) {
			all = make([]finished, 0, max(n, 16)) // more rows than asked for: never, but never out of bounds either
		}
		all = append(all, m)
		moved[k] = &all[len(all)-1]
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("finish jobs: %w", err)
	}
	return moved, nil
}

// heartbeatSQL renews a lease to ?3 at the earliest: a heartbeat never
// shortens a lease, a renewal for less than what is left keeps the expiry.
const heartbeatSQL = `UPDATE docket_jobs
SET lease_expires_at = max(coalesce(lease_expires_at, ?3), ?3), updated_at = ?4, version = version + 1
WHERE id = ?1 AND state = 'RUNNING' AND attempt = ?2
RETURNING cancel_requested, lease_expires_at`

// JobHeartbeat implements store.Store.
func (s *Store) JobHeartbeat(ctx context.Context, p *store.JobHeartbeatParams) ([]*store.JobHeartbeatResult, error) {
	out := make([]*store.JobHeartbeatResult, len(p.Jobs))
	for i, ref := range p.Jobs {
		out[i] = &store.JobHeartbeatResult{Ref: ref}
	}
	if len(p.Jobs) == 0 {
		return out, nil
	}
	expires := fromMicros(micros(p.Now.Add(p.LeaseDuration)))
	err := s.write(ctx, func(tx *sql.Tx) error {
		for _, r := range out {
			var cancel, expiresAt int64
			err := tx.QueryRowContext(ctx, heartbeatSQL, r.Ref.ID.String(), r.Ref.Attempt,
				micros(expires), micros(p.Now)).Scan(&cancel, &expiresAt)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return fmt.Errorf("heartbeat attempt %d of job %s: %w", r.Ref.Attempt, r.Ref.ID, err)
			}
			r.Extended, r.CancelRequested, r.LeaseExpiresAt = true, cancel != 0, fromMicros(expiresAt)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// JobProgress implements store.Store. A nil Progress keeps the stored
// one, which the event carries.
func (s *Store) JobProgress(ctx context.Context, p *store.JobProgressParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		var progress float64
		err := tx.QueryRowContext(ctx, `UPDATE docket_jobs SET
			progress = COALESCE(?3, progress), progress_message = ?4, updated_at = ?5, version = version + 1
			WHERE id = ?1 AND state = 'RUNNING' AND attempt = ?2
			RETURNING progress`,
			p.Ref.ID.String(), p.Ref.Attempt, p.Progress, p.MessageText(), micros(p.Now)).Scan(&progress)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("record progress of job %s attempt %d: %w", p.Ref.ID, p.Ref.Attempt, store.ErrLeaseLost)
		}
		if err != nil {
			return fmt.Errorf("record progress of job %s: %w", p.Ref.ID, err)
		}
		return insertOutbox(ctx, tx, job.EventProgress, job.ProgressData{
			JobID: p.Ref.ID, Attempt: p.Ref.Attempt, Progress: progress, Message: p.MessageText(),
		}, p.Now)
	})
}
