package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// testQualityRepair covers what the repair of a flag writes: UnitRepair
// (retarget, recompute, reopen), QualityEventInsert, and the judgments of
// one contributor in a pool (JudgmentList by ContributorID).
func testQualityRepair(t *testing.T, open opener) {
	t.Run("UnitRepair", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		us := b.units(t, p.ID, 3, crowd.UnitJudgable)
		gs, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable,
			Units: []*store.UnitInsertParams{newGolden(1)}, Now: base})
		require.NoError(t, err)
		open, recompute, reopen, golden := us[0], us[1], us[2], gs[0]
		conf := 0.75
		for _, u := range []*crowd.Unit{recompute, reopen} {
			_, err := b.s.UnitFinalize(b.ctx, &store.UnitFinalizeParams{ID: u.ID, Result: json.RawMessage(`{"same":"yes"}`), Confidence: &conf, Now: at(time.Minute)})
			require.NoError(t, err)
		}
		require.Equal(t, crowd.PoolCounts{Judgable: 1, Finalized: 2, Golden: 1}, b.counts(t, p.ID))
		outboxBefore := b.outboxTypes(t)

		repair := func(p *store.UnitRepairParams) (*crowd.Unit, error) {
			var u *crowd.Unit
			err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
				var err error
				u, err = tx.UnitRepair(ctx, p)
				return err
			})
			return u, err
		}
		now := at(time.Hour)
		// Retarget: an open unit's target (and its free slots) move.
		u, err := repair(&store.UnitRepairParams{ID: open.ID, Action: quality.RepairRetarget, Target: 5, Now: now})
		require.NoError(t, err)
		require.Equal(t, crowd.UnitJudgable, u.State)
		require.Equal(t, 5, u.JudgmentsPerUnit)
		require.Equal(t, now, u.UpdatedAt)
		// Recompute: a new result and confidence, still FINALIZED.
		lo := 0.5
		u, err = repair(&store.UnitRepairParams{ID: recompute.ID, Action: quality.RepairRecompute, Target: 4,
			Result: json.RawMessage(`{"same":"no"}`), Confidence: &lo, Now: now})
		require.NoError(t, err)
		require.Equal(t, crowd.UnitFinalized, u.State)
		require.JSONEq(t, `{"same":"no"}`, string(u.Result))
		require.Equal(t, lo, *u.Confidence)
		require.Equal(t, 4, u.JudgmentsPerUnit)
		require.Equal(t, at(time.Minute), u.FinalizedAt, "the finalization time stays")
		// Recompute to no confidence (a task without a categorical field).
		u, err = repair(&store.UnitRepairParams{ID: recompute.ID, Action: quality.RepairRecompute, Target: 4,
			Result: json.RawMessage(`{"same":"no"}`), Now: now})
		require.NoError(t, err)
		require.Nil(t, u.Confidence)
		// Reopen: JUDGABLE, the result cleared, counted.
		u, err = repair(&store.UnitRepairParams{ID: reopen.ID, Action: quality.RepairReopen, Target: 4, Now: now})
		require.NoError(t, err)
		require.Equal(t, crowd.UnitJudgable, u.State)
		require.Nil(t, u.Result)
		require.Nil(t, u.Confidence)
		require.True(t, u.FinalizedAt.IsZero())
		require.Equal(t, 4, u.JudgmentsPerUnit)
		got, err := b.s.UnitGet(b.ctx, reopen.ID)
		require.NoError(t, err)
		requireSameUnit(t, u, got)
		require.Equal(t, crowd.PoolCounts{Judgable: 2, Finalized: 1, Golden: 1}, b.counts(t, p.ID))
		require.Equal(t, outboxBefore, b.outboxTypes(t), "a repair writes no event of its own")

		// UnitLock reads the unit as UnitGet does; an unknown one is not found.
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			locked, err := tx.UnitLock(ctx, reopen.ID)
			require.NoError(t, err)
			requireSameUnit(t, got, locked)
			_, err = tx.UnitLock(ctx, newID())
			require.ErrorIs(t, err, store.ErrNotFound)
			return nil
		})

		// Refused: the wrong state, a golden unit, an unknown unit.
		for _, c := range []struct {
			p    *store.UnitRepairParams
			from string
		}{
			{&store.UnitRepairParams{ID: recompute.ID, Action: quality.RepairRetarget, Target: 3, Now: now}, "FINALIZED"},
			{&store.UnitRepairParams{ID: open.ID, Action: quality.RepairReopen, Target: 3, Now: now}, "JUDGABLE"},
			{&store.UnitRepairParams{ID: open.ID, Action: quality.RepairRecompute, Target: 3, Result: json.RawMessage(`{}`), Now: now}, "JUDGABLE"},
		} {
			_, err := repair(c.p)
			requireCrowdInvalidTransition(t, err, "unit", c.from, string(c.p.Action))
		}
		_, err = repair(&store.UnitRepairParams{ID: golden.ID, Action: quality.RepairRetarget, Target: 3, Now: now})
		ite := requireCrowdInvalidTransition(t, err, "unit", "JUDGABLE", "retarget")
		require.Contains(t, ite.Reason, "golden")
		_, err = repair(&store.UnitRepairParams{ID: newID(), Action: quality.RepairRetarget, Target: 3, Now: now})
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Equal(t, crowd.PoolCounts{Judgable: 2, Finalized: 1, Golden: 1}, b.counts(t, p.ID), "refusals change nothing")

		// A rolled-back reopen leaves the unit and the counters.
		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.UnitRepair(ctx, &store.UnitRepairParams{ID: recompute.ID, Action: quality.RepairReopen, Target: 3, Now: now}); err != nil {
				return err
			}
			return errRollback
		})
		require.ErrorIs(t, err, errRollback)
		require.Equal(t, crowd.PoolCounts{Judgable: 2, Finalized: 1, Golden: 1}, b.counts(t, p.ID))

		bad := 2.0
		_, err = repair(&store.UnitRepairParams{Action: "explode"})
		requireFields(t, err, "unitId", "action", "target", "now")
		_, err = repair(&store.UnitRepairParams{ID: open.ID, Action: quality.RepairRecompute, Result: json.RawMessage(`{`), Confidence: &bad, Target: 1, Now: now})
		requireFields(t, err, "result", "confidence")
		_, err = repair(&store.UnitRepairParams{ID: open.ID, Action: quality.RepairReopen, Result: json.RawMessage(`{}`), Confidence: &lo, Target: 1, Now: now})
		requireFields(t, err, "result", "confidence")
	})

	t.Run("EventInsert", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		before := len(b.outboxTypes(t))
		data := quality.TestJudgmentEvaluatedData{JudgmentID: newID(), ContributorID: newID(), PoolID: newID(), Correct: true, Trust: 0.75}
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			return tx.QualityEventInsert(ctx, &store.QualityEventInsertParams{Type: quality.EventTestJudgmentEvaluated, Data: data, Now: base})
		})
		rows, err := b.s.OutboxList(b.ctx, &store.OutboxListParams{Limit: 100000})
		require.NoError(t, err)
		require.Len(t, rows, before+1)
		last := rows[len(rows)-1]
		require.Equal(t, quality.EventTestJudgmentEvaluated, last.Type)
		want, err := json.Marshal(data)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(last.Data))
		// Rolled back with its transaction.
		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			if err := tx.QualityEventInsert(ctx, &store.QualityEventInsertParams{Type: quality.EventContributorFlagged, Data: data, Now: base}); err != nil {
				return err
			}
			return errRollback
		})
		require.ErrorIs(t, err, errRollback)
		require.Len(t, b.outboxTypes(t), before+1)
		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.QualityEventInsert(ctx, &store.QualityEventInsertParams{Type: "job.state_changed", Data: func() {}})
		})
		requireFields(t, err, "type", "data", "now")
		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.QualityEventInsert(ctx, &store.QualityEventInsertParams{Type: quality.EventUnitResultChanged, Now: base})
		})
		requireFields(t, err, "data")
	})

	t.Run("JudgmentsOfContributor", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p, other := b.pool(t, 3), b.pool(t, 3)
		us := b.units(t, p.ID, 3, crowd.UnitJudgable)
		elsewhere := b.units(t, other.ID, 1, crowd.UnitJudgable)[0]
		alice, bob := b.contributor(t), b.contributor(t)
		var mine []*crowd.Judgment
		for _, u := range us {
			mine = append(mine, b.judgeUnit(t, p.ID, u.ID, alice.ID, false))
			b.judgeUnit(t, p.ID, u.ID, bob.ID, false)
		}
		b.judgeUnit(t, other.ID, elsewhere.ID, alice.ID, false)
		list := func(lp *store.JudgmentListParams) []*crowd.Judgment {
			t.Helper()
			js, err := b.s.JudgmentList(b.ctx, lp)
			require.NoError(t, err)
			var inTx []*crowd.Judgment
			b.inTx(t, func(ctx context.Context, tx store.Tx) error {
				var err error
				inTx, err = tx.JudgmentList(ctx, lp)
				return err
			})
			require.Equal(t, js, inTx)
			return js
		}
		js := list(&store.JudgmentListParams{PoolID: p.ID, ContributorID: alice.ID})
		require.Len(t, js, 3)
		for i, j := range js {
			require.Equal(t, mine[2-i].ID, j.ID, "newest first")
		}
		js = list(&store.JudgmentListParams{PoolID: p.ID, ContributorID: alice.ID, Limit: 2})
		require.Equal(t, mine[2].ID, js[0].ID)
		require.Equal(t, mine[1].ID, js[1].ID)
		require.Len(t, js, 2)
		js = list(&store.JudgmentListParams{PoolID: p.ID, ContributorID: alice.ID, BeforeID: mine[1].ID})
		require.Len(t, js, 1)
		require.Equal(t, mine[0].ID, js[0].ID)
		require.Len(t, list(&store.JudgmentListParams{PoolID: p.ID}), 6, "no contributor: everyone's")
		require.Empty(t, list(&store.JudgmentListParams{PoolID: p.ID, ContributorID: newID()}))
		_, err := b.s.JudgmentList(b.ctx, &store.JudgmentListParams{UnitID: us[0].ID, ContributorID: alice.ID})
		requireFields(t, err, "contributorId")
	})
}

// outboxTypes lists the types of every outbox row, oldest first.
func (b *bundle) outboxTypes(t *testing.T) []string {
	t.Helper()
	rows, err := b.s.OutboxList(b.ctx, &store.OutboxListParams{Limit: 100000})
	require.NoError(t, err)
	out := []string{}
	for _, r := range rows {
		out = append(out, r.Type)
	}
	return out
}
