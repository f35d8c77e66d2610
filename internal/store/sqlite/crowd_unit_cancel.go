package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// UnitCancelMany implements store.Store.
func (s *Store) UnitCancelMany(ctx context.Context, p *store.UnitCancelManyParams) ([]store.UnitCancelManyResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []store.UnitCancelManyResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitCancelMany(ctx, tx, p)
		return err
	})
	return out, err
}

// UnitCancelMany implements store.Tx.
func (t *storeTx) UnitCancelMany(ctx context.Context, p *store.UnitCancelManyParams) ([]store.UnitCancelManyResult, error) {
	var out []store.UnitCancelManyResult
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitCancelMany(ctx, tx, p)
		return err
	})
	return out, err
}

// unitCancelMany withdraws p's units in tx, which holds the write lock:
// one statement reads them, one cancels those to cancel, one moves the
// counters of their pools (see jobCancelMany: never a statement a row).
func unitCancelMany(ctx context.Context, tx *sql.Tx, p *store.UnitCancelManyParams) ([]store.UnitCancelManyResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	out := make([]store.UnitCancelManyResult, len(p.IDs))
	if len(p.IDs) == 0 {
		return out, nil
	}
	all := make([]string, len(p.IDs))
	for i, id := range p.IDs {
		all[i] = id.String()
	}
	js, err := json.Marshal(all)
	if err != nil {
		return nil, fmt.Errorf("cancel %d units: %w", len(p.IDs), err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, pool_id, golden, state
		FROM docket_units WHERE id IN (SELECT value FROM json_each(?))`, string(js))
	if err != nil {
		return nil, fmt.Errorf("cancel %d units: %w", len(p.IDs), err)
	}
	type found struct {
		pool   string
		golden bool
		state  crowd.UnitState
		seen   bool // met in p.IDs already
	}
	units := make(map[uuid.UUID]*found, len(p.IDs))
	for rows.Next() {
		var (
			f  found
			id string
		)
		if err := rows.Scan(&id, &f.pool, &f.golden, &f.state); err != nil {
			_ = rows.Close()
			return nil, fmt.Errorf("cancel %d units: %w", len(p.IDs), err)
		}
		uid, err := uuid.Parse(id)
		if err != nil {
			_ = rows.Close()
			return nil, fmt.Errorf("cancel %d units: unit id %q: %w", len(p.IDs), id, err)
		}
		units[uid] = &f
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("cancel %d units: %w", len(p.IDs), err)
	}
	// What the regular units leave, by pool: the counters' deltas.
	type delta struct {
		Pool     string `json:"p"`
		New      int    `json:"n"`
		Judgable int    `json:"j"`
		Paused   int    `json:"a"`
	}
	var (
		cancel []string
		deltas []*delta
		byPool = map[string]*delta{}
	)
	for _, id := range p.IDs {
		f := units[id]
		if f == nil || f.seen || f.state.Final() {
			continue
		}
		f.seen = true
		cancel = append(cancel, id.String())
		if f.golden {
			continue
		}
		d := byPool[f.pool]
		if d == nil {
			d = &delta{Pool: f.pool}
			byPool[f.pool] = d
			deltas = append(deltas, d)
		}
		switch f.state {
		case crowd.UnitNew:
			d.New++
		case crowd.UnitJudgable:
			d.Judgable++
		case crowd.UnitPaused:
			d.Paused++
		}
	}
	if len(cancel) > 0 {
		if js, err = json.Marshal(cancel); err != nil {
			return nil, fmt.Errorf("cancel %d units: %w", len(p.IDs), err)
		}
		res, err := tx.ExecContext(ctx, `UPDATE docket_units SET state = 'CANCELED', updated_at = ?2
			WHERE id IN (SELECT value FROM json_each(?1))`, string(js), micros(p.Now))
		if err != nil {
			return nil, fmt.Errorf("cancel %d units: %w", len(p.IDs), err)
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(cancel)) {
			return nil, fmt.Errorf("cancel %d units: changed %d of %d under the write lock (%v)", len(p.IDs), n, len(cancel), err)
		}
	}
	if len(deltas) > 0 {
		if js, err = json.Marshal(deltas); err != nil {
			return nil, fmt.Errorf("cancel %d units: %w", len(p.IDs), err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE docket_pool_counters AS pc SET
				units_new = pc.units_new - d.n, units_judgable = pc.units_judgable - d.j,
				units_paused = pc.units_paused - d.a, units_canceled = pc.units_canceled + d.n + d.j + d.a
			FROM (SELECT value->>'p' AS pool, value->>'n' AS n, value->>'j' AS j, value->>'a' AS a FROM json_each(?1)) AS d
			WHERE pc.pool_id = d.pool AND pc.shard = ?2`, string(js), poolShard); err != nil {
			return nil, fmt.Errorf("cancel %d units: count: %w", len(p.IDs), err)
		}
	}
	for i, id := range p.IDs {
		if f := units[id]; f != nil {
			out[i] = store.UnitCancelManyResult{State: f.state, Canceled: !f.state.Final()}
			if !f.state.Final() {
				out[i].State = crowd.UnitCanceled
			}
		}
	}
	return out, nil
}
