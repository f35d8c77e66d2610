package sqlite

import (
	"context"
	"database/sql"
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

// finishSQL ends a RUNNING attempt under the same guard as recordAttemptSQL.
// NULL parameters keep the column: ?4 result, ?5 run_at, ?6 last_error.
const finishSQL = `UPDATE docket_jobs SET
	state = ?3, result = coalesce(?4, result), run_at = coalesce(?5, run_at),
	last_error = coalesce(?6, last_error), finished_at = ?7,
	lease_owner = NULL, lease_expires_at = NULL, updated_at = ?8, version = version + 1
WHERE id = ?1 AND state = 'RUNNING' AND attempt = ?2 AND (?9 = 0 OR lease_expires_at < ?8)
RETURNING job_type, queue`

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
	record, err := s.prepare(ctx, recordAttemptSQL)
	if err != nil {
		return nil, fmt.Errorf("prepare attempt record: %w", err)
	}
	finish, err := s.prepare(ctx, finishSQL)
	if err != nil {
		return nil, fmt.Errorf("prepare finish: %w", err)
	}
	now := micros(p.Now)
	expiredOnly := boolInt(p.ExpiredOnly)
	err = s.write(ctx, func(tx *sql.Tx) error {
		record, finish := tx.StmtContext(ctx, record), tx.StmtContext(ctx, finish)
		var ts []job.Transition
		for i, f := range p.Jobs {
			at := micros(orNow(f.FinishedAt, p.Now))
			res, err := record.ExecContext(ctx, f.ID.String(), f.Attempt, at,
				string(outcomeOf(f.State, f.Outcome)), f.Error, expiredOnly, now)
			if err != nil {
				return fmt.Errorf("record attempt %d of job %s: %w", f.Attempt, f.ID, err)
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				continue // fenced off: not RUNNING at this attempt
			}
			var result, runAt, finishedAt any
			switch f.State {
			case job.StateSuccess:
				result = nullJSON(f.Result)
				finishedAt = at
			case job.StateRetry:
				runAt = micros(orNow(f.RunAt, p.Now))
			default:
				finishedAt = at
			}
			var t job.Transition
			err = finish.QueryRowContext(ctx, f.ID.String(), f.Attempt, string(f.State),
				result, runAt, nullString(f.Error), finishedAt, now, expiredOnly).Scan(&t.JobType, &t.Queue)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return fmt.Errorf("finish attempt %d of job %s as %s: %w", f.Attempt, f.ID, f.State, err)
			}
			t.JobID, t.From, t.To, t.Attempt = f.ID, job.StateRunning, f.State, f.Attempt
			ts = append(ts, t)
			applied[i] = true
		}
		return insertStateChanged(ctx, tx, ts, p.Now)
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
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

const heartbeatSQL = `UPDATE docket_jobs SET lease_expires_at = ?3, updated_at = ?4, version = version + 1
WHERE id = ?1 AND state = 'RUNNING' AND attempt = ?2
RETURNING cancel_requested`

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
			var cancel int64
			err := heartbeat.QueryRowContext(ctx, r.Ref.ID.String(), r.Ref.Attempt,
				micros(expires), micros(p.Now)).Scan(&cancel)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return fmt.Errorf("heartbeat attempt %d of job %s: %w", r.Ref.Attempt, r.Ref.ID, err)
			}
			r.Extended, r.CancelRequested, r.LeaseExpiresAt = true, cancel != 0, expires
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
