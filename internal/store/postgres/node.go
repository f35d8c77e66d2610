package postgres

import (
	"context"
	"fmt"

	"github.com/docket-run/docket/internal/store"
)

// NodeHeartbeat implements store.Store: register, or refresh last_active
// (and hostname/pid) keeping started_at.
func (s *Store) NodeHeartbeat(ctx context.Context, p *store.NodeHeartbeatParams) error {
	now := dbTime(p.Now)
	_, err := s.pool.Exec(ctx, `
		INSERT INTO docket_nodes (id, hostname, pid, started_at, last_active)
		VALUES ($1, $2, $3, $4, $4)
		ON CONFLICT (id) DO UPDATE SET
			hostname    = EXCLUDED.hostname,
			pid         = EXCLUDED.pid,
			last_active = EXCLUDED.last_active`,
		p.ID, p.Hostname, p.PID, now)
	if err != nil {
		return fmt.Errorf("heartbeat node %q: %w", p.ID, err)
	}
	return nil
}

// NodeDelete implements store.Store. Deleting an unknown node is not an
// error.
func (s *Store) NodeDelete(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM docket_nodes WHERE id = $1`, id); err != nil {
		return fmt.Errorf("delete node %q: %w", id, err)
	}
	return nil
}

// NodeList implements store.Store, ordered by id.
func (s *Store) NodeList(ctx context.Context) ([]*store.Node, error) {
	rs, err := s.pool.Query(ctx, `SELECT id, hostname, pid, started_at, last_active FROM docket_nodes ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer rs.Close()
	var out []*store.Node
	for rs.Next() {
		var n store.Node
		if err := rs.Scan(&n.ID, &n.Hostname, &n.PID, &n.StartedAt, &n.LastActive); err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		n.StartedAt, n.LastActive = n.StartedAt.UTC(), n.LastActive.UTC()
		out = append(out, &n)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, nil
}

// NodeDeleteStale implements store.Store.
func (s *Store) NodeDeleteStale(ctx context.Context, p *store.NodeDeleteStaleParams) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM docket_nodes WHERE last_active < $1`, dbTime(p.LastActiveBefore))
	if err != nil {
		return 0, fmt.Errorf("delete stale nodes: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
