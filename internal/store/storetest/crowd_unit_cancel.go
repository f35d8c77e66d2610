package storetest

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// unitCancelSet is a unit in every state in pool a (the JUDGABLE one with
// an ACTIVE assignment), a golden unit of a, a JUDGABLE unit of pool b,
// an id of no unit, and the NEW unit's id twice.
type unitCancelSet struct {
	a, b       *crowd.Pool
	units      map[string]*crowd.Unit // by name
	assignment *crowd.Assignment
	ids        []uuid.UUID
	names      []string // aligned with ids
}

func (b *bundle) unitCancelSet(t *testing.T) *unitCancelSet {
	t.Helper()
	set := &unitCancelSet{a: b.pool(t, 3), b: b.pool(t, 3), units: map[string]*crowd.Unit{}}
	set.units["NEW"] = b.units(t, set.a.ID, 1, crowd.UnitNew)[0]
	js := b.units(t, set.a.ID, 4, crowd.UnitJudgable)
	set.units["JUDGABLE"], set.units["PAUSED"], set.units["FINALIZED"], set.units["CANCELED"] = js[0], js[1], js[2], js[3]
	set.units["other pool"] = b.units(t, set.b.ID, 1, crowd.UnitJudgable)[0]
	g, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: set.a.ID, State: crowd.UnitJudgable, Units: []*store.UnitInsertParams{newGolden(9)}, Now: base})
	require.NoError(t, err)
	set.units["golden"] = g[0]
	set.assignment = b.takeUnit(t, set.a.ID, set.units["JUDGABLE"].ID, b.contributor(t).ID, false)
	for _, m := range []struct {
		name     string
		from, to crowd.UnitState
	}{{"PAUSED", crowd.UnitJudgable, crowd.UnitPaused}, {"CANCELED", crowd.UnitJudgable, crowd.UnitCanceled}} {
		_, err := b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: set.units[m.name].ID, From: m.from, To: m.to, Now: base})
		require.NoError(t, err)
	}
	b.finalize(t, set.units["FINALIZED"].ID)
	for name, u := range set.units {
		got, err := b.s.UnitGet(b.ctx, u.ID)
		require.NoError(t, err)
		set.units[name] = got
	}
	for _, name := range []string{"NEW", "JUDGABLE", "PAUSED", "FINALIZED", "CANCELED", "golden", "other pool", "unknown", "NEW"} {
		id := newID()
		if u := set.units[name]; u != nil {
			id = u.ID
		}
		set.ids, set.names = append(set.ids, id), append(set.names, name)
	}
	return set
}

// want is what UnitCancelMany reports for the unit named name.
func (set *unitCancelSet) want(name string) store.UnitCancelManyResult {
	switch name {
	case "FINALIZED", "CANCELED":
		return store.UnitCancelManyResult{State: crowd.UnitState(name)}
	case "unknown":
		return store.UnitCancelManyResult{}
	}
	return store.UnitCancelManyResult{State: crowd.UnitCanceled, Canceled: true}
}

func testUnitCancelMany(t *testing.T, open opener) {
	for _, by := range []string{"Store", "Tx", "TxRolledBack"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			set := b.unitCancelSet(t)
			countsA, countsB := b.counts(t, set.a.ID), b.counts(t, set.b.ID)
			mark := b.outboxMark(t)
			p := &store.UnitCancelManyParams{IDs: set.ids, Now: later}
			var got []store.UnitCancelManyResult
			switch by {
			case "Store":
				var err error
				got, err = b.s.UnitCancelMany(b.ctx, p)
				require.NoError(t, err)
			default:
				err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
					var err error
					got, err = tx.UnitCancelMany(ctx, p)
					require.NoError(t, err)
					u, err := tx.UnitGet(ctx, set.units["NEW"].ID)
					require.NoError(t, err)
					require.Equal(t, crowd.UnitCanceled, u.State, "the transaction reads its own cancel")
					if by == "TxRolledBack" {
						return errRollback
					}
					return nil
				})
				if by == "TxRolledBack" {
					require.ErrorIs(t, err, errRollback)
				} else {
					require.NoError(t, err)
				}
			}
			require.Len(t, got, len(set.ids))
			for i, name := range set.names {
				require.Equal(t, set.want(name), got[i], "result %d (%s)", i, name)
			}
			b.requireNoOutbox(t, mark) // as UnitTransition: no event

			for name, before := range set.units {
				after, err := b.s.UnitGet(b.ctx, before.ID)
				require.NoError(t, err)
				if by == "TxRolledBack" || before.State.Final() {
					requireSameUnit(t, before, after, name)
					continue
				}
				require.Equal(t, crowd.UnitCanceled, after.State, name)
				requireTime(t, later, after.UpdatedAt, name)
				// Nothing else moves: as UnitTransition.
				after.State, after.UpdatedAt = before.State, before.UpdatedAt
				requireSameUnit(t, before, after, name)
			}
			// The assignment in progress is left as it is, as by
			// UnitTransition (its judgment is refused: the unit is
			// CANCELED).
			a, err := b.s.AssignmentGet(b.ctx, set.assignment.ID)
			require.NoError(t, err)
			require.Equal(t, set.assignment.State, a.State)

			if by == "TxRolledBack" {
				require.Equal(t, countsA, b.counts(t, set.a.ID))
				require.Equal(t, countsB, b.counts(t, set.b.ID))
				return
			}
			wantA, wantB := countsA, countsB
			wantA.New, wantA.Judgable, wantA.Paused, wantA.Canceled = wantA.New-1, wantA.Judgable-1, wantA.Paused-1, wantA.Canceled+3
			wantB.Judgable, wantB.Canceled = wantB.Judgable-1, wantB.Canceled+1
			require.Equal(t, wantA, b.counts(t, set.a.ID), "pool a: the golden unit is not counted")
			require.Equal(t, wantB, b.counts(t, set.b.ID))

			// Again: nothing left to cancel, nothing moves.
			again, err := b.s.UnitCancelMany(b.ctx, &store.UnitCancelManyParams{IDs: set.ids, Now: later.Add(1)})
			require.NoError(t, err)
			for i, name := range set.names {
				want := set.want(name)
				want.Canceled = false
				require.Equal(t, want, again[i], "again: result %d (%s)", i, name)
			}
			require.Equal(t, wantA, b.counts(t, set.a.ID))
		})
	}

	t.Run("EmptyAndInvalid", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		got, err := b.s.UnitCancelMany(b.ctx, &store.UnitCancelManyParams{Now: later})
		require.NoError(t, err)
		require.Empty(t, got)
		_, err = b.s.UnitCancelMany(b.ctx, &store.UnitCancelManyParams{IDs: []uuid.UUID{newID()}})
		requireFields(t, err, "now")
		b.inTx(t, func(ctx context.Context, tx store.Tx) error {
			got, err := tx.UnitCancelMany(ctx, &store.UnitCancelManyParams{IDs: []uuid.UUID{newID(), uuid.Nil}, Now: later})
			require.NoError(t, err)
			require.Equal(t, []store.UnitCancelManyResult{{}, {}}, got)
			return nil
		})
	})
}
