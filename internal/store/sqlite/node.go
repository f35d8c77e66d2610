package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/docket-run/docket/internal/store"
)

// NodeHeartbeat implements store.Store: insert the node, or refresh it
// keeping started_at.
func (s *Store) NodeHeartbeat(ctx context.Context, p *store.NodeHeartbeatParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO docket_nodes (id, hostname, pid, started_at, last_active)
			VALUES (?1, ?2, ?3, ?4, ?4)
			ON CONFLICT (id) DO UPDATE SET
				hostname = excluded.hostname, pid = excluded.pid, last_active = excluded.last_active`,
			p.ID, p.Hostname, p.PID, micros(p.Now)); err != nil {
			return fmt.Errorf("heartbeat node %q: %w", p.ID, err)
		}
		return nil
	})
}

// NodeDelete implements store.Store. Deleting an absent node is not an
// error: the node is gone either way.
func (s *Store) NodeDelete(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM docket_nodes WHERE id = ?`, id); err != nil {
			return fmt.Errorf("delete node %q: %w", id, err)
		}
		return nil
	})
}

// NodeList implements store.Store, ordered by id.
func (s *Store) NodeList(ctx context.Context) ([]*store.Node, error) {
	rows, err := s.reader.QueryContext(ctx,
		`SELECT id, hostname, pid, started_at, last_active FROM docket_nodes ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer rows.Close()
	var out []*store.Node
	for rows.Next() {
		var n store.Node
		var started, active int64
		if err := rows.Scan(&n.ID, &n.Hostname, &n.PID, &started, &active); err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		n.StartedAt, n.LastActive = fromMicros(started), fromMicros(active)
		out = append(out, &n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, nil
}

// NodeDeleteStale implements store.Store.
func (s *Store) NodeDeleteStale(ctx context.Context, p *store.NodeDeleteStaleParams) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM docket_nodes WHERE last_active < ?`,
			micros(p.LastActiveBefore))
		if err != nil {
			return fmt.Errorf("delete stale nodes: %w", err)
		}
		n, err = res.RowsAffected()
		if err != nil {
			return fmt.Errorf("delete stale nodes: %w", err)
		}
		return nil
	})
	return int(n), err
}
