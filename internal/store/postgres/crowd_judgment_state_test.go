package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// statesOf counts the quality state rows of the pool's contributors cs.
func (g *crowdPool) statesOf(t *testing.T, cs ...uuid.UUID) int {
	t.Helper()
	return g.count(t, `SELECT count(*) FROM docket_pool_contributors WHERE pool_id = $1 AND contributor_id = ANY($2)`, g.pool, cs)
}

// TestJudgeGroupMakesStates: a batch whose contributors have no quality
// state in the pool yet (their first judgment) makes them in the batch,
// each locked and as the one-by-one way makes it (no trust, no flag,
// updated_at the judgment's time), beside a contributor who has one
// (theirs kept as it was): every judgment is answered by the batch, none
// alone.
func TestJudgeGroupMakesStates(t *testing.T) {
	t.Parallel()
	g := setupCrowdPool(t, crowdPoolParams{Units: 2, Slots: 3, Contributors: 3})
	require.NoError(t, g.s.InTx(g.ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.QualityStatePut(ctx, &store.QualityStatePutParams{PoolID: g.pool, ContributorID: g.contributors[0],
			Trust: quality.Trust{TestsCorrect: 3, TestsAnswered: 4, Value: 0.7}, Now: testBase})
		return err
	}))
	fresh := g.contributors[1:]
	require.Zero(t, g.statesOf(t, fresh...))
	as := []*crowd.Assignment{g.assign(t, g.contributors[0], g.units[0].ID), g.assign(t, g.contributors[1], g.units[0].ID),
		g.assign(t, g.contributors[2], g.units[1].ID)}
	js := make([]*judged, len(as))
	calls := make([]*judgeQueued, len(as))
	for i, a := range as {
		js[i] = &judged{}
		calls[i] = g.judgeCallOf(g.ctx, judgeParams(g.pool, a), finalizing(js[i], nil))
	}
	g.s.judgeSend(g.ctx, calls)
	for i, c := range calls {
		a := <-c.done
		require.False(t, a.alone, "judgment %d ran alone", i)
		require.NoError(t, a.err, "judgment %d", i)
		st := js[i].begun.State
		require.NotNil(t, st, "judgment %d", i)
		require.Equal(t, as[i].ContributorID, st.ContributorID)
		require.True(t, js[i].begun.Inserted.Created)
	}
	require.Equal(t, 0.7, js[0].begun.State.Trust.Value, "an existing state is read, not made again")
	for _, j := range js[1:] {
		st := j.begun.State
		require.Equal(t, quality.NewTrust(), st.Trust)
		require.False(t, st.Standing.Flagged)
		require.Zero(t, st.Counts)
		require.True(t, st.UpdatedAt.Equal(testBase.Add(time.Second)), "updated_at %s", st.UpdatedAt)
	}
	require.Equal(t, 2, g.statesOf(t, fresh...))
	judgments, _, _, _, _ := g.judgeCounts(t)
	require.Equal(t, 3, judgments)
	require.Equal(t, 2, g.count(t, `SELECT count(*) FROM docket_judgments WHERE pool_id = $1 AND trust IS NULL`, g.pool),
		"the new contributors' judgments have no trust snapshot")
}

// TestJudgeMakesNoStateForRefused: a first judgment that is refused (its
// assignment released) makes no quality state, in a batch (which is not
// rolled back for it: the others are stored in it and make theirs; the
// refused one is answered errNoQualityState and then refused alone) and
// alone; so does a batch that rolls back for any other reason.
func TestJudgeMakesNoStateForRefused(t *testing.T) {
	t.Parallel()
	g := setupCrowdPool(t, crowdPoolParams{Units: 2, Slots: 3, Contributors: 3})
	as := []*crowd.Assignment{g.assign(t, g.contributors[0], g.units[0].ID), g.assign(t, g.contributors[1], g.units[0].ID),
		g.assign(t, g.contributors[2], g.units[1].ID)}
	_, err := g.s.AssignmentRelease(g.ctx, &store.AssignmentReleaseParams{ID: as[1].ID, ContributorID: as[1].ContributorID, Now: testBase})
	require.NoError(t, err)

	js := make([]*judged, len(as))
	calls := make([]*judgeQueued, len(as))
	for i, a := range as {
		js[i] = &judged{}
		calls[i] = g.judgeCallOf(g.ctx, judgeParams(g.pool, a), finalizing(js[i], nil))
	}
	g.s.judgeSend(g.ctx, calls)
	for i, c := range calls {
		a := <-c.done
		require.False(t, a.alone, "judgment %d: the batch is not rolled back for a refused one: %+v", i, a)
		if i == 1 {
			require.ErrorIs(t, a.err, errNoQualityState, "the refused one has no state made for it")
			continue
		}
		require.NoError(t, a.err, "judgment %d", i)
		require.NotNil(t, js[i].begun, "judgment %d stored in the batch", i)
		require.NotNil(t, js[i].begun.Inserted, "judgment %d stored in the batch", i)
	}
	require.Equal(t, 0, g.statesOf(t, g.contributors[1]))
	require.Equal(t, 2, g.statesOf(t, g.contributors[0], g.contributors[2]))

	// Alone (as the group's caller runs it after errNoQualityState): the
	// refused one is refused and makes no state.
	err = g.s.JudgmentInTx(g.ctx, judgeParams(g.pool, as[1]), finalizing(js[1], nil))
	var ae *crowd.AssignmentError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, crowd.RefusedNotActive, ae.Reason)
	require.Equal(t, 0, g.statesOf(t, g.contributors[1]))

	// The piped transaction alone, refused: no state either.
	err = g.s.judgmentInTxPiped(g.ctx, judgeParams(g.pool, as[1]), finalizing(&judged{}, nil))
	require.ErrorIs(t, err, errNoQualityState)
	require.Equal(t, 0, g.statesOf(t, g.contributors[1]))
}
