package storetest

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// testUnitsClosing: UnitListClosing lists the open regular units of
// CLOSED pools that no ACTIVE assignment holds (not those of an OPEN
// pool, not golden, FINALIZED or CANCELED ones), by id, filtered by pool
// and paged; UnitLockClosing reads a unit with its pool's status and
// whether an assignment of it is live.
func testUnitsClosing(t *testing.T, open opener) {
	b := setup(t, open)
	list := func(pool, after uuid.UUID, limit int) []uuid.UUID {
		t.Helper()
		refs, err := b.s.UnitListClosing(b.ctx, &store.UnitListClosingParams{PoolID: pool, After: after, Limit: limit})
		require.NoError(t, err)
		ids := make([]uuid.UUID, len(refs))
		for i, r := range refs {
			ids[i] = r.ID
		}
		return ids
	}
	sorted := func(ids ...uuid.UUID) []uuid.UUID {
		slices.SortFunc(ids, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
		return ids
	}
	closed, other, openPool := b.pool(t, 2), b.pool(t, 2), b.pool(t, 2)
	us := b.units(t, closed.ID, 6, crowd.UnitJudgable)
	_, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: closed.ID, State: crowd.UnitJudgable,
		Units: []*store.UnitInsertParams{newGolden(0)}, Now: base})
	require.NoError(t, err)
	os := b.units(t, other.ID, 1, crowd.UnitNew)
	b.units(t, openPool.ID, 1, crowd.UnitJudgable)
	// us[1] is held by a live assignment; us[2]'s was given back.
	live := b.takeUnit(t, closed.ID, us[1].ID, b.contributor(t).ID, false)
	given := b.takeUnit(t, closed.ID, us[2].ID, b.contributor(t).ID, false)
	_, err = b.s.AssignmentRelease(b.ctx, &store.AssignmentReleaseParams{ID: given.ID, ContributorID: given.ContributorID, Now: base})
	require.NoError(t, err)
	_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: us[3].ID, From: crowd.UnitJudgable, To: crowd.UnitPaused, Now: base})
	require.NoError(t, err)
	b.finalize(t, us[4].ID)
	_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: us[5].ID, From: crowd.UnitJudgable, To: crowd.UnitCanceled, Now: base})
	require.NoError(t, err)
	require.Empty(t, list(uuid.Nil, uuid.Nil, 10), "no pool is CLOSED")
	for _, p := range []*crowd.Pool{closed, other} {
		_, err := b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: p.ID, From: crowd.PoolOpen, To: crowd.PoolClosed, Now: base})
		require.NoError(t, err)
	}

	require.Equal(t, sorted(us[0].ID, us[2].ID, us[3].ID), list(closed.ID, uuid.Nil, 10), "open, held by no live assignment")
	all := sorted(us[0].ID, us[2].ID, us[3].ID, os[0].ID)
	require.Equal(t, all, list(uuid.Nil, uuid.Nil, 10), "every CLOSED pool")
	require.Equal(t, all[:2], list(uuid.Nil, uuid.Nil, 2), "at most limit, smallest ids first")
	require.Equal(t, all[2:], list(uuid.Nil, all[1], 10), "after the cursor")
	refs, err := b.s.UnitListClosing(b.ctx, &store.UnitListClosingParams{PoolID: other.ID, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []*store.UnitClosingRef{{ID: os[0].ID, PoolID: other.ID, RunID: os[0].RunID}}, refs)

	lock := func(id uuid.UUID) (*store.UnitClosing, error) {
		t.Helper()
		var out *store.UnitClosing
		err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			out, err = tx.UnitLockClosing(ctx, id)
			return err
		})
		return out, err
	}
	got, err := lock(us[1].ID)
	require.NoError(t, err)
	require.Equal(t, us[1].ID, got.Unit.ID)
	require.Equal(t, crowd.UnitJudgable, got.Unit.State)
	require.Equal(t, crowd.PoolClosed, got.PoolStatus)
	require.True(t, got.Live, "its assignment is ACTIVE")
	got, err = lock(us[2].ID)
	require.NoError(t, err)
	require.False(t, got.Live, "its assignment was given back")
	_, err = lock(newID())
	require.ErrorIs(t, err, store.ErrNotFound)

	// The live assignment is given back: its unit is listed.
	_, err = b.s.AssignmentRelease(b.ctx, &store.AssignmentReleaseParams{ID: live.ID, ContributorID: live.ContributorID, Now: base})
	require.NoError(t, err)
	require.Equal(t, sorted(us[0].ID, us[1].ID, us[2].ID, us[3].ID), list(closed.ID, uuid.Nil, 10))

	_, err = b.s.UnitListClosing(b.ctx, &store.UnitListClosingParams{})
	requireFields(t, err, "limit")
}

// testPoolReopen: a unit reopened (FINALIZED → JUDGABLE: quality
// control, a review's redo) in a COMPLETED pool waited for ever — no take
// from a completed pool, no close to end it. The reopen moves the pool
// back to CLOSED (pool.updated COMPLETED → CLOSED) in its transaction, so
// that the close ends the unit; once it is final the pool COMPLETES
// again. A reopen in a CLOSED pool leaves it CLOSED, without an event.
// Racing reopens against PoolCompleteMany in goroutines, no pool ends
// COMPLETED with an open unit.
func testPoolReopen(t *testing.T, open opener) {
	t.Run("BackToClosed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		us := b.units(t, p.ID, 2, crowd.UnitJudgable)
		b.finalize(t, us[0].ID)
		b.finalize(t, us[1].ID)
		_, err := b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: p.ID, From: crowd.PoolOpen, To: crowd.PoolClosed, Now: base})
		require.NoError(t, err)
		ids, err := b.s.PoolCompleteMany(b.ctx, &store.PoolCompleteManyParams{PoolID: p.ID, Max: 10, Now: later})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{p.ID}, ids)

		mark := b.outboxMark(t)
		_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: us[0].ID, From: crowd.UnitFinalized, To: crowd.UnitJudgable, Now: later})
		require.NoError(t, err)
		got, err := b.s.PoolGet(b.ctx, p.ID)
		require.NoError(t, err)
		require.Equal(t, crowd.PoolClosed, got.Status, "a reopened unit takes its COMPLETED pool back to CLOSED")
		require.Equal(t, 1, got.Counts.Open())
		ds := decodeEvents[crowd.PoolUpdatedData](t, b.outboxSince(t, mark), crowd.EventPoolUpdated)
		require.Equal(t, []crowd.PoolUpdatedData{{PoolID: p.ID, From: crowd.PoolCompleted, To: crowd.PoolClosed}}, ds)
		ids, err = b.s.PoolCompleteMany(b.ctx, &store.PoolCompleteManyParams{PoolID: p.ID, Max: 10, Now: later})
		require.NoError(t, err)
		require.Empty(t, ids, "its unit is open")

		// A review's redo in the CLOSED pool: no second event.
		mark = b.outboxMark(t)
		require.NoError(t, b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.UnitRedo(ctx, &store.UnitRedoParams{ID: us[1].ID, Now: later})
			return err
		}))
		got, err = b.s.PoolGet(b.ctx, p.ID)
		require.NoError(t, err)
		require.Equal(t, crowd.PoolClosed, got.Status)
		require.Empty(t, decodeEvents[crowd.PoolUpdatedData](t, b.outboxSince(t, mark), crowd.EventPoolUpdated))

		// The close ends them (here by hand): the pool COMPLETES again.
		for _, u := range us {
			_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: u.ID, From: crowd.UnitJudgable, To: crowd.UnitCanceled, Now: later})
			require.NoError(t, err)
		}
		ids, err = b.s.PoolCompleteMany(b.ctx, &store.PoolCompleteManyParams{PoolID: p.ID, Max: 10, Now: later})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{p.ID}, ids)
	})

	// A reopen refused (the unit is not FINALIZED, or is golden) leaves
	// its COMPLETED pool alone, even in a transaction that goes on and
	// commits (a review's reject tolerates a refused redo): PostgreSQL
	// moved the pool before the guarded change of the unit and kept the
	// move (COMPLETED → CLOSED → COMPLETED, two spurious pool.updated),
	// and a golden unit's pool looped without end.
	t.Run("RefusedLeavesCompleted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		us := b.units(t, p.ID, 2, crowd.UnitJudgable)
		golden, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable,
			Units: []*store.UnitInsertParams{newGolden(0)}, Now: base})
		require.NoError(t, err)
		b.finalize(t, us[0].ID)
		_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: us[1].ID, From: crowd.UnitJudgable, To: crowd.UnitCanceled, Now: base})
		require.NoError(t, err)
		_, err = b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: p.ID, From: crowd.PoolOpen, To: crowd.PoolClosed, Now: base})
		require.NoError(t, err)
		ids, err := b.s.PoolCompleteMany(b.ctx, &store.PoolCompleteManyParams{PoolID: p.ID, Max: 10, Now: later})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{p.ID}, ids)

		mark := b.outboxMark(t)
		// Bounded: the golden unit's reopen looped for ever.
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		refused := func(what string, err error) {
			t.Helper()
			var ite *crowd.InvalidTransitionError
			require.ErrorAs(t, err, &ite, what)
		}
		_, err = b.s.UnitTransition(ctx, &store.UnitTransitionParams{ID: golden[0].ID, From: crowd.UnitFinalized, To: crowd.UnitJudgable, Now: later})
		refused("reopen of a golden unit", err)
		require.NoError(t, b.s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.UnitTransition(ctx, &store.UnitTransitionParams{ID: golden[0].ID, From: crowd.UnitFinalized, To: crowd.UnitJudgable, Now: later})
			refused("reopen of a golden unit in a transaction", err)
			_, err = tx.UnitRedo(ctx, &store.UnitRedoParams{ID: us[1].ID, Now: later})
			refused("redo of a CANCELED unit", err)
			_, err = tx.UnitTransition(ctx, &store.UnitTransitionParams{ID: us[1].ID, From: crowd.UnitFinalized, To: crowd.UnitJudgable, Now: later})
			refused("reopen of a CANCELED unit", err)
			return nil // and commit, as a review's reject does
		}))
		got, err := b.s.PoolGet(b.ctx, p.ID)
		require.NoError(t, err)
		require.Equal(t, crowd.PoolCompleted, got.Status)
		require.Equal(t, 0, got.Counts.Open())
		require.Empty(t, decodeEvents[crowd.PoolUpdatedData](t, b.outboxSince(t, mark), crowd.EventPoolUpdated))
	})

	t.Run("RaceWithComplete", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		const pools = 24
		units := make([]*crowd.Unit, pools)
		for i := range units {
			p := b.pool(t, 1)
			units[i] = b.units(t, p.ID, 1, crowd.UnitJudgable)[0]
			b.finalize(t, units[i].ID)
			_, err := b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: p.ID, From: crowd.PoolOpen, To: crowd.PoolClosed, Now: base})
			require.NoError(t, err)
		}
		var (
			wg      sync.WaitGroup
			done    atomic.Bool
			started = make(chan struct{})
			errs    = make(chan error, 2)
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer done.Store(true)
			<-started // some pools are COMPLETED already, others complete meanwhile
			for _, u := range units {
				if _, err := b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: u.ID, From: crowd.UnitFinalized, To: crowd.UnitJudgable, Now: later}); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			once := sync.OnceFunc(func() { close(started) })
			defer once()
			for !done.Load() {
				if _, err := b.s.PoolCompleteMany(b.ctx, &store.PoolCompleteManyParams{Max: 2, Now: later}); err != nil {
					errs <- err
					return
				}
				once()
			}
		}()
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		for _, u := range units {
			p, err := b.s.PoolGet(b.ctx, u.PoolID)
			require.NoError(t, err)
			require.Equal(t, crowd.PoolClosed, p.Status, "pool %s: its unit is open again", p.ID)
			require.Equal(t, 1, p.Counts.Open())
		}
	})
}
