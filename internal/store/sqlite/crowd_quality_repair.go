package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// unitRepair applies one repair plan to one regular unit: a reopen is the
// FINALIZED → JUDGABLE transition (which clears the result and moves the
// counters) and then the new target; a retarget or a recompute is one
// guarded UPDATE.
func unitRepair(ctx context.Context, tx *sql.Tx, p *store.UnitRepairParams) (*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var (
		q    string
		args []any
	)
	switch p.Action {
	case quality.RepairReopen:
		if _, err := unitTransition(ctx, tx, &store.UnitTransitionParams{ID: p.ID, From: crowd.UnitFinalized, To: crowd.UnitJudgable, Now: p.Now}); err != nil {
			var ite *crowd.InvalidTransitionError
			if errors.As(err, &ite) {
				ite.To = string(p.Action)
			}
			return nil, err
		}
		q = `UPDATE docket_units SET judgments_per_unit = ?1, updated_at = ?2
			WHERE id = ?3 AND state = 'JUDGABLE' AND golden = 0 RETURNING ` + unitColumns
		args = []any{p.Target, micros(p.Now), p.ID.String()}
	case quality.RepairRecompute:
		q = `UPDATE docket_units SET judgments_per_unit = ?1, updated_at = ?2, result = ?4, confidence = ?5
			WHERE id = ?3 AND state = 'FINALIZED' AND golden = 0 RETURNING ` + unitColumns
		args = []any{p.Target, micros(p.Now), p.ID.String(), string(p.Result), nullFloat(p.Confidence)}
	default:
		q = `UPDATE docket_units SET judgments_per_unit = ?1, updated_at = ?2
			WHERE id = ?3 AND state IN ('NEW', 'JUDGABLE', 'PAUSED') AND golden = 0 RETURNING ` + unitColumns
		args = []any{p.Target, micros(p.Now), p.ID.String()}
	}
	u, err := scanUnit(tx.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, unitRepairRefused(ctx, tx, p)
	}
	if err != nil {
		return nil, fmt.Errorf("repair unit %s: %w", p.ID, err)
	}
	return u, nil
}

// unitRepairRefused explains a repair that matched no row.
func unitRepairRefused(ctx context.Context, c conn, p *store.UnitRepairParams) error {
	var (
		state  string
		golden int64
	)
	if err := c.QueryRowContext(ctx, `SELECT state, golden FROM docket_units WHERE id = ?`, p.ID.String()).Scan(&state, &golden); err != nil {
		return fmt.Errorf("repair unit %s: %w", p.ID, notFound(err))
	}
	ite := &crowd.InvalidTransitionError{Of: "unit", ID: p.ID.String(), From: state, To: string(p.Action)}
	if golden != 0 {
		ite.Reason = "a golden unit is never repaired"
	}
	return ite
}

// UnitLock implements store.Tx: the write transaction holds every row.
func (t *storeTx) UnitLock(ctx context.Context, id uuid.UUID) (*crowd.Unit, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return unitGet(ctx, t.tx, id)
}

// UnitRepair implements store.Tx.
func (t *storeTx) UnitRepair(ctx context.Context, p *store.UnitRepairParams) (*crowd.Unit, error) {
	var out *crowd.Unit
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitRepair(ctx, tx, p)
		return err
	})
	return out, err
}

// QualityEventInsert implements store.Tx.
func (t *storeTx) QualityEventInsert(ctx context.Context, p *store.QualityEventInsertParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return t.savepoint(ctx, func(tx *sql.Tx) error { return insertOutbox(ctx, tx, p.Type, p.Data, p.Now) })
}
