package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// The maintenance queries name their partial index: without statistics the
// planner would rather take docket_jobs_state_id and sort.

// scheduleSQL: ?1 aging in µs, ?2 Now, ?3 limit.
const scheduleSQL = `UPDATE docket_jobs SET
	state = 'QUEUED', sort_at = run_at + priority * ?1, updated_at = ?2, version = version + 1
WHERE id IN (
	SELECT id FROM docket_jobs INDEXED BY docket_jobs_retry_due
	WHERE state = 'RETRY' AND run_at <= ?2
	ORDER BY run_at, id LIMIT ?3)
RETURNING id, job_type, queue, attempt`

// listExpiredSQL: ?1 Now, ?2 limit.
const listExpiredSQL = `SELECT ` + jobColumns + ` FROM docket_jobs INDEXED BY docket_jobs_lease_expiry
WHERE state = 'RUNNING' AND lease_expires_at < ?1
ORDER BY lease_expires_at, id LIMIT ?2`

// deleteFinishedSQL: ?1 finished before, ?2 limit. It returns the ids, for
// deleteAttemptsSQL.
const deleteFinishedSQL = `DELETE FROM docket_jobs WHERE id IN (
	SELECT id FROM docket_jobs INDEXED BY docket_jobs_finished
	WHERE finished_at < ?1 AND state IN ('SUCCESS', 'DEAD', 'CANCELED')
	ORDER BY finished_at LIMIT ?2)
RETURNING id`

// deleteAttemptsSQL: ?1 is a JSON array of job ids.
const deleteAttemptsSQL = `DELETE FROM docket_job_attempts WHERE job_id IN (SELECT value FROM json_each(?1))`

// JobSchedule implements store.Store.
func (s *Store) JobSchedule(ctx context.Context, p *store.JobScheduleParams) (int, error) {
	var ts []job.Transition
	err := s.write(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, scheduleSQL, s.agingMicros, micros(p.Now), limit(p.Max))
		if err != nil {
			return fmt.Errorf("schedule retries: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			t := job.Transition{From: job.StateRetry, To: job.StateQueued}
			var id string
			if err := rows.Scan(&id, &t.JobType, &t.Queue, &t.Attempt); err != nil {
				return fmt.Errorf("schedule retries: %w", err)
			}
			if t.JobID, err = uuid.Parse(id); err != nil {
				return fmt.Errorf("schedule retries: job id %q: %w", id, err)
			}
			ts = append(ts, t)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("schedule retries: %w", err)
		}
		return insertStateChanged(ctx, tx, ts, p.Now)
	})
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for _, t := range ts {
		if !seen[t.Queue] {
			seen[t.Queue] = true
			s.hub.Publish(store.TopicJobAvailable, t.Queue)
		}
	}
	return len(ts), nil
}

// JobListExpired implements store.Store.
func (s *Store) JobListExpired(ctx context.Context, p *store.JobListExpiredParams) ([]*job.Row, error) {
	rows, err := s.reader.QueryContext(ctx, listExpiredSQL, micros(p.Now), limit(p.Max))
	if err != nil {
		return nil, fmt.Errorf("list expired leases: %w", err)
	}
	out, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("list expired leases: %w", err)
	}
	return out, nil
}

// JobDeleteFinished implements store.Store: the jobs and their attempts,
// in one write transaction.
func (s *Store) JobDeleteFinished(ctx context.Context, p *store.JobDeleteFinishedParams) (int, error) {
	var n int
	err := s.write(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, deleteFinishedSQL, micros(p.FinishedBefore), limit(p.Max))
		if err != nil {
			return fmt.Errorf("delete finished jobs: %w", err)
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				_ = rows.Close()
				return fmt.Errorf("delete finished jobs: %w", err)
			}
			ids = append(ids, id)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return fmt.Errorf("delete finished jobs: %w", err)
		}
		n = len(ids)
		if n == 0 {
			return nil
		}
		idsJSON, err := json.Marshal(ids)
		if err != nil {
			return fmt.Errorf("delete finished jobs: %w", err)
		}
		if _, err := tx.ExecContext(ctx, deleteAttemptsSQL, string(idsJSON)); err != nil {
			return fmt.Errorf("delete attempts of %d finished jobs: %w", n, err)
		}
		return nil
	})
	return n, err
}
