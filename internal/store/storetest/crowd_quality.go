package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// ---- helpers of the Quality group ----

// errRollback makes InTx roll back.
var errRollback = errors.New("roll back")

// takeUnit takes unit for c (a golden unit with golden), by the candidates
// strategy, so the test says which unit each contributor gets.
func (b *bundle) takeUnit(t *testing.T, poolID, unitID, c uuid.UUID, golden bool) *crowd.Assignment {
	t.Helper()
	tp := takeParams(poolID, c)
	tp.Strategy, tp.Candidates, tp.Golden = crowd.StrategyCandidates, []uuid.UUID{unitID}, golden
	tk := b.take(t, tp)
	require.Equal(t, unitID, tk.Unit.ID)
	return tk.Assignment
}

// judgeUnit takes unit for c and submits a judgment through it.
func (b *bundle) judgeUnit(t *testing.T, poolID, unitID, c uuid.UUID, golden bool) *crowd.Judgment {
	t.Helper()
	a := b.takeUnit(t, poolID, unitID, c, golden)
	j, created, err := b.judge(t, a, `{"same":"yes"}`, base.Add(time.Minute))
	require.NoError(t, err)
	require.True(t, created)
	return j
}

// lockState locks c's quality state in pool in a transaction of its own.
func (b *bundle) lockState(t *testing.T, poolID, c uuid.UUID, now time.Time) (*store.QualityState, error) {
	t.Helper()
	var st *store.QualityState
	err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
		var err error
		st, err = tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: poolID, ContributorID: c, Now: now})
		return err
	})
	return st, err
}

// inTx runs fn in a transaction and requires it to commit.
func (b *bundle) inTx(t *testing.T, fn func(ctx context.Context, tx store.Tx) error) {
	t.Helper()
	require.NoError(t, b.s.InTx(b.ctx, fn))
}

// taintedUnitIDs lists the unit ids of us.
func taintedUnitIDs(us []store.TaintedUnit) []uuid.UUID {
	out := []uuid.UUID{}
	for _, u := range us {
		out = append(out, u.UnitID)
	}
	return out
}

func sortedIDs(ids ...uuid.UUID) []uuid.UUID {
	out := append([]uuid.UUID{}, ids...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j].String() < out[i].String() {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func testQuality(t *testing.T, open opener) {
	t.Run("StateCreatedOnFirstUse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		c := b.contributor(t)

		st, err := b.s.QualityStateGet(b.ctx, p.ID, c.ID)
		require.NoError(t, err)
		require.Equal(t, &store.QualityState{PoolID: p.ID, ContributorID: c.ID, Trust: quality.NewTrust()}, st,
			"a contributor the pool has not met reads as new")

		st, err = b.lockState(t, p.ID, c.ID, at(time.Minute))
		require.NoError(t, err)
		want := &store.QualityState{PoolID: p.ID, ContributorID: c.ID, Trust: quality.NewTrust(), UpdatedAt: at(time.Minute)}
		require.Equal(t, want, st, "created on first use, as new")
		got, err := b.s.QualityStateGet(b.ctx, p.ID, c.ID)
		require.NoError(t, err)
		require.Equal(t, want, got, "stored by the lock")

		// Locking it again reads what is stored, unchanged.
		st, err = b.lockState(t, p.ID, c.ID, at(time.Hour))
		require.NoError(t, err)
		require.Equal(t, want, st)

		_, err = b.lockState(t, newID(), c.ID, base)
		require.ErrorIs(t, err, store.ErrNotFound, "unknown pool")
		_, err = b.lockState(t, p.ID, newID(), base)
		require.ErrorIs(t, err, store.ErrNotFound, "unknown contributor")

		// Refused, the transaction goes on.
		other := b.contributor(t)
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: newID(), ContributorID: other.ID, Now: base})
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = tx.QualityStateLock(ctx, &store.QualityStateLockParams{})
			requireFields(t, err, "poolId", "contributorId", "now")
			st, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: p.ID, ContributorID: other.ID, Now: base})
			require.NoError(t, err)
			require.Equal(t, other.ID, st.ContributorID)
			return nil
		})
	})

	t.Run("StatePut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		c := b.contributor(t)
		s := quality.Defaults()
		trust := s.ScoreTest(s.ScoreTest(quality.NewTrust(), true, base, "r"), false, base, "w")
		trust.History = nil
		put := func(now time.Time, standing quality.Standing, reason string, forgiven time.Time) *store.QualityState {
			t.Helper()
			var st *store.QualityState
			b.inTx(t, func(ctx context.Context, tx store.Tx) error {
				var err error
				st, err = tx.QualityStatePut(ctx, &store.QualityStatePutParams{PoolID: p.ID, ContributorID: c.ID, Trust: trust,
					Standing: standing, FlagReason: reason, ForgivenAt: forgiven, Counts: quality.Counts{Taken: 9, TestsTaken: 6},
					TooFast: 2, Now: now})
				return err
			})
			got, err := b.s.QualityStateGet(b.ctx, p.ID, c.ID)
			require.NoError(t, err)
			require.Equal(t, st, got, "as returned and as read")
			return st
		}

		flagged := quality.Standing{Flagged: true, Check: quality.CheckTrust}
		st := put(at(time.Minute), flagged, "trust 0.5", time.Time{})
		require.Equal(t, &store.QualityState{PoolID: p.ID, ContributorID: c.ID, Trust: trust, Standing: flagged,
			FlagReason: "trust 0.5", FlaggedAt: at(time.Minute), Counts: quality.Counts{Taken: 9, TestsTaken: 6},
			TooFast: 2, UpdatedAt: at(time.Minute)}, st)
		require.Equal(t, 0.5, st.Trust.Value)

		// The older view of the row agrees.
		pc, err := b.s.PoolContributorGet(b.ctx, p.ID, c.ID)
		require.NoError(t, err)
		require.True(t, pc.Flagged)
		require.NotNil(t, pc.Trust)
		require.Equal(t, 0.5, *pc.Trust)
		require.Equal(t, 2, pc.TestsAnswered)
		require.Equal(t, 1, pc.TestsCorrect)

		st = put(at(time.Hour), flagged, "trust 0.5", time.Time{})
		require.Equal(t, at(time.Minute), st.FlaggedAt, "flagged_at is the first flag's while flagged")
		st = put(at(2*time.Hour), quality.Standing{}, "", at(2*time.Hour))
		require.False(t, st.Standing.Flagged)
		require.Zero(t, st.FlaggedAt)
		require.Equal(t, at(2*time.Hour), st.ForgivenAt)
		st = put(at(3*time.Hour), quality.Standing{Flagged: true, Check: quality.CheckTooFast}, "too fast", at(2*time.Hour))
		require.Equal(t, at(3*time.Hour), st.FlaggedAt, "a new flag has its own time")
		require.Equal(t, quality.CheckTooFast, st.Standing.Check)

		// No evidence: the trust is stored as none and reads as the prior.
		trust = quality.Trust{Value: quality.TrustPrior}
		st = put(at(4*time.Hour), quality.Standing{}, "", time.Time{})
		require.Equal(t, quality.NewTrust(), st.Trust)
		pc, err = b.s.PoolContributorGet(b.ctx, p.ID, c.ID)
		require.NoError(t, err)
		require.Nil(t, pc.Trust, "no test question answered: no trust snapshot")

		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.QualityStatePut(ctx, &store.QualityStatePutParams{
				Trust:    quality.Trust{Value: 2, TestsAnswered: 1, TestsCorrect: 2},
				Standing: quality.Standing{Flagged: true}, Counts: quality.Counts{Taken: 1, TestsTaken: 2}, TooFast: -1})
			return err
		})
		requireFields(t, err, "poolId", "contributorId", "trust.value", "trust.testsCorrect",
			"standing.check", "counts.testsTaken", "tooFast", "now")
		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.QualityStatePut(ctx, &store.QualityStatePutParams{PoolID: p.ID, ContributorID: newID(),
				Trust: quality.NewTrust(), Now: base})
			return err
		})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("TrustHistory", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		c := b.contributor(t)
		entry := func(i int) quality.TrustEntry {
			return quality.TrustEntry{At: at(time.Duration(i) * time.Second), TestsCorrect: i / 2, TestsAnswered: i,
				Value: float64(i%10) / 10, Reason: fmt.Sprintf("change %d", i)}
		}
		appendN := func(from, to int) {
			t.Helper()
			b.inTx(t, func(ctx context.Context, tx store.Tx) error {
				if _, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: p.ID, ContributorID: c.ID, Now: base}); err != nil {
					return err
				}
				for i := from; i <= to; i++ {
					if err := tx.TrustHistoryAppend(ctx, &store.TrustHistoryAppendParams{PoolID: p.ID, ContributorID: c.ID, Entry: entry(i)}); err != nil {
						return err
					}
				}
				return nil
			})
		}

		hs, err := b.s.TrustHistoryList(b.ctx, p.ID, c.ID)
		require.NoError(t, err)
		require.Empty(t, hs)

		// Appended out of time order on purpose: the list is in append order.
		appendN(3, 3)
		appendN(1, 2)
		hs, err = b.s.TrustHistoryList(b.ctx, p.ID, c.ID)
		require.NoError(t, err)
		require.Equal(t, []quality.TrustEntry{entry(3), entry(1), entry(2)}, hs, "oldest appended first")

		appendN(4, quality.MaxTrustHistory+5)
		hs, err = b.s.TrustHistoryList(b.ctx, p.ID, c.ID)
		require.NoError(t, err)
		require.Len(t, hs, quality.MaxTrustHistory, "capped")
		require.Equal(t, entry(6), hs[0], "the oldest went first")
		require.Equal(t, entry(quality.MaxTrustHistory+5), hs[len(hs)-1])
		var inTx []quality.TrustEntry
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			var err error
			inTx, err = tx.TrustHistoryList(ctx, p.ID, c.ID)
			return err
		})
		require.Equal(t, hs, inTx)

		// Another contributor's history is their own.
		other := b.contributor(t)
		hs, err = b.s.TrustHistoryList(b.ctx, p.ID, other.ID)
		require.NoError(t, err)
		require.Empty(t, hs)

		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.TrustHistoryAppend(ctx, &store.TrustHistoryAppendParams{PoolID: p.ID, ContributorID: other.ID, Entry: entry(1)})
		})
		require.ErrorIs(t, err, store.ErrNotFound, "no quality state: no history")
		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			return tx.TrustHistoryAppend(ctx, &store.TrustHistoryAppendParams{Entry: quality.TrustEntry{Value: 1.5, TestsCorrect: -1}})
		})
		requireFields(t, err, "poolId", "contributorId", "entry.at", "entry.testsCorrect", "entry.value", "entry.reason")
	})

	t.Run("Taint", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		us := b.units(t, p.ID, 5, crowd.UnitJudgable)
		gs, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable,
			Units: []*store.UnitInsertParams{newGolden(1)}, Now: base})
		require.NoError(t, err)
		golden := gs[0]
		bad, good := b.contributor(t), b.contributor(t)
		finalized, open, untouched, canceled := us[0], us[1], us[2], us[3]

		for _, u := range []*crowd.Unit{finalized, open, canceled} {
			b.judgeUnit(t, p.ID, u.ID, bad.ID, false)
		}
		b.judgeUnit(t, p.ID, golden.ID, bad.ID, true)
		for _, u := range []*crowd.Unit{finalized, untouched} {
			b.judgeUnit(t, p.ID, u.ID, good.ID, false)
		}
		// An assignment bad holds but has not judged changes nothing.
		b.takeUnit(t, p.ID, us[4].ID, bad.ID, false)
		_, err = b.s.UnitFinalize(b.ctx, &store.UnitFinalizeParams{ID: finalized.ID, Result: json.RawMessage(`{"same":"yes"}`), Now: later})
		require.NoError(t, err)
		_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: canceled.ID, From: crowd.UnitJudgable, To: crowd.UnitCanceled, Now: later})
		require.NoError(t, err)
		// bad's judgment in another pool is not touched.
		p2 := b.pool(t, 3)
		elsewhere := b.units(t, p2.ID, 1, crowd.UnitJudgable)[0]
		b.judgeUnit(t, p2.ID, elsewhere.ID, bad.ID, false)

		taint := func(c uuid.UUID, tainted bool) *store.JudgmentTaintResult {
			t.Helper()
			var r *store.JudgmentTaintResult
			b.inTx(t, func(ctx context.Context, tx store.Tx) error {
				var err error
				r, err = tx.JudgmentTaintMany(ctx, &store.JudgmentTaintManyParams{PoolID: p.ID, ContributorID: c, Tainted: tainted})
				return err
			})
			return r
		}
		requireTaints := func(poolID uuid.UUID, want map[uuid.UUID]bool) {
			t.Helper()
			js, err := b.s.JudgmentList(b.ctx, &store.JudgmentListParams{PoolID: poolID})
			require.NoError(t, err)
			for _, j := range js {
				require.Equal(t, want[j.ContributorID], j.Tainted, "judgment of unit %s by %s", j.UnitID, j.ContributorID)
			}
		}

		r := taint(bad.ID, true)
		require.Equal(t, 4, r.Judgments)
		require.Equal(t, []uuid.UUID{finalized.ID}, taintedUnitIDs(r.Finalized))
		require.Equal(t, []uuid.UUID{open.ID}, taintedUnitIDs(r.Open))
		require.Equal(t, sortedIDs(golden.ID, canceled.ID), taintedUnitIDs(r.Other))
		require.Equal(t, store.TaintedUnit{UnitID: finalized.ID, RunID: finalized.RunID, State: crowd.UnitFinalized, Judgments: 1}, r.Finalized[0])
		require.Equal(t, store.TaintedUnit{UnitID: open.ID, RunID: open.RunID, State: crowd.UnitJudgable, Judgments: 1}, r.Open[0])
		for _, u := range r.Other {
			if u.UnitID == golden.ID {
				require.Equal(t, store.TaintedUnit{UnitID: golden.ID, State: crowd.UnitJudgable, Golden: true, Judgments: 1}, u)
			} else {
				require.Equal(t, crowd.UnitCanceled, u.State)
			}
		}
		requireTaints(p.ID, map[uuid.UUID]bool{bad.ID: true})
		requireTaints(p2.ID, map[uuid.UUID]bool{})

		r = taint(bad.ID, true)
		require.Equal(t, &store.JudgmentTaintResult{}, r, "tainting again changes nothing")
		r = taint(good.ID, false)
		require.Equal(t, &store.JudgmentTaintResult{}, r, "un-tainting clean judgments changes nothing")

		r = taint(bad.ID, false)
		require.Equal(t, 4, r.Judgments, "un-taint reverses it")
		require.Equal(t, []uuid.UUID{finalized.ID}, taintedUnitIDs(r.Finalized))
		require.Equal(t, []uuid.UUID{open.ID}, taintedUnitIDs(r.Open))
		require.Equal(t, sortedIDs(golden.ID, canceled.ID), taintedUnitIDs(r.Other))
		requireTaints(p.ID, map[uuid.UUID]bool{})

		// A rolled-back taint leaves every judgment as it was.
		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.JudgmentTaintMany(ctx, &store.JudgmentTaintManyParams{PoolID: p.ID, ContributorID: good.ID, Tainted: true}); err != nil {
				return err
			}
			return errRollback
		})
		require.ErrorIs(t, err, errRollback)
		requireTaints(p.ID, map[uuid.UUID]bool{})

		// The repair's order: list (nothing changes), lock, then taint on
		// the listed units only.
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			listed, err := tx.JudgmentTaintUnits(ctx, &store.JudgmentTaintManyParams{PoolID: p.ID, ContributorID: bad.ID, Tainted: true})
			require.NoError(t, err)
			require.Equal(t, sortedIDs(finalized.ID, open.ID, golden.ID, canceled.ID), taintedUnitIDs(listed))
			for _, u := range listed {
				require.Equal(t, 1, u.Judgments)
				require.Equal(t, u.UnitID == golden.ID, u.Golden)
			}
			return nil
		})
		requireTaints(p.ID, map[uuid.UUID]bool{})
		var r2 *store.JudgmentTaintResult
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			only := &store.JudgmentTaintManyParams{PoolID: p.ID, ContributorID: bad.ID, Tainted: true, Units: []uuid.UUID{open.ID, untouched.ID}}
			listed, err := tx.JudgmentTaintUnits(ctx, only)
			require.NoError(t, err)
			require.Equal(t, []uuid.UUID{open.ID}, taintedUnitIDs(listed), "only the units given, and judged")
			r2, err = tx.JudgmentTaintMany(ctx, only)
			return err
		})
		require.Equal(t, 1, r2.Judgments)
		require.Equal(t, []uuid.UUID{open.ID}, taintedUnitIDs(r2.Open))
		js, err := b.s.JudgmentList(b.ctx, &store.JudgmentListParams{PoolID: p.ID})
		require.NoError(t, err)
		for _, j := range js {
			require.Equal(t, j.ContributorID == bad.ID && j.UnitID == open.ID, j.Tainted, "judgment of unit %s by %s", j.UnitID, j.ContributorID)
		}
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			none := &store.JudgmentTaintManyParams{PoolID: p.ID, ContributorID: bad.ID, Tainted: true, Units: []uuid.UUID{}}
			listed, err := tx.JudgmentTaintUnits(ctx, none)
			require.NoError(t, err)
			require.Empty(t, listed)
			r2, err = tx.JudgmentTaintMany(ctx, none)
			return err
		})
		require.Equal(t, &store.JudgmentTaintResult{}, r2, "an empty list changes nothing")
		requireTaints(p2.ID, map[uuid.UUID]bool{})

		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.JudgmentTaintMany(ctx, &store.JudgmentTaintManyParams{})
			return err
		})
		requireFields(t, err, "poolId", "contributorId")
		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.JudgmentTaintUnits(ctx, &store.JudgmentTaintManyParams{})
			return err
		})
		requireFields(t, err, "poolId", "contributorId")
	})

	t.Run("GoldenPickAndCount", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		const n = 5
		ps := make([]*store.UnitInsertParams, n)
		for i := range ps {
			ps[i] = newGolden(i)
		}
		gs, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable, Units: ps, Now: base})
		require.NoError(t, err)
		regular := b.units(t, p.ID, 2, crowd.UnitJudgable)
		c, other := b.contributor(t), b.contributor(t)
		pickWith := func(pp *store.UnitPickGoldenParams) (uuid.UUID, error) {
			t.Helper()
			var id uuid.UUID
			err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
				var err error
				id, err = tx.UnitPickGolden(ctx, pp)
				return err
			})
			return id, err
		}
		pick := func(c uuid.UUID) (uuid.UUID, error) {
			t.Helper()
			return pickWith(&store.UnitPickGoldenParams{PoolID: p.ID, ContributorID: c, Strategy: crowd.StrategyOrdered})
		}
		count := func(c uuid.UUID) int {
			t.Helper()
			var n int
			b.inTx(t, func(ctx context.Context, tx store.Tx) error {
				var err error
				n, err = tx.AssignmentCountGolden(ctx, p.ID, c)
				return err
			})
			return n
		}

		// A regular assignment is no test question.
		b.takeUnit(t, p.ID, regular[0].ID, c.ID, false)
		require.Zero(t, count(c.ID))

		had := map[uuid.UUID]bool{}
		for i := range n {
			id, err := pick(c.ID)
			require.NoError(t, err)
			require.False(t, had[id], "pick %d returned %s, a unit the contributor had", i, id)
			require.Equal(t, gs[i].ID, id, "the oldest left")
			a := b.takeUnit(t, p.ID, id, c.ID, true)
			had[id] = true
			// Whatever becomes of the assignment, the unit is never picked again.
			switch i % 3 {
			case 0:
				_, err = b.s.AssignmentRelease(b.ctx, &store.AssignmentReleaseParams{ID: a.ID, ContributorID: c.ID, Now: base})
				require.NoError(t, err)
			case 1:
				_, _, err = b.judge(t, a, `{"same":"no"}`, base.Add(time.Second))
				require.NoError(t, err)
			}
			require.Equal(t, i+1, count(c.ID), "every test question taken counts, in any state")
		}
		// The ACTIVE ones expire: still counted, still never picked.
		expired, err := b.s.AssignmentExpire(b.ctx, &store.AssignmentExpireParams{Now: base.Add(24 * time.Hour), Max: 100})
		require.NoError(t, err)
		require.Positive(t, expired)
		_, err = pick(c.ID)
		require.ErrorIs(t, err, crowd.ErrNoUnit, "none left for them")
		require.Equal(t, n, count(c.ID))

		id, err := pick(other.ID)
		require.NoError(t, err)
		require.Equal(t, gs[0].ID, id, "another contributor may have every one")
		require.Zero(t, count(other.ID))
		_, err = pickWith(&store.UnitPickGoldenParams{PoolID: p.ID, ContributorID: c.ID, Strategy: crowd.StrategyRandom})
		require.ErrorIs(t, err, crowd.ErrNoUnit, "none left for them, whatever the strategy")

		// Random: keys spread over the range the stores draw pick keys
		// from ([0, MaxInt64)) start at different units, wrapping around
		// past the largest key.
		golden := map[uuid.UUID]bool{}
		for _, g := range gs {
			golden[g.ID] = true
		}
		seen := map[uuid.UUID]bool{}
		const keys = 64
		for i := range keys {
			key := int64(i)*(math.MaxInt64/keys) + 1
			id, err := pickWith(&store.UnitPickGoldenParams{PoolID: p.ID, ContributorID: other.ID, Strategy: crowd.StrategyRandom, RandomKey: key})
			require.NoError(t, err)
			require.True(t, golden[id], "key %d: %s is a golden unit of the pool", key, id)
			seen[id] = true
		}
		id, err = pickWith(&store.UnitPickGoldenParams{PoolID: p.ID, ContributorID: other.ID, Strategy: crowd.StrategyRandom, RandomKey: math.MaxInt64})
		require.NoError(t, err, "past the largest key it wraps around")
		require.True(t, golden[id])
		require.Greater(t, len(seen), 1, "random starts do not all give the same test question")

		// Random picks, taken one by one, never repeat a unit either.
		third := b.contributor(t)
		had = map[uuid.UUID]bool{}
		for {
			id, err := pickWith(&store.UnitPickGoldenParams{PoolID: p.ID, ContributorID: third.ID, Strategy: crowd.StrategyRandom})
			if errors.Is(err, crowd.ErrNoUnit) {
				break
			}
			require.NoError(t, err)
			require.False(t, had[id], "random pick returned %s, a unit the contributor had", id)
			b.takeUnit(t, p.ID, id, third.ID, true)
			had[id] = true
		}
		require.Len(t, had, n)
		require.Equal(t, n, count(third.ID))

		_, err = pickWith(&store.UnitPickGoldenParams{Strategy: crowd.StrategyCandidates, RandomKey: 1})
		requireFields(t, err, "poolId", "contributorId", "strategy", "randomKey")

		// A golden unit that is not JUDGABLE is not picked.
		p2 := b.pool(t, 3)
		g2, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p2.ID, State: crowd.UnitJudgable,
			Units: []*store.UnitInsertParams{newGolden(1)}, Now: base})
		require.NoError(t, err)
		_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: g2[0].ID, From: crowd.UnitJudgable, To: crowd.UnitPaused, Now: base})
		require.NoError(t, err)
		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.UnitPickGolden(ctx, &store.UnitPickGoldenParams{PoolID: p2.ID, ContributorID: other.ID, Strategy: crowd.StrategyOrdered})
			return err
		})
		require.ErrorIs(t, err, crowd.ErrNoUnit)
	})

	t.Run("Audit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		us := b.units(t, p.ID, 2, crowd.UnitJudgable)
		c := b.contributor(t)
		hi, lo := 0.9, 0.4
		cause := quality.Cause{ContributorID: c.ID, Check: quality.CheckTrust, Reason: "trust 0.3 is below 0.6"}
		audits := []quality.Audit{
			{Old: quality.Result{Value: json.RawMessage(`{"same":"yes"}`), Confidence: &hi},
				New:    quality.Result{Value: json.RawMessage(`{"same":"no"}`), Confidence: &lo},
				Action: quality.RepairRecompute, Cause: cause, Why: "recomputed"},
			{Old: quality.Result{Value: json.RawMessage(`{"same":"no"}`), Confidence: &lo},
				Action: quality.RepairReopen, Cause: quality.Cause{ContributorID: c.ID, Check: quality.CheckForgiven, Untaint: true, Reason: "forgiven"},
				Why: "reopened"},
		}
		var stored []*store.UnitAudit
		for i, a := range audits {
			var got *store.UnitAudit
			b.inTx(t, func(ctx context.Context, tx store.Tx) error {
				var err error
				got, err = tx.UnitAuditInsert(ctx, &store.UnitAuditInsertParams{ID: newID(), UnitID: us[0].ID, PoolID: p.ID,
					Audit: a, Now: at(time.Duration(i) * time.Minute)})
				return err
			})
			require.Equal(t, us[0].ID, got.UnitID)
			require.Equal(t, p.ID, got.PoolID)
			require.Equal(t, at(time.Duration(i)*time.Minute), got.At)
			requireSameAudit(t, a, got.Audit)
			stored = append(stored, got)
		}
		list, err := b.s.UnitAuditList(b.ctx, us[0].ID)
		require.NoError(t, err)
		require.Len(t, list, 2)
		for i := range list {
			require.Equal(t, stored[i].ID, list[i].ID, "oldest first")
			requireSameAudit(t, audits[i], list[i].Audit)
		}
		require.Nil(t, list[1].New.Value, "a reopened unit has no result")
		require.Nil(t, list[1].New.Confidence)
		var inTx []*store.UnitAudit
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			var err error
			inTx, err = tx.UnitAuditList(ctx, us[0].ID)
			return err
		})
		require.Equal(t, list, inTx)
		list, err = b.s.UnitAuditList(b.ctx, us[1].ID)
		require.NoError(t, err)
		require.Empty(t, list, "another unit's audits are its own")

		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.UnitAuditInsert(ctx, &store.UnitAuditInsertParams{ID: newID(), UnitID: newID(), PoolID: p.ID, Audit: audits[0], Now: base})
			return err
		})
		require.ErrorIs(t, err, store.ErrNotFound, "unknown unit")
		bad := 1.5
		err = b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.UnitAuditInsert(ctx, &store.UnitAuditInsertParams{Audit: quality.Audit{
				Old: quality.Result{Value: json.RawMessage(`{`)}, New: quality.Result{Confidence: &bad}, Action: quality.RepairNone}})
			return err
		})
		requireFields(t, err, "auditId", "unitId", "poolId", "audit.old.result", "audit.new.confidence", "audit.action",
			"audit.cause.contributorId", "audit.cause.check", "audit.why", "now")
	})

	t.Run("StateRace", func(t *testing.T) {
		// Many transactions change one contributor's state at once, from
		// the first use on: each locks it, scores one test question, counts
		// an assignment and appends to the history. Without the lock two
		// would read the same counts and one change would be lost.
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		c := b.contributor(t)
		s := quality.Defaults()
		const workers, each = 8, 15
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
						st, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: p.ID, ContributorID: c.ID, Now: base})
						if err != nil {
							return err
						}
						trust := s.ScoreTest(st.Trust, i%2 == 0, base, fmt.Sprintf("worker %d test %d", w, i))
						entry := trust.History[len(trust.History)-1]
						trust.History = nil
						counts := quality.Counts{Taken: st.Counts.Taken + 1, TestsTaken: st.Counts.TestsTaken + 1}
						if _, err := tx.QualityStatePut(ctx, &store.QualityStatePutParams{PoolID: p.ID, ContributorID: c.ID,
							Trust: trust, Counts: counts, TooFast: st.TooFast + 1, Now: base}); err != nil {
							return err
						}
						return tx.TrustHistoryAppend(ctx, &store.TrustHistoryAppendParams{PoolID: p.ID, ContributorID: c.ID, Entry: entry})
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		const total = workers * each
		st, err := b.s.QualityStateGet(b.ctx, p.ID, c.ID)
		require.NoError(t, err)
		require.Equal(t, total, st.Trust.TestsAnswered, "no change lost")
		require.Equal(t, workers*((each+1)/2), st.Trust.TestsCorrect)
		require.Equal(t, quality.Counts{Taken: total, TestsTaken: total}, st.Counts)
		require.Equal(t, total, st.TooFast)
		require.InDelta(t, s.TrustValue(st.Trust), st.Trust.Value, 1e-12)
		hs, err := b.s.TrustHistoryList(b.ctx, p.ID, c.ID)
		require.NoError(t, err)
		require.Len(t, hs, min(total, quality.MaxTrustHistory))
		for i, h := range hs {
			require.Equal(t, total-len(hs)+i+1, h.TestsAnswered, "history entry %d in the order of the changes", i)
		}
	})
}

// requireSameAudit compares audit records, results as JSON values.
func requireSameAudit(t *testing.T, want, got quality.Audit) {
	t.Helper()
	for _, r := range []struct {
		name      string
		want, got quality.Result
	}{{"old", want.Old, got.Old}, {"new", want.New, got.New}} {
		if r.want.Value == nil {
			require.Nil(t, r.got.Value, r.name)
		} else {
			require.JSONEq(t, string(r.want.Value), string(r.got.Value), r.name)
		}
		require.Equal(t, r.want.Confidence, r.got.Confidence, r.name)
	}
	want.Old, want.New, got.Old, got.New = quality.Result{}, quality.Result{}, quality.Result{}, quality.Result{}
	require.Equal(t, want, got)
}
