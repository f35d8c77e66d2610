package storetest

import (
	"bytes"
	"context"
	"slices"
	"testing"

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
