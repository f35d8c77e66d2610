package postgres

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// unitCancelManySQL withdraws a batch of units (their ids, distinct and
// sorted, in $1: the order their rows are locked in) and moves the
// counters of each pool once, in its shard $3, by what the regular ones
// left. The unit is joined a second time as prev, as the jobs in
// cancelManySQL: a unit that changed state after the statement's
// snapshot is left out, and told from a final one by its state in that
// snapshot (cur), so that the caller runs the statement again for it
// alone; prev's state is the one the counters move from.
//
// $1 ids, $2 now, $3 the counters' shard.
const unitCancelManySQL = `
WITH ids AS (
	SELECT unnest((SELECT $1::uuid[])) AS id, unnest(ARRAY(SELECT generate_series(1, cardinality($1::uuid[])))) AS ord
),
t AS (
	UPDATE docket_units u SET state = 'CANCELED', updated_at = $2::timestamptz
	FROM ids, docket_units prev
	WHERE u.id = ids.id AND prev.id = u.id AND u.state = prev.state
		AND u.state || '' IN ('NEW', 'JUDGABLE', 'PAUSED')
	RETURNING u.id, u.pool_id, u.golden, prev.state::text AS prev_state
),
d AS (
	SELECT pool_id, count(*) AS n,
		count(*) FILTER (WHERE prev_state = 'NEW') AS n_new,
		count(*) FILTER (WHERE prev_state = 'JUDGABLE') AS n_judgable,
		count(*) FILTER (WHERE prev_state = 'PAUSED') AS n_paused
	FROM t WHERE NOT golden GROUP BY pool_id
),
c AS (
	UPDATE docket_pool_counters pc SET
		units_new = pc.units_new - d.n_new,
		units_judgable = pc.units_judgable - d.n_judgable,
		units_paused = pc.units_paused - d.n_paused,
		units_canceled = pc.units_canceled + d.n
	FROM d WHERE pc.pool_id = d.pool_id AND pc.shard = $3
)
SELECT ids.ord, t.id IS NOT NULL, (SELECT cur.state::text FROM docket_units cur WHERE cur.id = ids.id AND t.id IS NULL)
FROM ids LEFT JOIN t ON t.id = ids.id`

// UnitCancelMany implements store.Store: each statement its own
// transaction.
func (s *Store) UnitCancelMany(ctx context.Context, p *store.UnitCancelManyParams) ([]store.UnitCancelManyResult, error) {
	return unitCancelMany(ctx, s.pool, p)
}

// UnitCancelMany implements store.Tx.
func (t *storeTx) UnitCancelMany(ctx context.Context, p *store.UnitCancelManyParams) ([]store.UnitCancelManyResult, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return unitCancelMany(ctx, t.tx, p)
}

func unitCancelMany(ctx context.Context, c conn, p *store.UnitCancelManyParams) ([]store.UnitCancelManyResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	out := make([]store.UnitCancelManyResult, len(p.IDs))
	if len(p.IDs) == 0 {
		return out, nil
	}
	ids := lockOrder(p.IDs)
	now, sh := dbTime(p.Now), shard(ctx)
	got := make(map[uuid.UUID]store.UnitCancelManyResult, len(ids))
	for range guardedRetries {
		rs, err := c.Query(ctx, unitCancelManySQL, ids, now, sh)
		if err != nil {
			return nil, fmt.Errorf("cancel %d units: %w", len(ids), err)
		}
		var (
			raced    []uuid.UUID
			ord      int
			canceled bool
			cur      *string
		)
		for rs.Next() {
			if err := rs.Scan(&ord, &canceled, &cur); err != nil {
				rs.Close()
				return nil, fmt.Errorf("cancel %d units: %w", len(ids), err)
			}
			id := ids[ord-1]
			switch {
			case canceled:
				got[id] = store.UnitCancelManyResult{State: crowd.UnitCanceled, Canceled: true}
			case cur == nil: // no such unit
				got[id] = store.UnitCancelManyResult{}
			case crowd.UnitState(*cur).Final():
				got[id] = store.UnitCancelManyResult{State: crowd.UnitState(*cur)}
			default:
				raced = append(raced, id) // changed under the statement
			}
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("cancel %d units: %w", len(ids), err)
		}
		if len(raced) == 0 {
			for i, id := range p.IDs {
				out[i] = got[id]
			}
			return out, nil
		}
		ids = lockOrder(raced)
	}
	return nil, fmt.Errorf("cancel %d units: lost %d races", len(p.IDs), guardedRetries)
}
