package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// overviewQueuedSQL: the queues with QUEUED jobs, found by a loose scan of
// docket_jobs_acquire (one index probe per queue), and those of
// docket_queues, each with its QUEUED jobs counted up to $1 through the
// same index.
const overviewQueuedSQL = `
WITH RECURSIVE q(name) AS (
	(SELECT queue FROM docket_jobs WHERE state = 'QUEUED' ORDER BY queue LIMIT 1)
	UNION ALL
	SELECT (SELECT j.queue FROM docket_jobs j WHERE j.state = 'QUEUED' AND j.queue > q.name ORDER BY j.queue LIMIT 1)
	FROM q WHERE q.name IS NOT NULL
), names AS (
	SELECT name FROM q WHERE name IS NOT NULL
	UNION
	SELECT name FROM docket_queues
)
SELECT n.name, coalesce(dq.paused, false),
	(SELECT count(*) FROM (SELECT 1 FROM docket_jobs j WHERE j.state = 'QUEUED' AND j.queue = n.name ORDER BY j.sort_at LIMIT $1) c)
FROM names n LEFT JOIN docket_queues dq ON dq.name = n.name
ORDER BY 1`

// overviewActiveSQL: at most $1 RUNNING and $1 RETRY jobs (through
// docket_jobs_lease_expiry and docket_jobs_retry_due), counted by queue.
// Every capped read here is ordered by its index's key: with a LIMIT, that
// makes the planner walk the index and stop, where an unordered read may
// take a bitmap scan, which reads every matching index entry first
// (TestOverviewPlan).
const overviewActiveSQL = `
SELECT 'RUNNING', queue, count(*) FROM (SELECT queue FROM docket_jobs WHERE state = 'RUNNING' ORDER BY lease_expires_at LIMIT $1) r GROUP BY queue
UNION ALL
SELECT 'RETRY', queue, count(*) FROM (SELECT queue FROM docket_jobs WHERE state = 'RETRY' ORDER BY run_at LIMIT $1) r GROUP BY queue`

// overviewDeadSQL counts DEAD jobs up to $1: an index-only scan of
// docket_jobs_state_id (its predicate spelled out).
const overviewDeadSQL = `
SELECT count(*) FROM (SELECT 1 FROM docket_jobs
	WHERE state = 'DEAD' AND state NOT IN ('QUEUED', 'RUNNING') ORDER BY id LIMIT $1) d`

// overviewFinishedSQL: the newest $2 jobs finished since $1, backwards
// through docket_jobs_finished.
const overviewFinishedSQL = `
SELECT finished_at, state, run_at, attempted_at FROM docket_jobs
WHERE finished_at IS NOT NULL AND finished_at >= $1
ORDER BY finished_at DESC LIMIT $2`

// JobOverview implements store.Store.
func (s *Store) JobOverview(ctx context.Context, p *store.JobOverviewParams) (*store.JobOverview, error) {
	if p.Cap <= 0 || p.FinishedCap <= 0 || p.LatencyOf < 0 {
		return nil, fmt.Errorf("job overview: bad bounds %d, %d, %d", p.Cap, p.FinishedCap, p.LatencyOf)
	}
	o := &store.JobOverview{}
	depths := store.NewQueueDepths(o)
	rs, err := s.pool.Query(ctx, overviewQueuedSQL, p.Cap+1)
	if err != nil {
		return nil, fmt.Errorf("job overview: queued: %w", err)
	}
	for rs.Next() {
		q := &store.QueueDepth{}
		if err := rs.Scan(&q.Name, &q.Paused, &q.Queued); err != nil {
			rs.Close()
			return nil, fmt.Errorf("job overview: queued: %w", err)
		}
		depths.Queued(q)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("job overview: queued: %w", err)
	}
	rs, err = s.pool.Query(ctx, overviewActiveSQL, p.Cap+1)
	if err != nil {
		return nil, fmt.Errorf("job overview: running: %w", err)
	}
	for rs.Next() {
		var (
			state, name string
			n           int
		)
		if err := rs.Scan(&state, &name, &n); err != nil {
			rs.Close()
			return nil, fmt.Errorf("job overview: running: %w", err)
		}
		depths.Active(state, name, n)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("job overview: running: %w", err)
	}
	depths.Done(p.Cap)
	if err := s.pool.QueryRow(ctx, overviewDeadSQL, p.Cap+1).Scan(&o.Dead); err != nil {
		return nil, fmt.Errorf("job overview: dead: %w", err)
	}
	rs, err = s.pool.Query(ctx, overviewFinishedSQL, dbTime(p.Since), p.FinishedCap)
	if err != nil {
		return nil, fmt.Errorf("job overview: finished: %w", err)
	}
	defer rs.Close()
	var rows []store.FinishedRow
	for rs.Next() {
		var (
			r         store.FinishedRow
			state     string
			attempted *time.Time
		)
		if err := rs.Scan(&r.FinishedAt, &state, &r.RunAt, &attempted); err != nil {
			return nil, fmt.Errorf("job overview: finished: %w", err)
		}
		r.State = job.State(state)
		if attempted != nil {
			r.AttemptedAt = *attempted
		}
		rows = append(rows, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("job overview: finished: %w", err)
	}
	store.SummarizeFinished(o, p, rows)
	return o, nil
}

// queueCountQueuedSQL: the queues of overviewQueuedSQL, with their pause
// flag's time, each with its QUEUED jobs counted up to $1.
const queueCountQueuedSQL = `
WITH RECURSIVE q(name) AS (
	(SELECT queue FROM docket_jobs WHERE state = 'QUEUED' ORDER BY queue LIMIT 1)
	UNION ALL
	SELECT (SELECT j.queue FROM docket_jobs j WHERE j.state = 'QUEUED' AND j.queue > q.name ORDER BY j.queue LIMIT 1)
	FROM q WHERE q.name IS NOT NULL
), names AS (
	SELECT name FROM q WHERE name IS NOT NULL
	UNION
	SELECT name FROM docket_queues
)
SELECT n.name, coalesce(dq.paused, false), dq.updated_at,
	(SELECT count(*) FROM (SELECT 1 FROM docket_jobs j WHERE j.state = 'QUEUED' AND j.queue = n.name ORDER BY j.sort_at LIMIT $1) c)
FROM names n LEFT JOIN docket_queues dq ON dq.name = n.name`

// queueCountOtherSQL: at most $1 jobs of every other state, counted by
// queue, each read ordered by the key of the index that holds only that
// state (RUNNING: docket_jobs_lease_expiry; RETRY: docket_jobs_retry_due;
// the others: docket_jobs_state_id, index-only, queue being included).
var queueCountOtherSQL = func() string {
	var parts []string
	for _, st := range store.QueueCountStates {
		read := "SELECT queue FROM docket_jobs WHERE state = '" + string(st) + "' AND " + finishedPredicate + " ORDER BY id LIMIT $1"
		switch st {
		case job.StateRunning:
			read = "SELECT queue FROM docket_jobs WHERE state = 'RUNNING' ORDER BY lease_expires_at LIMIT $1"
		case job.StateRetry:
			read = "SELECT queue FROM docket_jobs WHERE state = 'RETRY' ORDER BY run_at LIMIT $1"
		}
		parts = append(parts, "SELECT '"+string(st)+"', queue, count(*) FROM ("+read+") r GROUP BY queue")
	}
	return strings.Join(parts, "\nUNION ALL\n")
}()

// QueueCount implements store.Store.
func (s *Store) QueueCount(ctx context.Context, p *store.QueueCountParams) ([]*store.Queue, error) {
	if p.Cap <= 0 {
		return nil, fmt.Errorf("count queues: bad cap %d", p.Cap)
	}
	c := store.NewQueueCounts(p)
	rs, err := s.pool.Query(ctx, queueCountQueuedSQL, p.Cap+1)
	if err != nil {
		return nil, fmt.Errorf("count queues: queued: %w", err)
	}
	for rs.Next() {
		var (
			name      string
			paused    bool
			updatedAt *time.Time
			n         int
		)
		if err := rs.Scan(&name, &paused, &updatedAt, &n); err != nil {
			rs.Close()
			return nil, fmt.Errorf("count queues: queued: %w", err)
		}
		c.Queued(name, paused, utcOrZero(updatedAt), n)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("count queues: queued: %w", err)
	}
	rs, err = s.pool.Query(ctx, queueCountOtherSQL, p.Cap+1)
	if err != nil {
		return nil, fmt.Errorf("count queues: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var (
			state, name string
			n           int
		)
		if err := rs.Scan(&state, &name, &n); err != nil {
			return nil, fmt.Errorf("count queues: %w", err)
		}
		c.Other(job.State(state), name, n)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("count queues: %w", err)
	}
	return c.Done(), nil
}
