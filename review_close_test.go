package docket_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestReviewHeldPoolClose: closing the review step's pool while its unit
// is held for a redo (reject) leaves the held unit to the redo: it has
// its verdict already, and finalizing it again would redo label again
// and hold it again, every round of the pool-completer. Once label's
// redo finalizes, the review SUCCEEDED with verdict reject as without
// the close, the held unit FINALIZED, and the review's pool COMPLETED.
func TestReviewHeldPoolClose(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := reviewSetup(t, backend, reviewTask)
		ctx := context.Background()
		id := b.start(0)
		b.label(id, "yes", "no")
		run := b.run(id)
		label, review := stepNamed(t, run, "label"), stepNamed(t, run, "review")
		b.judge(review.UnitID, b.contributor(), `{"verdict":"reject"}`)
		held, err := b.client.UnitGet(ctx, review.UnitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitPaused, held.State)
		reviewPool := held.PoolID
		heldAt := held.UpdatedAt

		_, err = b.client.PoolClose(ctx, reviewPool)
		require.NoError(t, err)
		for range 3 {
			_, err = b.client.PoolsComplete(ctx)
			require.NoError(t, err)
		}
		held, err = b.client.UnitGet(ctx, review.UnitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitPaused, held.State, "the held unit waits for the redo")
		require.Equal(t, heldAt, held.UpdatedAt, "and is left as it is: not finalized and held again")
		unit, err := b.client.UnitGet(ctx, label.UnitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitJudgable, unit.State)
		require.Equal(t, 4, unit.JudgmentsPerUnit, "label redone once, not once a round")
		require.Equal(t, docket.StepRunning, stepNamed(t, b.run(id), "review").State)

		b.judge(label.UnitID, b.contributor(), `{"same":"no"}`)
		require.NotNil(t, b.judge(label.UnitID, b.contributor(), `{"same":"no"}`).Finalized)
		run = b.run(id)
		require.Equal(t, docket.StepSucceeded, stepNamed(t, run, "review").State)
		require.JSONEq(t, `{"verdict":"reject","output":{"same":"no"}}`, string(stepNamed(t, run, "review").Output))
		_, err = b.client.PoolsComplete(ctx)
		require.NoError(t, err)
		pool, err := b.client.PoolGet(ctx, reviewPool)
		require.NoError(t, err)
		require.Equal(t, docket.PoolCompleted, pool.Status)
	})
}

// TestReviewRedoCanceledPoolClose: label's pool closed while its unit is
// redone (no clean judgment: CANCELED) fails the review, and the
// review's held unit is CANCELED with it, so that the review's pool,
// closed, COMPLETES.
func TestReviewRedoCanceledPoolClose(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := reviewSetup(t, backend, reviewTask)
		ctx := context.Background()
		id := b.start(0)
		b.label(id, "yes", "no")
		run := b.run(id)
		label, review := stepNamed(t, run, "label"), stepNamed(t, run, "review")
		b.judge(review.UnitID, b.contributor(), `{"verdict":"reject"}`)
		unit, err := b.client.UnitGet(ctx, label.UnitID)
		require.NoError(t, err)
		held, err := b.client.UnitGet(ctx, review.UnitID)
		require.NoError(t, err)

		_, err = b.client.PoolClose(ctx, unit.PoolID)
		require.NoError(t, err)
		unit, err = b.client.UnitGet(ctx, label.UnitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitCanceled, unit.State)
		run = b.run(id)
		require.Equal(t, docket.StepFailed, stepNamed(t, run, "review").State)
		held, err = b.client.UnitGet(ctx, held.ID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitCanceled, held.State, "the held unit ends with its review")

		pool, err := b.client.PoolClose(ctx, held.PoolID)
		require.NoError(t, err)
		require.Equal(t, docket.PoolCompleted, pool.Status)
	})
}

// TestReviewRejectCompletedPool: label's pool closed and COMPLETED (its
// unit FINALIZED) before the review rejects: the redo reopened label's
// unit in a COMPLETED pool, where no contributor could take it and no
// close ended it, so the review stayed RUNNING and the run with it, for
// ever. The reopen takes the pool back to CLOSED; the pool-completer's
// next round ends the unit as a close does (no clean judgment: CANCELED),
// which fails the review (naming the redo) and the run, cancels the held
// unit, and completes both pools.
func TestReviewRejectCompletedPool(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := reviewSetup(t, backend, reviewTask)
		ctx := context.Background()
		id := b.start(0)
		b.label(id, "yes", "no")
		run := b.run(id)
		label, review := stepNamed(t, run, "label"), stepNamed(t, run, "review")
		unit, err := b.client.UnitGet(ctx, label.UnitID)
		require.NoError(t, err)
		pool, err := b.client.PoolClose(ctx, unit.PoolID)
		require.NoError(t, err)
		require.Equal(t, docket.PoolCompleted, pool.Status)

		b.judge(review.UnitID, b.contributor(), `{"verdict":"reject"}`)
		pool, err = b.client.PoolGet(ctx, unit.PoolID)
		require.NoError(t, err)
		require.Equal(t, docket.PoolClosed, pool.Status, "the redo's reopen takes the pool back to CLOSED")
		unit, err = b.client.UnitGet(ctx, unit.ID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitJudgable, unit.State)

		_, err = b.client.PoolsComplete(ctx)
		require.NoError(t, err)
		unit, err = b.client.UnitGet(ctx, unit.ID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitCanceled, unit.State, "ended as a closed pool ends a unit short of judgments")
		run = b.run(id)
		require.Equal(t, docket.StepFailed, stepNamed(t, run, "review").State)
		require.Contains(t, stepNamed(t, run, "review").Error, "was canceled")
		require.Contains(t, stepNamed(t, run, "review").Error,
			fmt.Sprintf(": pool %s was closed before unit %s had enough judgments (0 of 2)", unit.PoolID, unit.ID), "what ended the redo")
		require.Equal(t, docket.RunFailed, run.State)
		held, err := b.client.UnitGet(ctx, review.UnitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitCanceled, held.State)
		pool, err = b.client.PoolGet(ctx, unit.PoolID)
		require.NoError(t, err)
		require.Equal(t, docket.PoolCompleted, pool.Status, "completed again")
		_, err = b.client.PoolClose(ctx, held.PoolID)
		require.NoError(t, err)
		reviews, err := b.client.PoolGet(ctx, held.PoolID)
		require.NoError(t, err)
		require.Equal(t, docket.PoolCompleted, reviews.Status)
	})
}
