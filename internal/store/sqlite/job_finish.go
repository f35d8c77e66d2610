package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

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

// The finish of a batch is three statements whatever its size, each taking
// the whole batch as one JSON array parameter (json_each), so neither the
// statement count nor the SQL text grows with the batch:
//
//  1. finishReadSQL reads the fencing columns of every job in the batch;
//     Go decides which finishes apply (the write lock is held, so nothing
//     changes in between);
//  2. finishAttemptsSQL writes the history rows of the applied ones, but
//     for successes: the job row keeps all a successful attempt's history
//     (its lease_owner too) and never changes again, so JobAttemptList
//     reads it from there;
//  3. finishUpdateSQL moves them, still guarded by state and attempt. The
//     unary + keeps the planner from driving the join from the state index
//     instead of looking each job up by id.

// finishReadSQL: ?1 is a JSON array of job ids.
const finishReadSQL = `SELECT j.id, j.job_type, j.queue, j.state, j.attempt,
	coalesce(j.lease_owner, ''), j.attempted_at, j.lease_expires_at, j.cancel_requested
FROM docket_jobs AS j WHERE j.id IN (SELECT value FROM json_each(?1))`

// finishAttemptsSQL: ?1 is a JSON array of
// [job_id, attempt, node, started_at, finished_at, outcome, error].
const finishAttemptsSQL = `INSERT INTO docket_job_attempts
	(job_id, attempt, node, started_at, finished_at, outcome, error)
SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6
FROM json_each(?1)`

// finishUpdateSQL: ?1 is a JSON array of
// [id, attempt, state, result, run_at, last_error, finished_at, refund],
// where a null result, run_at or last_error keeps the column, and refund 1
// (an attempt interrupted by its worker's shutdown) moves attempt_base up so
// the attempt does not count against max attempts; ?2 is Now.
const finishUpdateSQL = `UPDATE docket_jobs SET
	state = f.state, result = coalesce(f.result, docket_jobs.result),
	attempt_base = docket_jobs.attempt_base + f.refund,
	run_at = coalesce(f.run_at, docket_jobs.run_at),
	last_error = coalesce(f.last_error, docket_jobs.last_error), finished_at = f.finished_at,
	lease_expires_at = NULL, updated_at = ?2, version = docket_jobs.version + 1
FROM (SELECT value ->> 0 AS id, value ->> 1 AS attempt, value ->> 2 AS state,
		value ->> 3 AS result, value ->> 4 AS run_at, value ->> 5 AS last_error,
		value ->> 6 AS finished_at, value ->> 7 AS refund
	FROM json_each(?1)) AS f
WHERE docket_jobs.id = f.id AND +docket_jobs.state = 'RUNNING' AND docket_jobs.attempt = f.attempt`

// running is what finishing needs to know of a job.
type running struct {
	jobType, queue  string
	state           job.State
	attempt         int
	owner           string
	attemptedAt     sql.NullInt64
	leaseExpiresAt  sql.NullInt64
	cancelRequested bool
}

// JobFinishMany implements store.Store.
func (s *Store) JobFinishMany(ctx context.Context, p *store.JobFinishManyParams) ([]bool, error) {
	for _, f := range p.Jobs {
		switch f.State {
		case job.StateSuccess, job.StateRetry, job.StateDead, job.StateCanceled:
		default:
			return nil, fmt.Errorf("finish job %s: %w", f.ID,
				&job.InvalidTransitionError{JobID: f.ID.String(), From: job.StateRunning, To: f.State})
		}
	}
	applied := make([]bool, len(p.Jobs))
	if len(p.Jobs) == 0 {
		return applied, nil
	}
	var stmts [3]*sql.Stmt
	for i, q := range []string{finishReadSQL, finishAttemptsSQL, finishUpdateSQL} {
		st, err := s.prepare(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("prepare finish: %w", err)
		}
		stmts[i] = st
	}
	ids := make([]string, len(p.Jobs))
	for i, f := range p.Jobs {
		ids[i] = f.ID.String()
	}
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("finish jobs: %w", err)
	}
	now := micros(p.Now)
	err = s.write(ctx, func(tx *sql.Tx) error {
		jobs, err := readRunning(ctx, tx.StmtContext(ctx, stmts[0]), string(idsJSON))
		if err != nil {
			return err
		}
		var (
			attempts, updates [][]any
			ts                []job.Transition
		)
		for i, f := range p.Jobs {
			cur := jobs[ids[i]]
			if cur == nil || cur.state != job.StateRunning || cur.attempt != f.Attempt ||
				p.ExpiredOnly && !(cur.leaseExpiresAt.Valid && cur.leaseExpiresAt.Int64 < now) {
				continue // fenced off
			}
			// An attempt ending in RETRY while a cancel is requested ends
			// the job CANCELED, so the request is not lost to the next
			// attempt.
			to := f.State
			if to == job.StateRetry && cur.cancelRequested {
				to = job.StateCanceled
			}
			cur.state = to // a second finish of it in this batch is fenced off
			applied[i] = true
			at := micros(orNow(f.FinishedAt, p.Now))
			started := at
			if cur.attemptedAt.Valid {
				started = cur.attemptedAt.Int64
			}
			if outcome := outcomeOf(f.State, f.Outcome); to != job.StateSuccess || outcome != job.OutcomeSuccess {
				attempts = append(attempts, []any{ids[i], f.Attempt, cur.owner, started, at, outcome, f.Error})
			}
			var result, runAt, finishedAt any
			switch to {
			case job.StateSuccess:
				if f.Result != nil {
					result = string(f.Result)
				}
				finishedAt = at
			case job.StateRetry:
				runAt = micros(orNow(f.RunAt, p.Now))
			default:
				finishedAt = at
			}
			refund := 0
			if f.Outcome == job.OutcomeInterrupted {
				refund = 1
			}
			updates = append(updates, []any{ids[i], f.Attempt, to, result, runAt,
				nullString(f.Error), finishedAt, refund})
			ts = append(ts, job.Transition{JobID: f.ID, JobType: cur.jobType, Queue: cur.queue,
				From: job.StateRunning, To: to, Attempt: f.Attempt})
		}
		if len(ts) == 0 {
			return nil
		}
		if len(attempts) > 0 {
			attemptsJSON, err := json.Marshal(attempts)
			if err != nil {
				return fmt.Errorf("finish jobs: %w", err)
			}
			if _, err := tx.StmtContext(ctx, stmts[1]).ExecContext(ctx, string(attemptsJSON)); err != nil {
				return fmt.Errorf("record %d finished attempts: %w", len(attempts), err)
			}
		}
		updatesJSON, err := json.Marshal(updates)
		if err != nil {
			return fmt.Errorf("finish jobs: %w", err)
		}
		res, err := tx.StmtContext(ctx, stmts[2]).ExecContext(ctx, string(updatesJSON), now)
		if err != nil {
			return fmt.Errorf("finish %d jobs: %w", len(updates), err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("finish %d jobs: %w", len(updates), err)
		} else if n != int64(len(updates)) {
			return fmt.Errorf("finish %d jobs: %d changed", len(updates), n)
		}
		return insertStateChanged(ctx, tx, ts, p.Now)
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// readRunning reads the fencing columns of the jobs in idsJSON, by id.
func readRunning(ctx context.Context, st *sql.Stmt, idsJSON string) (map[string]*running, error) {
	rows, err := st.QueryContext(ctx, idsJSON)
	if err != nil {
		return nil, fmt.Errorf("read jobs to finish: %w", err)
	}
	defer rows.Close()
	jobs := map[string]*running{}
	for rows.Next() {
		var (
			id, state string
			r         running
		)
		if err := rows.Scan(&id, &r.jobType, &r.queue, &state, &r.attempt, &r.owner,
			&r.attemptedAt, &r.leaseExpiresAt, &r.cancelRequested); err != nil {
			return nil, fmt.Errorf("read jobs to finish: %w", err)
		}
		r.state = job.State(state)
		jobs[id] = &r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read jobs to finish: %w", err)
	}
	return jobs, nil
}

// outcomeOf is o, or the outcome implied by ending an attempt in state to.
func outcomeOf(to job.State, o job.Outcome) job.Outcome {
	if o != "" {
		return o
	}
	switch to {
	case job.StateSuccess:
		return job.OutcomeSuccess
	case job.StateCanceled:
		return job.OutcomeCanceled
	default:
		return job.OutcomeError
	}
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
	heartbeat, err := s.prepare(ctx, heartbeatSQL)
	if err != nil {
		return nil, fmt.Errorf("prepare heartbeat: %w", err)
	}
	expires := fromMicros(micros(p.Now.Add(p.LeaseDuration)))
	err = s.write(ctx, func(tx *sql.Tx) error {
		heartbeat := tx.StmtContext(ctx, heartbeat)
		for _, r := range out {
			var cancel, expiresAt int64
			err := heartbeat.QueryRowContext(ctx, r.Ref.ID.String(), r.Ref.Attempt,
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

// JobProgress implements store.Store.
func (s *Store) JobProgress(ctx context.Context, p *store.JobProgressParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE docket_jobs SET
			progress = ?3, progress_message = ?4, updated_at = ?5, version = version + 1
			WHERE id = ?1 AND state = 'RUNNING' AND attempt = ?2`,
			p.Ref.ID.String(), p.Ref.Attempt, p.Progress, p.Message, micros(p.Now))
		if err != nil {
			return fmt.Errorf("record progress of job %s: %w", p.Ref.ID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("record progress of job %s: %w", p.Ref.ID, err)
		} else if n == 0 {
			return fmt.Errorf("record progress of job %s attempt %d: %w", p.Ref.ID, p.Ref.Attempt, store.ErrLeaseLost)
		}
		return insertOutbox(ctx, tx, job.EventProgress, job.ProgressData{
			JobID: p.Ref.ID, Attempt: p.Ref.Attempt, Progress: p.Progress, Message: p.Message,
		}, p.Now)
	})
}
