package storetest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
)

// testReview: the store of review steps, UnitRedo and StepOutputAmend.
func testReview(t *testing.T, open opener) {
	t.Run("UnitRedo", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 2)
		u := b.units(t, p.ID, 1, crowd.UnitJudgable)[0]
		first, second := b.contributor(t), b.contributor(t)
		b.judgeUnit(t, p.ID, u.ID, first.ID, false)
		b.judgeUnit(t, p.ID, u.ID, second.ID, false)
		// first's judgment was tainted already (quality control): one clean.
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.JudgmentTaintMany(ctx, &store.JudgmentTaintManyParams{PoolID: p.ID, ContributorID: first.ID, Tainted: true})
			return err
		})
		b.finalize(t, u.ID)

		redo := func(p *store.UnitRedoParams) (*store.UnitRedone, error) {
			var out *store.UnitRedone
			err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
				var err error
				out, err = tx.UnitRedo(ctx, p)
				return err
			})
			return out, err
		}
		got, err := redo(&store.UnitRedoParams{ID: u.ID, Now: later})
		require.NoError(t, err)
		require.Equal(t, 1, got.Tainted, "the clean judgment only")
		require.Equal(t, crowd.UnitJudgable, got.Unit.State)
		require.Nil(t, got.Unit.Result)
		require.Nil(t, got.Unit.Confidence)
		require.True(t, got.Unit.FinalizedAt.IsZero())
		require.Equal(t, 2, got.Unit.JudgmentCount)
		require.Equal(t, 3, got.Unit.JudgmentsPerUnit, "one new judgment for the one tainted")
		stored, err := b.s.UnitGet(b.ctx, u.ID)
		require.NoError(t, err)
		requireSameUnit(t, got.Unit, stored)
		js, err := b.s.JudgmentList(b.ctx, &store.JudgmentListParams{UnitID: u.ID})
		require.NoError(t, err)
		require.Len(t, js, 2, "kept")
		for _, j := range js {
			require.True(t, j.Tainted, "judgment %s", j.ID)
		}
		// Forgiving either judge does not lift the review's rejection:
		// nothing to untaint, for the one flagged before and the clean one.
		for _, who := range []uuid.UUID{first.ID, second.ID} {
			b.inTx(t, func(ctx context.Context, tx store.Tx) error {
				units, err := tx.JudgmentTaintUnits(ctx, &store.JudgmentTaintManyParams{PoolID: p.ID, ContributorID: who, Tainted: false})
				require.NoError(t, err)
				require.Empty(t, units, "a rejected judgment is no unit to untaint")
				res, err := tx.JudgmentTaintMany(ctx, &store.JudgmentTaintManyParams{PoolID: p.ID, ContributorID: who, Tainted: false})
				require.NoError(t, err)
				require.Equal(t, store.SplitTaintedUnits(nil), res)
				return nil
			})
		}
		js, err = b.s.JudgmentList(b.ctx, &store.JudgmentListParams{UnitID: u.ID})
		require.NoError(t, err)
		for _, j := range js {
			require.True(t, j.Tainted, "judgment %s stays tainted after a forgiveness", j.ID)
		}
		c := b.counts(t, p.ID)
		require.Equal(t, 1, c.Judgable)
		require.Equal(t, 0, c.Finalized)
		// The judges may not take it again; a third contributor may.
		for _, who := range []uuid.UUID{first.ID, second.ID} {
			_, err := b.s.AssignmentTake(b.ctx, takeParams(p.ID, who))
			require.ErrorIs(t, err, crowd.ErrNoUnit)
		}
		b.takeUnit(t, p.ID, u.ID, b.contributor(t).ID, false)

		// Only a FINALIZED unit is redone; a rolled-back redo changes nothing.
		_, err = redo(&store.UnitRedoParams{ID: u.ID, Now: later})
		requireCrowdInvalidTransition(t, err, "unit", "JUDGABLE", "JUDGABLE")
		_, err = redo(&store.UnitRedoParams{ID: newID(), Now: later})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = redo(&store.UnitRedoParams{})
		require.ErrorContains(t, err, "unitId")
		require.ErrorContains(t, err, "now")
	})

	t.Run("UnitRedoNothingClean", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		u := b.units(t, p.ID, 1, crowd.UnitJudgable)[0]
		c := b.contributor(t)
		b.judgeUnit(t, p.ID, u.ID, c.ID, false)
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.JudgmentTaintMany(ctx, &store.JudgmentTaintManyParams{PoolID: p.ID, ContributorID: c.ID, Tainted: true})
			return err
		})
		b.finalize(t, u.ID)
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			got, err := tx.UnitRedo(ctx, &store.UnitRedoParams{ID: u.ID, Now: later})
			require.NoError(t, err)
			require.Equal(t, 0, got.Tainted)
			require.Equal(t, 2, got.Unit.JudgmentsPerUnit, "at least one more")
			return nil
		})
	})

	t.Run("UnitJudges", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		us := b.units(t, p.ID, 2, crowd.UnitJudgable)
		a, c, d := b.contributor(t), b.contributor(t), b.contributor(t)
		b.judgeUnit(t, p.ID, us[0].ID, a.ID, false) // a's first judgment in the pool
		ja := b.judgeUnit(t, p.ID, us[1].ID, a.ID, false)
		jc := b.judgeUnit(t, p.ID, us[1].ID, c.ID, false)
		b.judgeUnit(t, p.ID, us[1].ID, d.ID, false)
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.JudgmentTaintMany(ctx, &store.JudgmentTaintManyParams{PoolID: p.ID, ContributorID: d.ID, Tainted: true})
			return err
		})
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			got, err := tx.UnitJudges(ctx, us[1].ID)
			require.NoError(t, err)
			require.Equal(t, []store.UnitJudge{
				{ContributorID: a.ID, Trust: ja.Trust, Prior: 1},
				{ContributorID: c.ID, Trust: jc.Trust, Prior: 0},
			}, got, "clean judgments only, oldest first")
			none, err := tx.UnitJudges(ctx, newID())
			require.NoError(t, err)
			require.Empty(t, none)
			require.NotNil(t, none)
			return nil
		})
	})

	t.Run("StepOutputAmend", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		r := b.run(t)
		s := b.reachStep(t, r.ID, 0, flow.StepSucceeded)
		running := b.reachStep(t, r.ID, 1, flow.StepRunning)
		conf := 0.7
		amend := func(p *store.StepOutputAmendParams) (*flow.StepInstance, error) {
			var out *flow.StepInstance
			err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
				var err error
				out, err = tx.StepOutputAmend(ctx, p)
				return err
			})
			return out, err
		}
		got, err := amend(&store.StepOutputAmendParams{RunID: r.ID, Step: s.Step, Index: 0, Generation: 1,
			Output: json.RawMessage(`{"same":"no"}`), Confidence: &conf, Now: later})
		require.NoError(t, err)
		require.Equal(t, flow.StepSucceeded, got.State)
		require.Equal(t, 1, got.Generation)
		require.JSONEq(t, `{"same":"no"}`, string(got.Output))
		require.Equal(t, 0.7, *got.Confidence)
		list, err := b.s.StepList(b.ctx, r.ID)
		require.NoError(t, err)
		require.JSONEq(t, `{"same":"no"}`, string(list[0].Output))
		require.Equal(t, s.FinishedAt, list[0].FinishedAt, "it did not end again")

		_, err = amend(&store.StepOutputAmendParams{RunID: r.ID, Step: s.Step, Index: 1, Generation: 1, Output: json.RawMessage(`1`), Now: later})
		requireFlowInvalidTransition(t, err, "step", running.State, flow.StepSucceeded)
		_, err = amend(&store.StepOutputAmendParams{RunID: r.ID, Step: s.Step, Index: 0, Generation: 2, Output: json.RawMessage(`1`), Now: later})
		requireFlowInvalidTransition(t, err, "step", flow.StepSucceeded, flow.StepSucceeded)
		_, err = amend(&store.StepOutputAmendParams{RunID: newID(), Step: "a", Generation: 1, Output: json.RawMessage(`1`), Now: later})
		require.ErrorIs(t, err, store.ErrNotFound)
		bad := 2.0
		_, err = amend(&store.StepOutputAmendParams{RunID: r.ID, Generation: 0, Output: json.RawMessage(`{`), Confidence: &bad})
		for _, field := range []string{"step", "generation", "output", "confidence", "now"} {
			require.ErrorContains(t, err, field)
		}
	})
}
