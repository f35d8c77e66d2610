package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// unitRepair applies one repair plan to one regular unit: a reopen is the
// FINALIZED → JUDGABLE transition (which clears the result and moves the
// counters) and then the new target; a retarget or a recompute is one
// guarded UPDATE.
func unitRepair(ctx context.Context, c conn, p *store.UnitRepairParams) (*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	args := pgx.NamedArgs{"id": p.ID, "target": p.Target, "now": dbTime(p.Now)}
	var sql string
	switch p.Action {
	case quality.RepairReopen:
		if _, err := unitTransition(ctx, c, &store.UnitTransitionParams{ID: p.ID, From: crowd.UnitFinalized, To: crowd.UnitJudgable, Now: p.Now}); err != nil {
			var ite *crowd.InvalidTransitionError
			if errors.As(err, &ite) {
				ite.To = string(p.Action)
			}
			return nil, err
		}
		sql = `UPDATE docket_units SET judgments_per_unit = @target, updated_at = @now
			WHERE id = @id AND state = 'JUDGABLE' AND NOT golden RETURNING ` + unitColumns
	case quality.RepairRecompute:
		args["result"], args["confidence"] = string(p.Result), p.Confidence
		sql = `UPDATE docket_units SET judgments_per_unit = @target, result = @result::jsonb, confidence = @confidence,
				updated_at = @now
			WHERE id = @id AND state = 'FINALIZED' AND NOT golden RETURNING ` + unitColumns
	default:
		sql = `UPDATE docket_units SET judgments_per_unit = @target, updated_at = @now
			WHERE id = @id AND state IN ('NEW', 'JUDGABLE', 'PAUSED') AND NOT golden RETURNING ` + unitColumns
	}
	u, err := scanUnit(c.QueryRow(ctx, sql, args))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, unitRepairRefused(ctx, c, p)
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
		golden bool
	)
	if err := c.QueryRow(ctx, `SELECT state, golden FROM docket_units WHERE id = $1`, p.ID).Scan(&state, &golden); err != nil {
		return fmt.Errorf("repair unit %s: %w", p.ID, notFound(err))
	}
	ite := &crowd.InvalidTransitionError{Of: "unit", ID: p.ID.String(), From: state, To: string(p.Action)}
	if golden {
		ite.Reason = "a golden unit is never repaired"
	}
	return ite
}

// UnitLock implements store.Tx.
func (t *storeTx) UnitLock(ctx context.Context, id uuid.UUID) (*crowd.Unit, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	u, err := scanUnit(t.tx.QueryRow(ctx, `SELECT `+unitColumns+` FROM docket_units WHERE id = $1 FOR UPDATE`, id))
	if err != nil {
		return nil, fmt.Errorf("lock unit %s: %w", id, notFound(err))
	}
	return u, nil
}

// UnitRepair implements store.Tx.
func (t *storeTx) UnitRepair(ctx context.Context, p *store.UnitRepairParams) (*crowd.Unit, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return unitRepair(ctx, t.tx, p)
}

// QualityEventInsert implements store.Tx.
func (t *storeTx) QualityEventInsert(ctx context.Context, p *store.QualityEventInsertParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if t.tx == nil {
		return errTxDone
	}
	return insertOutboxData(ctx, t.tx, p.Type, p.Data, dbTime(p.Now))
}
