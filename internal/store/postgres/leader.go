package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/store"
)

// leaderElectSQL takes the row when it is free or expired, or renews it for
// its holder (keeping elected_at); it returns nothing when another node
// holds a live term.
const leaderElectSQL = `
INSERT INTO docket_leader AS l (name, node_id, elected_at, expires_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO UPDATE SET
	node_id    = EXCLUDED.node_id,
	elected_at = CASE WHEN l.node_id = EXCLUDED.node_id THEN l.elected_at ELSE EXCLUDED.elected_at END,
	expires_at = EXCLUDED.expires_at
WHERE l.expires_at < EXCLUDED.elected_at OR l.node_id = EXCLUDED.node_id
RETURNING node_id`

// LeaderAttemptElect implements store.Store.
func (s *Store) LeaderAttemptElect(ctx context.Context, p *store.LeaderElectParams) (bool, error) {
	now := dbTime(p.Now)
	var node string
	err := s.pool.QueryRow(ctx, leaderElectSQL, p.Name, p.NodeID, now, dbTime(now.Add(p.TTL))).Scan(&node)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("elect %s leader %q: %w", p.Name, p.NodeID, err)
	}
	return node == p.NodeID, nil
}

// LeaderResign implements store.Store.
func (s *Store) LeaderResign(ctx context.Context, p *store.LeaderResignParams) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM docket_leader WHERE name = $1 AND node_id = $2`, p.Name, p.NodeID)
	if err != nil {
		return fmt.Errorf("resign %s leader %q: %w", p.Name, p.NodeID, err)
	}
	return nil
}
