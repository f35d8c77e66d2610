package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// queuePauseSQL upserts the pause flag.
const queuePauseSQL = `
INSERT INTO docket_queues (name, paused, updated_at) VALUES ($1, true, $2)
ON CONFLICT (name) DO UPDATE SET paused = true, updated_at = EXCLUDED.updated_at`

// queueResumeSQL deletes the pause row (a row holds nothing but the flag,
// so a resumed queue without jobs is no longer listed) and wakes the
// queue's workers, since its due jobs were left waiting.
const queueResumeSQL = `
WITH d AS (DELETE FROM docket_queues WHERE name = $1)
SELECT pg_notify('` + channelJobAvailable + `', $1)`

// QueueSetPaused implements store.Store.
func (s *Store) QueueSetPaused(ctx context.Context, p *store.QueueSetPausedParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.Name == "" {
		return fmt.Errorf("set queue paused: empty queue name")
	}
	var err error
	if p.Paused {
		_, err = s.pool.Exec(ctx, queuePauseSQL, p.Name, dbTime(p.Now))
	} else {
		_, err = s.pool.Exec(ctx, queueResumeSQL, p.Name)
	}
	if err != nil {
		return fmt.Errorf("set queue %q paused=%t: %w", p.Name, p.Paused, err)
	}
	return nil
}

// queueListSQL is every queue that has jobs or a row in docket_queues, one
// row per (queue, state with jobs), or one row with a NULL state for a
// queue without jobs.
const queueListSQL = `
SELECT coalesce(q.name, c.queue), coalesce(q.paused, false), q.updated_at, c.state, coalesce(c.n, 0)
FROM (SELECT queue, state, count(*) AS n FROM docket_jobs GROUP BY queue, state) c
FULL JOIN docket_queues q ON q.name = c.queue
ORDER BY 1, 4`

// QueueList implements store.Store, ordered by name.
func (s *Store) QueueList(ctx context.Context) ([]*store.Queue, error) {
	rs, err := s.pool.Query(ctx, queueListSQL)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	defer rs.Close()
	var (
		out  []*store.Queue
		last *store.Queue
	)
	for rs.Next() {
		var (
			name      string
			paused    bool
			updatedAt *time.Time
			state     *string
			n         int
		)
		if err := rs.Scan(&name, &paused, &updatedAt, &state, &n); err != nil {
			return nil, fmt.Errorf("list queues: %w", err)
		}
		if last == nil || last.Name != name {
			last = &store.Queue{Name: name, Paused: paused, UpdatedAt: utcOrZero(updatedAt), Counts: map[job.State]int{}}
			out = append(out, last)
		}
		if state != nil {
			last.Counts[job.State(*state)] = n
		}
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return out, nil
}
