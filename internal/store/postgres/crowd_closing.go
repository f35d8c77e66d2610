package postgres

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// Units of closed pools (docs/human-work.md, "POST
// /v1/pools/{poolId}/close"): the ones no live assignment holds are ended,
// each in a transaction of its own that locks its run, then the unit
// (UnitLockClosing), and checks again.

// unitListClosingSQL: the open regular units of CLOSED pools with no
// ACTIVE assignment, by id. The pools come from docket_pools_status_id,
// their open units from docket_units_pool_state_id (one range per
// state), and the assignment check is a probe of the (unit_id,
// contributor_id) unique index.
const unitListClosingSQL = `
SELECT u.id, u.pool_id, u.run_id
FROM docket_pools p
JOIN docket_units u ON u.pool_id = p.id AND u.state IN ('NEW', 'JUDGABLE', 'PAUSED') AND NOT u.golden
WHERE p.status = 'CLOSED' AND ($1::uuid IS NULL OR p.id = $1::uuid) AND u.id > $2
	AND NOT EXISTS (SELECT 1 FROM docket_assignments a WHERE a.unit_id = u.id AND a.state = 'ACTIVE')
ORDER BY u.id
LIMIT $3`

// UnitListClosing implements store.Store.
func (s *Store) UnitListClosing(ctx context.Context, p *store.UnitListClosingParams) ([]*store.UnitClosingRef, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var pool *uuid.UUID
	if p.PoolID != uuid.Nil {
		pool = &p.PoolID
	}
	rs, err := s.pool.Query(ctx, unitListClosingSQL, pool, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list units of closed pools: %w", err)
	}
	out, err := collect(rs, func(r rowScanner) (*store.UnitClosingRef, error) {
		var (
			ref store.UnitClosingRef
			run *uuid.UUID
		)
		if err := r.Scan(&ref.ID, &ref.PoolID, &run); err != nil {
			return nil, err
		}
		ref.RunID = uuidOrNil(run)
		return &ref, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list units of closed pools: %w", err)
	}
	return out, nil
}

// UnitLockClosing implements store.Tx. The unit's row is locked by one
// statement, and its assignments read by the next: under READ COMMITTED
// that one sees an assignment a take committed while the lock waited
// for it (one statement would not: its snapshot is older than the wait).
func (t *storeTx) UnitLockClosing(ctx context.Context, id uuid.UUID) (*store.UnitClosing, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	var (
		out    store.UnitClosing
		status string
	)
	u, err := scanUnit(t.tx.QueryRow(ctx, `SELECT `+unitColumns+` FROM docket_units WHERE id = $1 FOR UPDATE`, id))
	if err != nil {
		return nil, fmt.Errorf("lock unit %s: %w", id, notFound(err))
	}
	out.Unit = u
	if err := t.tx.QueryRow(ctx, `
		SELECT p.status, EXISTS (SELECT 1 FROM docket_assignments a WHERE a.unit_id = $1 AND a.state = 'ACTIVE')
		FROM docket_pools p WHERE p.id = $2`, id, u.PoolID).Scan(&status, &out.Live); err != nil {
		return nil, fmt.Errorf("lock unit %s: its pool %s: %w", id, u.PoolID, notFound(err))
	}
	out.PoolStatus = crowd.PoolStatus(status)
	return &out, nil
}
