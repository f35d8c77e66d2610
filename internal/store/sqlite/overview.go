package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// The same bounded reads as on PostgreSQL (store/postgres/overview.go):
// the queues with QUEUED jobs by a loose scan of docket_jobs_acquire, each
// counted up to the cap through it; at most cap RUNNING and RETRY jobs
// through their partial indexes; DEAD up to the cap through
// docket_jobs_state_id; the newest finished jobs through
// docket_jobs_finished.
const (
	overviewQueuedSQL = `
WITH RECURSIVE q(name) AS (
	SELECT (SELECT queue FROM docket_jobs WHERE state = 'QUEUED' ORDER BY queue LIMIT 1)
	UNION ALL
	SELECT (SELECT j.queue FROM docket_jobs j WHERE j.state = 'QUEUED' AND j.queue > q.name ORDER BY j.queue LIMIT 1)
	FROM q WHERE q.name IS NOT NULL
), names AS (
	SELECT name FROM q WHERE name IS NOT NULL
	UNION
	SELECT name FROM docket_queues
)
SELECT n.name, coalesce(dq.paused, 0),
	(SELECT count(*) FROM (SELECT 1 FROM docket_jobs j WHERE j.state = 'QUEUED' AND j.queue = n.name ORDER BY j.sort_at LIMIT ?1))
FROM names n LEFT JOIN docket_queues dq ON dq.name = n.name
ORDER BY 1`
	overviewActiveSQL = `
SELECT 'RUNNING', queue, count(*) FROM (SELECT queue FROM docket_jobs WHERE state = 'RUNNING' ORDER BY lease_expires_at LIMIT ?1) GROUP BY queue
UNION ALL
SELECT 'RETRY', queue, count(*) FROM (SELECT queue FROM docket_jobs WHERE state = 'RETRY' ORDER BY run_at LIMIT ?1) GROUP BY queue`
	overviewDeadSQL = `
SELECT count(*) FROM (SELECT 1 FROM docket_jobs
	WHERE state = 'DEAD' AND state NOT IN ('QUEUED', 'RUNNING') ORDER BY id LIMIT ?1)`
	overviewFinishedSQL = `
SELECT finished_at, state, run_at, attempted_at FROM docket_jobs
WHERE finished_at IS NOT NULL AND finished_at >= ?1
ORDER BY finished_at DESC LIMIT ?2`
)

// JobOverview implements store.Store.
func (s *Store) JobOverview(ctx context.Context, p *store.JobOverviewParams) (*store.JobOverview, error) {
	if p.Cap <= 0 || p.FinishedCap <= 0 || p.LatencyOf < 0 {
		return nil, fmt.Errorf("job overview: bad bounds %d, %d, %d", p.Cap, p.FinishedCap, p.LatencyOf)
	}
	o := &store.JobOverview{}
	depths := store.NewQueueDepths(o)
	rows, err := s.reader.QueryContext(ctx, overviewQueuedSQL, p.Cap+1)
	if err != nil {
		return nil, fmt.Errorf("job overview: queued: %w", err)
	}
	for rows.Next() {
		var (
			q      = &store.QueueDepth{}
			paused int64
		)
		if err := rows.Scan(&q.Name, &paused, &q.Queued); err != nil {
			rows.Close()
			return nil, fmt.Errorf("job overview: queued: %w", err)
		}
		q.Paused = paused != 0
		depths.Queued(q)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job overview: queued: %w", err)
	}
	rows, err = s.reader.QueryContext(ctx, overviewActiveSQL, p.Cap+1)
	if err != nil {
		return nil, fmt.Errorf("job overview: running: %w", err)
	}
	for rows.Next() {
		var (
			state, name string
			n           int
		)
		if err := rows.Scan(&state, &name, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("job overview: running: %w", err)
		}
		depths.Active(state, name, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job overview: running: %w", err)
	}
	depths.Done(p.Cap)
	if err := s.reader.QueryRowContext(ctx, overviewDeadSQL, p.Cap+1).Scan(&o.Dead); err != nil {
		return nil, fmt.Errorf("job overview: dead: %w", err)
	}
	rows, err = s.reader.QueryContext(ctx, overviewFinishedSQL, micros(p.Since), p.FinishedCap)
	if err != nil {
		return nil, fmt.Errorf("job overview: finished: %w", err)
	}
	defer rows.Close()
	var fin []store.FinishedRow
	for rows.Next() {
		var (
			r               store.FinishedRow
			state           string
			finished, runAt int64
			attempted       sql.NullInt64
		)
		if err := rows.Scan(&finished, &state, &runAt, &attempted); err != nil {
			return nil, fmt.Errorf("job overview: finished: %w", err)
		}
		r.FinishedAt, r.State, r.RunAt, r.AttemptedAt = fromMicros(finished), job.State(state), fromMicros(runAt), fromNullMicros(attempted)
		fin = append(fin, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job overview: finished: %w", err)
	}
	store.SummarizeFinished(o, p, fin)
	return o, nil
}

// queueCountQueuedSQL: the queues of overviewQueuedSQL, with their pause
// flag's time, each with its QUEUED jobs counted up to ?1.
const queueCountQueuedSQL = `
WITH RECURSIVE q(name) AS (
	SELECT (SELECT queue FROM docket_jobs WHERE state = 'QUEUED' ORDER BY queue LIMIT 1)
	UNION ALL
	SELECT (SELECT j.queue FROM docket_jobs j WHERE j.state = 'QUEUED' AND j.queue > q.name ORDER BY j.queue LIMIT 1)
	FROM q WHERE q.name IS NOT NULL
), names AS (
	SELECT name FROM q WHERE name IS NOT NULL
	UNION
	SELECT name FROM docket_queues
)
SELECT n.name, coalesce(dq.paused, 0), dq.updated_at,
	(SELECT count(*) FROM (SELECT 1 FROM docket_jobs j WHERE j.state = 'QUEUED' AND j.queue = n.name ORDER BY j.sort_at LIMIT ?1))
FROM names n LEFT JOIN docket_queues dq ON dq.name = n.name`

// queueCountOtherSQL: at most ?1 jobs of every other state, counted by
// queue, each read through the index that holds only that state.
var queueCountOtherSQL = func() string {
	var parts []string
	for _, st := range store.QueueCountStates {
		read := "SELECT queue FROM docket_jobs INDEXED BY docket_jobs_state_id WHERE state = '" + string(st) +
			"' AND state NOT IN ('QUEUED', 'RUNNING') ORDER BY id LIMIT ?1"
		switch st {
		case job.StateRunning:
			read = "SELECT queue FROM docket_jobs INDEXED BY docket_jobs_lease_expiry WHERE state = 'RUNNING' ORDER BY lease_expires_at LIMIT ?1"
		case job.StateRetry:
			read = "SELECT queue FROM docket_jobs INDEXED BY docket_jobs_retry_due WHERE state = 'RETRY' ORDER BY run_at LIMIT ?1"
		}
		parts = append(parts, "SELECT '"+string(st)+"', queue, count(*) FROM ("+read+") GROUP BY queue")
	}
	return strings.Join(parts, "\nUNION ALL\n")
}()

// QueueCount implements store.Store.
func (s *Store) QueueCount(ctx context.Context, p *store.QueueCountParams) ([]*store.Queue, error) {
	if p.Cap <= 0 {
		return nil, fmt.Errorf("count queues: bad cap %d", p.Cap)
	}
	c := store.NewQueueCounts(p)
	rows, err := s.reader.QueryContext(ctx, queueCountQueuedSQL, p.Cap+1)
	if err != nil {
		return nil, fmt.Errorf("count queues: queued: %w", err)
	}
	for rows.Next() {
		var (
			name      string
			paused    int64
			updatedAt sql.NullInt64
			n         int
		)
		if err := rows.Scan(&name, &paused, &updatedAt, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("count queues: queued: %w", err)
		}
		c.Queued(name, paused != 0, fromNullMicros(updatedAt), n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count queues: queued: %w", err)
	}
	rows, err = s.reader.QueryContext(ctx, queueCountOtherSQL, p.Cap+1)
	if err != nil {
		return nil, fmt.Errorf("count queues: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			state, name string
			n           int
		)
		if err := rows.Scan(&state, &name, &n); err != nil {
			return nil, fmt.Errorf("count queues: %w", err)
		}
		c.Other(job.State(state), name, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count queues: %w", err)
	}
	return c.Done(), nil
}
