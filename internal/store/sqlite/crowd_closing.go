package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// Units of closed pools (docs/human-work.md, "POST
// /v1/pools/{poolId}/close"): see the PostgreSQL store. Here the one
// writer serialises the transactions, so UnitLockClosing is a read in
// the caller's write transaction.

// UnitListClosing implements store.Store.
func (s *Store) UnitListClosing(ctx context.Context, p *store.UnitListClosingParams) ([]*store.UnitClosingRef, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var pool any
	if p.PoolID != uuid.Nil {
		pool = p.PoolID.String()
	}
	after := ""
	if p.After != uuid.Nil {
		after = p.After.String()
	}
	out, err := queryAll(ctx, s.reader, func(r scanner) (*store.UnitClosingRef, error) {
		var (
			ref        store.UnitClosingRef
			id, poolID string
			run        sql.NullString
			err        error
		)
		if err := r.Scan(&id, &poolID, &run); err != nil {
			return nil, err
		}
		if ref.ID, err = parseUUID("unit", id); err != nil {
			return nil, err
		}
		if ref.PoolID, err = parseUUID("pool", poolID); err != nil {
			return nil, err
		}
		if ref.RunID, err = parseNullUUID(run); err != nil {
			return nil, fmt.Errorf("unit %s: run id %q: %w", id, run.String, err)
		}
		return &ref, nil
	}, `SELECT u.id, u.pool_id, u.run_id
		FROM docket_pools p
		JOIN docket_units u ON u.pool_id = p.id AND u.state IN ('NEW', 'JUDGABLE', 'PAUSED') AND u.golden = 0
		WHERE p.status = 'CLOSED' AND (? IS NULL OR p.id = ?) AND u.id > ?
			AND NOT EXISTS (SELECT 1 FROM docket_assignments a WHERE a.unit_id = u.id AND a.state = 'ACTIVE')
		ORDER BY u.id
		LIMIT ?`, pool, pool, after, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list units of closed pools: %w", err)
	}
	return out, nil
}

// UnitLockClosing implements store.Tx.
func (t *storeTx) UnitLockClosing(ctx context.Context, id uuid.UUID) (*store.UnitClosing, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	u, err := unitGet(ctx, t.tx, id)
	if err != nil {
		return nil, fmt.Errorf("lock unit %s: %w", id, err)
	}
	out := &store.UnitClosing{Unit: u}
	var status string
	if err := t.tx.QueryRowContext(ctx, `
		SELECT p.status, EXISTS (SELECT 1 FROM docket_assignments a WHERE a.unit_id = ? AND a.state = 'ACTIVE')
		FROM docket_pools p WHERE p.id = ?`, id.String(), u.PoolID.String()).Scan(&status, &out.Live); err != nil {
		return nil, fmt.Errorf("lock unit %s: its pool %s: %w", id, u.PoolID, notFound(err))
	}
	out.PoolStatus = crowd.PoolStatus(status)
	return out, nil
}
