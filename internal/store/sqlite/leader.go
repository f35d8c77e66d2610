package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/docket-run/docket/internal/store"
)

// LeaderAttemptElect implements store.Store: take the row when absent,
// expired, or ours (renewal keeps elected_at).
func (s *Store) LeaderAttemptElect(ctx context.Context, p *store.LeaderElectParams) (bool, error) {
	var leader string
	err := s.write(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `INSERT INTO docket_leader (name, node_id, elected_at, expires_at)
			VALUES (?1, ?2, ?3, ?4)
			ON CONFLICT (name) DO UPDATE SET
				node_id = excluded.node_id,
				elected_at = CASE WHEN docket_leader.node_id = excluded.node_id
					THEN docket_leader.elected_at ELSE excluded.elected_at END,
				expires_at = excluded.expires_at
			WHERE docket_leader.expires_at < ?3 OR docket_leader.node_id = ?2
			RETURNING node_id`,
			p.Name, p.NodeID, micros(p.Now), micros(p.Now.Add(p.TTL))).Scan(&leader)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // someone else leads
		}
		if err != nil {
			return fmt.Errorf("elect %s leader %q: %w", p.Name, p.NodeID, err)
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return leader == p.NodeID, nil
}

// LeaderResign implements store.Store.
func (s *Store) LeaderResign(ctx context.Context, p *store.LeaderResignParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM docket_leader WHERE name = ? AND node_id = ?`,
			p.Name, p.NodeID); err != nil {
			return fmt.Errorf("resign %s leader %q: %w", p.Name, p.NodeID, err)
		}
		return nil
	})
}
