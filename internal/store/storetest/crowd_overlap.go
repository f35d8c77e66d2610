package storetest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// ---- Dynamic overlap: retarget, unit.finalized's agreement, models ----

func testOverlap(t *testing.T, open opener) {
	t.Run("RetargetOpensOneMoreSlot", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		us := b.units(t, p.ID, 1, crowd.UnitJudgable)
		c1, c2 := b.contributor(t), b.contributor(t)
		b.take(t, takeParams(p.ID, c1.ID))
		_, err := b.s.AssignmentTake(b.ctx, takeParams(p.ID, c2.ID))
		require.ErrorIs(t, err, crowd.ErrNoUnit, "the one slot is taken")

		u, err := b.s.UnitRetarget(b.ctx, &store.UnitRetargetParams{ID: us[0].ID, JudgmentsPerUnit: 2, Now: later})
		require.NoError(t, err)
		require.Equal(t, 2, u.JudgmentsPerUnit)
		require.Equal(t, 1, u.SlotsTaken)
		requireTime(t, later, u.UpdatedAt)
		got, err := b.s.UnitGet(b.ctx, us[0].ID)
		require.NoError(t, err)
		requireSameUnit(t, u, got, "as returned and as read")
		tk := b.take(t, takeParams(p.ID, c2.ID))
		require.Equal(t, us[0].ID, tk.Unit.ID, "the new slot is taken")
		require.Equal(t, 2, tk.Unit.SlotsTaken)

		// Each random and ordered take sees it (the partial indexes of
		// PostgreSQL move the row in and out).
		u, err = b.s.UnitRetarget(b.ctx, &store.UnitRetargetParams{ID: us[0].ID, JudgmentsPerUnit: 3, Now: later})
		require.NoError(t, err)
		c3 := b.contributor(t)
		rp := takeParams(p.ID, c3.ID)
		rp.Strategy = crowd.StrategyRandom
		b.take(t, rp)
		require.Equal(t, 3, u.JudgmentsPerUnit)
		require.Equal(t, crowd.PoolCounts{Judgable: 1, ActiveAssignments: 3}, b.counts(t, p.ID), "no counter moves")
	})

	t.Run("RetargetRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		us := b.units(t, p.ID, 3, crowd.UnitNew)
		// NEW and PAUSED are open too.
		u, err := b.s.UnitRetarget(b.ctx, &store.UnitRetargetParams{ID: us[0].ID, JudgmentsPerUnit: 4, Now: later})
		require.NoError(t, err)
		require.Equal(t, 4, u.JudgmentsPerUnit)
		_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: us[1].ID, From: crowd.UnitNew, To: crowd.UnitJudgable, Now: later})
		require.NoError(t, err)
		_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: us[1].ID, From: crowd.UnitJudgable, To: crowd.UnitPaused, Now: later})
		require.NoError(t, err)
		u, err = b.s.UnitRetarget(b.ctx, &store.UnitRetargetParams{ID: us[1].ID, JudgmentsPerUnit: 2, Now: later})
		require.NoError(t, err)
		require.Equal(t, 2, u.JudgmentsPerUnit)

		_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: us[2].ID, From: crowd.UnitNew, To: crowd.UnitJudgable, Now: later})
		require.NoError(t, err)
		b.finalize(t, us[2].ID)
		_, err = b.s.UnitRetarget(b.ctx, &store.UnitRetargetParams{ID: us[2].ID, JudgmentsPerUnit: 2, Now: later})
		ite := requireCrowdInvalidTransition(t, err, "unit", "FINALIZED", "FINALIZED")
		require.NotEmpty(t, ite.Reason)
		f, err := b.s.UnitGet(b.ctx, us[2].ID)
		require.NoError(t, err)
		require.Equal(t, 1, f.JudgmentsPerUnit, "unchanged")

		gs, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitNew,
			Units: []*store.UnitInsertParams{newGolden(1)}, Now: base})
		require.NoError(t, err)
		_, err = b.s.UnitRetarget(b.ctx, &store.UnitRetargetParams{ID: gs[0].ID, JudgmentsPerUnit: 2, Now: later})
		ite = requireCrowdInvalidTransition(t, err, "unit", "JUDGABLE", "JUDGABLE")
		require.Contains(t, ite.Reason, "golden")

		_, err = b.s.UnitRetarget(b.ctx, &store.UnitRetargetParams{ID: newID(), JudgmentsPerUnit: 2, Now: later})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.UnitRetarget(b.ctx, &store.UnitRetargetParams{})
		requireFields(t, err, "unitId", "judgmentsPerUnit", "now")

		// In a transaction too.
		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			u, err := tx.UnitRetarget(ctx, &store.UnitRetargetParams{ID: us[0].ID, JudgmentsPerUnit: 5, Now: later})
			if err == nil {
				require.Equal(t, 5, u.JudgmentsPerUnit)
			}
			return err
		})
		require.NoError(t, err)
	})

	t.Run("FinalizeCarriesAgreement", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 2)
		us := b.units(t, p.ID, 2, crowd.UnitJudgable)
		j1, j2, c1, c2 := newID(), newID(), newID(), newID()
		conf := 0.6
		mark := b.outboxMark(t)
		_, err := b.s.UnitFinalize(b.ctx, &store.UnitFinalizeParams{ID: us[0].ID, Result: json.RawMessage(`{"same":"yes"}`),
			Confidence: &conf, LowConfidence: true, Now: later,
			Judgments: []crowd.JudgmentAgreement{{JudgmentID: j1, ContributorID: c1, Agreed: true}, {JudgmentID: j2, ContributorID: c2}}})
		require.NoError(t, err)
		// Without agreements (a task with no field to agree on): an empty list.
		_, err = b.s.UnitFinalize(b.ctx, &store.UnitFinalizeParams{ID: us[1].ID, Result: json.RawMessage(`{"note":["a"]}`), Now: later})
		require.NoError(t, err)
		evs := b.outboxSince(t, mark)
		ds := decodeEvents[crowd.UnitFinalizedData](t, evs, crowd.EventUnitFinalized)
		require.Len(t, ds, 2)
		require.True(t, ds[0].LowConfidence)
		require.Equal(t, []crowd.JudgmentAgreement{{JudgmentID: j1, ContributorID: c1, Agreed: true}, {JudgmentID: j2, ContributorID: c2}}, ds[0].Judgments)
		require.InDelta(t, 0.6, *ds[0].Confidence, 1e-9)
		require.False(t, ds[1].LowConfidence)
		require.Nil(t, ds[1].Confidence)
		var raw map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(evs[1].Data, &raw))
		require.JSONEq(t, `[]`, string(raw["judgments"]), "a list, never null")
		require.JSONEq(t, `false`, string(raw["lowConfidence"]))
		require.JSONEq(t, `null`, string(raw["confidence"]))
		for _, k := range []string{"unitId", "poolId", "runId", "stepIndex", "result", "judgmentCount"} {
			require.Contains(t, raw, k, "the fields unit.finalized had before stay")
		}

		_, err = b.s.UnitFinalize(b.ctx, &store.UnitFinalizeParams{ID: us[0].ID, Result: json.RawMessage(`1`), Now: later,
			Judgments: []crowd.JudgmentAgreement{{}}})
		requireFields(t, err, "judgments[0].judgmentId", "judgments[0].contributorId")
	})

	t.Run("PoolModels", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		ms, err := b.s.PoolModelList(b.ctx, p.ID)
		require.NoError(t, err)
		require.Empty(t, ms, "never estimated")

		m, err := b.s.PoolModelPut(b.ctx, &store.PoolModelPutParams{PoolID: p.ID, Field: "same",
			Model: json.RawMessage(`{"method":"ds","classes":["no","yes"]}`), Judgments: 30, Now: base})
		require.NoError(t, err)
		require.Equal(t, 30, m.Judgments)
		requireTime(t, base, m.EstimatedAt)
		_, err = b.s.PoolModelPut(b.ctx, &store.PoolModelPutParams{PoolID: p.ID, Field: "kind",
			Model: json.RawMessage(`{"method":"glad"}`), Judgments: 30, Now: base})
		require.NoError(t, err)
		// Replaced, not added.
		_, err = b.s.PoolModelPut(b.ctx, &store.PoolModelPutParams{PoolID: p.ID, Field: "same",
			Model: json.RawMessage(`{"method":"ds","classes":["no","yes","maybe"]}`), Judgments: 45, Now: later})
		require.NoError(t, err)
		ms, err = b.s.PoolModelList(b.ctx, p.ID)
		require.NoError(t, err)
		require.Len(t, ms, 2)
		require.Equal(t, "kind", ms[0].Field, "by field name")
		require.Equal(t, "same", ms[1].Field)
		require.Equal(t, p.ID, ms[1].PoolID)
		require.JSONEq(t, `{"method":"ds","classes":["no","yes","maybe"]}`, string(ms[1].Model))
		require.Equal(t, 45, ms[1].Judgments)
		requireTime(t, later, ms[1].EstimatedAt)

		other := b.pool(t, 1)
		ms, err = b.s.PoolModelList(b.ctx, other.ID)
		require.NoError(t, err)
		require.Empty(t, ms, "another pool's")

		_, err = b.s.PoolModelPut(b.ctx, &store.PoolModelPutParams{PoolID: newID(), Field: "same", Model: json.RawMessage(`{}`), Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.PoolModelPut(b.ctx, &store.PoolModelPutParams{Model: json.RawMessage(`{`), Judgments: -1})
		requireFields(t, err, "poolId", "field", "model", "judgments", "now")
	})
}
