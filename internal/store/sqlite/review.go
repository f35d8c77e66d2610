package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
)

// The store of review steps (store.ReviewTx).

// UnitRedo implements store.Tx.
func (t *storeTx) UnitRedo(ctx context.Context, p *store.UnitRedoParams) (*store.UnitRedone, error) {
	var out *store.UnitRedone
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitRedo(ctx, tx, p)
		return err
	})
	return out, err
}

// StepOutputAmend implements store.Tx.
func (t *storeTx) StepOutputAmend(ctx context.Context, p *store.StepOutputAmendParams) (*flow.StepInstance, error) {
	var out *flow.StepInstance
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = stepOutputAmend(ctx, tx, p)
		return err
	})
	return out, err
}

// UnitJudges implements store.Tx.
func (t *storeTx) UnitJudges(ctx context.Context, unitID uuid.UUID) ([]store.UnitJudge, error) {
	var out []store.UnitJudge
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitJudges(ctx, tx, unitID)
		return err
	})
	return out, err
}

// unitJudges: the clean judgments of a unit (docket_judgments_unit), each
// with the count of its contributor's earlier judgments in the pool
// (docket_judgments_pool_contributor).
func unitJudges(ctx context.Context, tx *sql.Tx, unitID uuid.UUID) ([]store.UnitJudge, error) {
	rs, err := tx.QueryContext(ctx, `SELECT j.contributor_id, j.trust,
			(SELECT count(*) FROM docket_judgments p
			 WHERE p.pool_id = j.pool_id AND p.contributor_id = j.contributor_id AND p.id < j.id)
		FROM docket_judgments j
		WHERE j.unit_id = ? AND j.tainted = 0
		ORDER BY j.id`, unitID.String())
	if err != nil {
		return nil, fmt.Errorf("list the judges of unit %s: %w", unitID, err)
	}
	defer rs.Close()
	out := []store.UnitJudge{}
	for rs.Next() {
		var (
			j     store.UnitJudge
			id    string
			trust sql.NullFloat64
		)
		if err := rs.Scan(&id, &trust, &j.Prior); err != nil {
			return nil, fmt.Errorf("list the judges of unit %s: %w", unitID, err)
		}
		if j.ContributorID, err = uuid.Parse(id); err != nil {
			return nil, fmt.Errorf("list the judges of unit %s: %w", unitID, err)
		}
		if trust.Valid {
			j.Trust = &trust.Float64
		}
		out = append(out, j)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list the judges of unit %s: %w", unitID, err)
	}
	return out, nil
}

// unitRedo reopens the FINALIZED unit (unitTransition: guarded, counters,
// result cleared), taints its clean judgments and raises its target.
func unitRedo(ctx context.Context, tx *sql.Tx, p *store.UnitRedoParams) (*store.UnitRedone, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if _, err := unitTransition(ctx, tx, &store.UnitTransitionParams{
		ID: p.ID, From: crowd.UnitFinalized, To: crowd.UnitJudgable, Now: p.Now,
	}); err != nil {
		return nil, err
	}
	// Every judgment of the unit is marked rejected (a forgiveness does
	// not lift a review's taint); n counts those that were clean.
	var n int64
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM docket_judgments WHERE unit_id = ? AND tainted = 0`, p.ID.String()).Scan(&n)
	if err == nil {
		_, err = tx.ExecContext(ctx, `UPDATE docket_judgments SET tainted = 1, rejected = 1 WHERE unit_id = ? AND rejected = 0`, p.ID.String())
	}
	if err != nil {
		return nil, fmt.Errorf("redo unit %s: taint its judgments: %w", p.ID, err)
	}
	u, err := scanUnit(tx.QueryRowContext(ctx, `UPDATE docket_units SET judgments_per_unit = judgment_count + ?2, updated_at = ?3
		WHERE id = ?1 RETURNING `+unitColumns, p.ID.String(), max(n, 1), micros(p.Now)))
	if err != nil {
		return nil, fmt.Errorf("redo unit %s: raise its target: %w", p.ID, err)
	}
	return &store.UnitRedone{Unit: u, Tainted: int(n)}, nil
}

func stepOutputAmend(ctx context.Context, tx *sql.Tx, p *store.StepOutputAmendParams) (*flow.StepInstance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	id := store.InstanceID(p.RunID, p.Step, p.Index)
	var confidence any
	if p.Confidence != nil {
		confidence = *p.Confidence
	}
	st, err := scanStep(tx.QueryRowContext(ctx, `UPDATE docket_steps SET output = ?5, confidence = ?6, updated_at = ?7
		WHERE run_id = ?1 AND step = ?2 AND step_index = ?3 AND generation = ?4 AND state = 'SUCCEEDED'
		RETURNING `+stepColumns, p.RunID.String(), p.Step, p.Index, p.Generation, nullJSON(p.Output), confidence, micros(p.Now)))
	if errors.Is(err, sql.ErrNoRows) {
		var state string
		if err := tx.QueryRowContext(ctx, `SELECT state FROM docket_steps WHERE run_id = ? AND step = ? AND step_index = ?`,
			p.RunID.String(), p.Step, p.Index).Scan(&state); err != nil {
			return nil, fmt.Errorf("amend step %s: %w", id, notFound(err))
		}
		return nil, &flow.InvalidTransitionError{Of: "step", ID: id, From: state, To: string(flow.StepSucceeded)}
	}
	if err != nil {
		return nil, fmt.Errorf("amend step %s: %w", id, err)
	}
	return st, nil
}
