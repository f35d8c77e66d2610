package postgres

import (
	"context"
	"fmt"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// scheduleSQL moves due RETRY jobs to QUEUED (oldest run_at first, through
// docket_jobs_retry_due), with one outbox row and a wakeup per queue. As in
// acquireSQL, the locked rows need no second state guard.
//
// $1 now, $2 max (NULL = all), $3 priority aging in microseconds.
var scheduleSQL = `
WITH scheduled AS (
	UPDATE docket_jobs j SET
		state      = 'QUEUED',
		sort_at    = j.run_at + j.priority * $3::bigint * interval '1 microsecond',
		updated_at = $1::timestamptz,
		version    = j.version + 1
	WHERE j.id = ANY(ARRAY(
		SELECT id FROM docket_jobs
		WHERE state = 'RETRY' AND run_at <= $1::timestamptz
		ORDER BY run_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED))
	RETURNING j.id, j.job_type, j.queue, j.attempt, j.state, j.run_at
),
outbox AS (` + outboxStateChanged("scheduled", "'RETRY'::text", "state", "$1::timestamptz") + `),
notify AS (` + notifyAvailable("scheduled", "$1::timestamptz") + `)
SELECT (SELECT count(*) FROM scheduled), (SELECT count(*) FROM notify)`

// JobSchedule implements store.Store. Max <= 0 means no limit.
func (s *Store) JobSchedule(ctx context.Context, p *store.JobScheduleParams) (int, error) {
	var n, queues int
	err := s.pool.QueryRow(ctx, scheduleSQL, dbTime(p.Now), limitOrNull(p.Max), s.agingMicros).Scan(&n, &queues)
	if err != nil {
		return 0, fmt.Errorf("schedule retries: %w", err)
	}
	return n, nil
}

// JobListExpired implements store.Store: oldest expiry first, through
// docket_jobs_lease_expiry. Max <= 0 means no limit.
func (s *Store) JobListExpired(ctx context.Context, p *store.JobListExpiredParams) ([]*job.Row, error) {
	rows, err := s.queryJobs(ctx, `
		SELECT `+jobColumns+` FROM docket_jobs
		WHERE state = 'RUNNING' AND lease_expires_at < $1
		ORDER BY lease_expires_at, id
		LIMIT $2`, dbTime(p.Now), limitOrNull(p.Max))
	if err != nil {
		return nil, fmt.Errorf("list expired jobs: %w", err)
	}
	return rows, nil
}

// deleteFinishedSQL deletes finished jobs, oldest first, and their
// attempts (reached through the attempts' primary key, which leads with
// job_id). $1 finished before, $2 limit (NULL: none).
const deleteFinishedSQL = `
WITH gone AS (
	DELETE FROM docket_jobs
	WHERE id = ANY(ARRAY(
		SELECT id FROM docket_jobs
		WHERE finished_at < $1 AND state IN ('SUCCESS', 'DEAD', 'CANCELED')
		ORDER BY finished_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED))
	RETURNING id
),
attempts AS (
	DELETE FROM docket_job_attempts WHERE job_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT count(*) FROM gone`

// JobDeleteFinished implements store.Store: oldest first, with their
// attempts. Max <= 0 means no limit.
func (s *Store) JobDeleteFinished(ctx context.Context, p *store.JobDeleteFinishedParams) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, deleteFinishedSQL, dbTime(p.FinishedBefore), limitOrNull(p.Max)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("delete finished jobs: %w", err)
	}
	return n, nil
}
