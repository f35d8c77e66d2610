package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// JobCancelMany implements store.Store; the holders of the RUNNING jobs
// asked to stop are woken once it commits.
func (s *Store) JobCancelMany(ctx context.Context, p *store.JobCancelManyParams) ([]store.JobCancelManyResult, error) {
	var (
		out   []store.JobCancelManyResult
		asked []uuid.UUID
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, asked, err = jobCancelMany(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, id := range asked {
		s.hub.Publish(store.TopicJobCancel, id.String())
	}
	return out, nil
}

// JobCancelMany implements store.Tx; the holders of the RUNNING jobs
// asked to stop are woken once the transaction commits.
func (t *storeTx) JobCancelMany(ctx context.Context, p *store.JobCancelManyParams) ([]store.JobCancelManyResult, error) {
	var (
		out   []store.JobCancelManyResult
		asked []uuid.UUID
	)
	err := t.savepoint(ctx, func(sqlTx *sql.Tx) error {
		var err error
		out, asked, err = jobCancelMany(ctx, sqlTx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	t.cancelRequested = append(t.cancelRequested, asked...)
	return out, nil
}

// jobCancelMany cancels p's jobs in tx, which holds the write lock, and
// returns the RUNNING jobs it asked to stop. Two statements however many
// jobs, not one a job (see stepTransitionMany: inside a Tx's savepoint,
// a statement a row costs the square of the rows): one reads the jobs,
// one changes those to change. What the read finds stays so until the
// change, the write lock held. A RUNNING job asked already is left as it
// is, as JobCancel leaves it.
func jobCancelMany(ctx context.Context, tx *sql.Tx, p *store.JobCancelManyParams) ([]store.JobCancelManyResult, []uuid.UUID, error) {
	out := make([]store.JobCancelManyResult, len(p.IDs))
	if len(p.IDs) == 0 {
		return out, nil, nil
	}
	all := make([]string, len(p.IDs))
	for i, id := range p.IDs {
		all[i] = id.String()
	}
	js, err := json.Marshal(all)
	if err != nil {
		return nil, nil, fmt.Errorf("cancel %d jobs: %w", len(p.IDs), err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, job_type, queue, attempt, state, cancel_requested
		FROM docket_jobs WHERE id IN (SELECT value FROM json_each(?))`, string(js))
	if err != nil {
		return nil, nil, fmt.Errorf("cancel %d jobs: %w", len(p.IDs), err)
	}
	type found struct {
		t               job.Transition // From: the state read
		cancelRequested bool
		seen            bool // met in p.IDs already
	}
	jobs := make(map[uuid.UUID]*found, len(p.IDs))
	for rows.Next() {
		var (
			f     found
			id    string
			state string
		)
		if err := rows.Scan(&id, &f.t.JobType, &f.t.Queue, &f.t.Attempt, &state, &f.cancelRequested); err != nil {
			_ = rows.Close()
			return nil, nil, fmt.Errorf("cancel %d jobs: %w", len(p.IDs), err)
		}
		if f.t.JobID, err = uuid.Parse(id); err != nil {
			_ = rows.Close()
			return nil, nil, fmt.Errorf("cancel %d jobs: job id %q: %w", len(p.IDs), id, err)
		}
		f.t.From, f.t.To = job.State(state), job.State(state)
		jobs[f.t.JobID] = &f
	}
	if err := rows.Close(); err != nil {
		return nil, nil, fmt.Errorf("cancel %d jobs: %w", len(p.IDs), err)
	}
	var (
		change   []string
		canceled []job.Transition
		asked    []uuid.UUID
	)
	for _, id := range p.IDs {
		f := jobs[id]
		if f == nil || f.seen {
			continue
		}
		f.seen = true
		switch f.t.From {
		case job.StateCreated, job.StateQueued, job.StateRetry:
			f.t.To = job.StateCanceled
			change = append(change, f.t.JobID.String())
			canceled = append(canceled, f.t)
		case job.StateRunning:
			if !p.LeaveRunning && !f.cancelRequested {
				change = append(change, f.t.JobID.String())
				asked = append(asked, f.t.JobID)
			}
		}
	}
	if len(change) > 0 {
		if js, err = json.Marshal(change); err != nil {
			return nil, nil, fmt.Errorf("cancel %d jobs: %w", len(p.IDs), err)
		}
		var lastError any // NULL: keep it
		if p.Error != "" {
			lastError = p.ErrorText()
		}
		// The single cancel's changes (JobCancel): a waiting job as
		// transitionTx moves it to CANCELED, a RUNNING one asked.
		res, err := tx.ExecContext(ctx, `UPDATE docket_jobs SET
				state            = CASE WHEN state = 'RUNNING' THEN state ELSE 'CANCELED' END,
				cancel_requested = CASE WHEN state = 'RUNNING' THEN 1 ELSE cancel_requested END,
				finished_at      = CASE WHEN state = 'RUNNING' THEN finished_at ELSE ?2 END,
				lease_owner      = CASE WHEN state = 'RUNNING' THEN lease_owner END,
				lease_expires_at = CASE WHEN state = 'RUNNING' THEN lease_expires_at END,
				last_error       = CASE WHEN state = 'RUNNING' THEN last_error ELSE coalesce(?3, last_error) END,
				updated_at       = ?2,
				version          = version + 1
			WHERE id IN (SELECT value FROM json_each(?1))`, string(js), micros(p.Now), lastError)
		if err != nil {
			return nil, nil, fmt.Errorf("cancel %d jobs: %w", len(p.IDs), err)
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(change)) {
			return nil, nil, fmt.Errorf("cancel %d jobs: changed %d of %d under the write lock (%v)", len(p.IDs), n, len(change), err)
		}
		if err := insertStateChanged(ctx, tx, canceled, p.Now); err != nil {
			return nil, nil, err
		}
	}
	for i, id := range p.IDs {
		if f := jobs[id]; f != nil {
			out[i] = store.JobCancelManyResult{State: f.t.To, Canceled: f.t.To != f.t.From}
		}
	}
	return out, asked, nil
}
