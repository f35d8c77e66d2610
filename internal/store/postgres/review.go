package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
)

// The store of review steps (store.ReviewTx).

// UnitRedo implements store.Tx.
func (t *storeTx) UnitRedo(ctx context.Context, p *store.UnitRedoParams) (*store.UnitRedone, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return unitRedo(ctx, t.tx, p)
}

// StepOutputAmend implements store.Tx.
func (t *storeTx) StepOutputAmend(ctx context.Context, p *store.StepOutputAmendParams) (*flow.StepInstance, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return stepOutputAmend(ctx, t.tx, p)
}

// UnitJudges implements store.Tx.
func (t *storeTx) UnitJudges(ctx context.Context, unitID uuid.UUID) ([]store.UnitJudge, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return unitJudges(ctx, t.tx, unitID)
}

// unitJudgesSQL: the clean judgments of a unit (docket_judgments_unit),
// each with the count of its contributor's earlier judgments in the pool
// (docket_judgments_pool_contributor).
const unitJudgesSQL = `
SELECT j.contributor_id, j.trust,
	(SELECT count(*) FROM docket_judgments p
	 WHERE p.pool_id = j.pool_id AND p.contributor_id = j.contributor_id AND p.id < j.id)
FROM docket_judgments j
WHERE j.unit_id = $1 AND NOT j.tainted
ORDER BY j.id`

func unitJudges(ctx context.Context, c conn, unitID uuid.UUID) ([]store.UnitJudge, error) {
	rs, err := c.Query(ctx, unitJudgesSQL, unitID)
	if err != nil {
		return nil, fmt.Errorf("list the judges of unit %s: %w", unitID, err)
	}
	defer rs.Close()
	out := []store.UnitJudge{}
	for rs.Next() {
		var j store.UnitJudge
		if err := rs.Scan(&j.ContributorID, &j.Trust, &j.Prior); err != nil {
			return nil, fmt.Errorf("list the judges of unit %s: %w", unitID, err)
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
// Every judgment of the unit is marked rejected, so that forgiving its
// contributor later does not lift the review's taint.
func unitRedo(ctx context.Context, c conn, p *store.UnitRedoParams) (*store.UnitRedone, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if _, err := unitTransition(ctx, c, &store.UnitTransitionParams{
		ID: p.ID, From: crowd.UnitFinalized, To: crowd.UnitJudgable, Now: p.Now,
	}); err != nil {
		return nil, err
	}
	var n int
	if err := c.QueryRow(ctx, `
		WITH o AS (SELECT id, tainted FROM docket_judgments WHERE unit_id = $1 AND NOT rejected),
		t AS (
			UPDATE docket_judgments j SET tainted = true, rejected = true FROM o WHERE j.id = o.id
			RETURNING o.tainted AS was
		)
		SELECT count(*) FILTER (WHERE NOT was) FROM t`, p.ID).Scan(&n); err != nil {
		return nil, fmt.Errorf("redo unit %s: taint its judgments: %w", p.ID, err)
	}
	u, err := scanUnit(c.QueryRow(ctx, `
		UPDATE docket_units SET judgments_per_unit = judgment_count + $2, updated_at = $3
		WHERE id = $1 RETURNING `+unitColumns, p.ID, max(n, 1), dbTime(p.Now)))
	if err != nil {
		return nil, fmt.Errorf("redo unit %s: raise its target: %w", p.ID, err)
	}
	return &store.UnitRedone{Unit: u, Tainted: n}, nil
}

func stepOutputAmend(ctx context.Context, c conn, p *store.StepOutputAmendParams) (*flow.StepInstance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	id := store.InstanceID(p.RunID, p.Step, p.Index)
	st, err := scanStep(c.QueryRow(ctx, `
		UPDATE docket_steps SET output = $5::jsonb, confidence = $6, updated_at = $7
		WHERE run_id = $1 AND step = $2 AND step_index = $3 AND generation = $4 AND state = 'SUCCEEDED'
		RETURNING `+stepColumns, p.RunID, p.Step, p.Index, p.Generation, jsonText(p.Output), p.Confidence, dbTime(p.Now)))
	if errors.Is(err, pgx.ErrNoRows) {
		var state string
		if err := c.QueryRow(ctx, `SELECT state FROM docket_steps WHERE run_id = $1 AND step = $2 AND step_index = $3`,
			p.RunID, p.Step, p.Index).Scan(&state); err != nil {
			return nil, fmt.Errorf("amend step %s: %w", id, notFound(err))
		}
		return nil, &flow.InvalidTransitionError{Of: "step", ID: id, From: state, To: string(flow.StepSucceeded)}
	}
	if err != nil {
		return nil, fmt.Errorf("amend step %s: %w", id, err)
	}
	return st, nil
}
