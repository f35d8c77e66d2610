package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// QueueSetPaused implements store.Store. Resuming a queue deletes its pause
// row (a row holds nothing but the flag, so a resumed queue without jobs is
// no longer listed) and wakes its workers.
func (s *Store) QueueSetPaused(ctx context.Context, p *store.QueueSetPausedParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.Name == "" {
		return fmt.Errorf("set queue paused: empty queue name")
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		if p.Paused {
			_, err = tx.ExecContext(ctx, `INSERT INTO docket_queues (name, paused, updated_at)
			VALUES (?, 1, ?)
			ON CONFLICT (name) DO UPDATE SET paused = 1, updated_at = excluded.updated_at`,
				p.Name, micros(p.Now))
		} else {
			_, err = tx.ExecContext(ctx, `DELETE FROM docket_queues WHERE name = ?`, p.Name)
		}
		if err != nil {
			return fmt.Errorf("set queue %q paused=%t: %w", p.Name, p.Paused, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !p.Paused {
		s.hub.Publish(store.TopicJobAvailable, p.Name)
	}
	return nil
}

// QueueList implements store.Store: queues that have jobs or a pause flag,
// ordered by name. Counts holds the states that have jobs.
func (s *Store) QueueList(ctx context.Context) ([]*store.Queue, error) {
	rows, err := s.reader.QueryContext(ctx, `
		SELECT name, paused, updated_at, NULL, 0 FROM docket_queues
		UNION ALL
		SELECT queue, NULL, NULL, state, count(*) FROM docket_jobs GROUP BY queue, state
		ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	defer rows.Close()
	var out []*store.Queue
	byName := map[string]*store.Queue{}
	for rows.Next() {
		var (
			name      string
			paused    sql.NullInt64
			updatedAt sql.NullInt64
			state     sql.NullString
			count     int
		)
		if err := rows.Scan(&name, &paused, &updatedAt, &state, &count); err != nil {
			return nil, fmt.Errorf("list queues: %w", err)
		}
		q := byName[name]
		if q == nil {
			q = &store.Queue{Name: name, Counts: map[job.State]int{}}
			byName[name] = q
			out = append(out, q)
		}
		if state.Valid {
			q.Counts[job.State(state.String)] = count
		} else {
			q.Paused, q.UpdatedAt = paused.Int64 != 0, fromNullMicros(updatedAt)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return out, nil
}
