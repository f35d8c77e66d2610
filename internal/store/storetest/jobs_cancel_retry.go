package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// canceler cancels one job: on its own (Store.JobCancel) or in a
// transaction (Tx.JobCancel in InTx). Both behave the same.
type canceler struct {
	name   string
	cancel func(b *bundle, p *store.JobCancelParams) (*store.JobCancelResult, error)
}

var cancelers = []canceler{
	{"Store", func(b *bundle, p *store.JobCancelParams) (*store.JobCancelResult, error) {
		return b.s.JobCancel(b.ctx, p)
	}},
	{"Tx", func(b *bundle, p *store.JobCancelParams) (*store.JobCancelResult, error) {
		var res *store.JobCancelResult
		err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			res, err = tx.JobCancel(ctx, p)
			return err
		})
		return res, err
	}},
}

func testCancel(t *testing.T, open opener) {
	for _, c := range cancelers {
		t.Run(c.name, func(t *testing.T) {
			testCancelBy(t, open, c)
		})
	}

	t.Run("TxRollbackUndoesCancel", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		before := b.jobIn(t, job.StateQueued)
		mark := b.outboxMark(t)
		boom := errors.New("boom")
		err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			res, err := tx.JobCancel(ctx, &store.JobCancelParams{ID: before.ID, Now: later})
			require.NoError(t, err)
			require.True(t, res.Canceled)
			got, err := tx.JobGet(ctx, before.ID)
			require.NoError(t, err)
			require.Equal(t, job.StateCanceled, got.State, "the transaction reads its own cancel")
			return boom
		})
		require.ErrorIs(t, err, boom)
		requireUnchanged(t, before, b.get(t, before.ID))
		b.requireNoOutbox(t, mark)
	})

	t.Run("TxRefusedCancelLeavesTxUsable", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		done := b.jobIn(t, job.StateSuccess)
		queued := b.jobIn(t, job.StateQueued)
		err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.JobCancel(ctx, &store.JobCancelParams{ID: done.ID, Now: later})
			requireInvalidTransition(t, err, job.StateSuccess, job.StateCanceled)
			_, err = tx.JobCancel(ctx, &store.JobCancelParams{ID: newID(), Now: later})
			require.ErrorIs(t, err, store.ErrNotFound)
			_, err = tx.JobCancel(ctx, &store.JobCancelParams{ID: queued.ID, Now: later})
			return err
		})
		require.NoError(t, err)
		requireUnchanged(t, done, b.get(t, done.ID))
		require.Equal(t, job.StateCanceled, b.get(t, queued.ID).State)
	})
}

func testCancelBy(t *testing.T, open opener, c canceler) {
	for _, from := range []job.State{job.StateCreated, job.StateQueued, job.StateRetry} {
		t.Run("From"+string(from), func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			before := b.jobIn(t, from)
			mark := b.outboxMark(t)
			got, err := c.cancel(b, &store.JobCancelParams{ID: before.ID, Now: later})
			require.NoError(t, err)
			require.NotNil(t, got)
			require.True(t, got.Canceled, "this cancel moved the job to CANCELED")
			for _, row := range []*job.Row{got.Job, b.get(t, before.ID)} {
				require.Equal(t, job.StateCanceled, row.State)
				requireTime(t, later, row.FinishedAt)
				requireTime(t, later, row.UpdatedAt)
				require.Greater(t, row.Version, before.Version)
				requireNoLease(t, row)
			}
			b.requireOneStateChanged(t, mark, tr(before, from, job.StateCanceled))
			// A canceled job is never acquired.
			require.Empty(t, b.acquire(t, before.Queue, 10, later.Add(time.Hour)))

			// Canceling it again changes nothing, and says so.
			mark = b.outboxMark(t)
			again, err := c.cancel(b, &store.JobCancelParams{ID: before.ID, Now: later.Add(time.Minute)})
			require.NoError(t, err)
			require.False(t, again.Canceled, "the job was CANCELED already")
			requireUnchanged(t, got.Job, again.Job)
			b.requireNoOutbox(t, mark)
		})
	}

	t.Run("FromRunning", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		before := b.jobIn(t, job.StateRunning)
		got, err := c.cancel(b, &store.JobCancelParams{ID: before.ID, Now: at(10 * time.Second)})
		require.NoError(t, err)
		require.False(t, got.Canceled, "a running job is canceled by its holder")
		for _, row := range []*job.Row{got.Job, b.get(t, before.ID)} {
			require.Equal(t, job.StateRunning, row.State, "a running job is canceled by its holder")
			require.True(t, row.CancelRequested)
			require.Equal(t, before.Attempt, row.Attempt)
			require.Equal(t, before.LeaseOwner, row.LeaseOwner)
			require.True(t, row.FinishedAt.IsZero())
		}

		hb, err := b.s.JobHeartbeat(b.ctx, &store.JobHeartbeatParams{
			Jobs: []job.Ref{{ID: before.ID, Attempt: before.Attempt}}, LeaseDuration: lease, Now: at(20 * time.Second),
		})
		require.NoError(t, err)
		require.Len(t, hb, 1)
		require.True(t, hb[0].Extended)
		require.True(t, hb[0].CancelRequested)

		// The holder honours it.
		require.Equal(t, []bool{true}, b.finish(t, at(30*time.Second), finishParams(before, job.StateCanceled)))
		require.Equal(t, job.StateCanceled, b.get(t, before.ID).State)
	})

	t.Run("AlreadyCanceled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		before := b.jobIn(t, job.StateCanceled)
		mark := b.outboxMark(t)
		got, err := c.cancel(b, &store.JobCancelParams{ID: before.ID, Now: later})
		require.NoError(t, err)
		require.False(t, got.Canceled)
		requireUnchanged(t, before, got.Job)
		requireUnchanged(t, before, b.get(t, before.ID))
		b.requireNoOutbox(t, mark)
	})

	for _, from := range []job.State{job.StateSuccess, job.StateDead} {
		t.Run("From"+string(from), func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			before := b.jobIn(t, from)
			mark := b.outboxMark(t)
			_, err := c.cancel(b, &store.JobCancelParams{ID: before.ID, Now: later})
			requireInvalidTransition(t, err, from, job.StateCanceled)
			requireUnchanged(t, before, b.get(t, before.ID))
			b.requireNoOutbox(t, mark)
		})
	}

	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		_, err := c.cancel(b, &store.JobCancelParams{ID: newID(), Now: later})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

func testRetry(t *testing.T, open opener) {
	for _, from := range []job.State{job.StateDead, job.StateCanceled} {
		t.Run("From"+string(from), func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			before := b.jobIn(t, from)
			require.Equal(t, 1, before.Attempt)
			mark := b.outboxMark(t)
			got, err := b.s.JobRetry(b.ctx, &store.JobRetryParams{ID: before.ID, Now: later})
			require.NoError(t, err)
			require.NotNil(t, got)
			for _, row := range []*job.Row{got, b.get(t, before.ID)} {
				require.Equal(t, job.StateQueued, row.State)
				require.Equal(t, 1, row.Attempt, "attempt, the fencing token, never goes back")
				require.Equal(t, 0, row.AttemptsUsed(), "a fresh budget of attempts")
				require.True(t, row.FinishedAt.IsZero(), "finished_at: %v", row.FinishedAt)
				requireTime(t, later, row.UpdatedAt)
				require.Greater(t, row.Version, before.Version)
				requireNoLease(t, row)
			}
			b.requireOneStateChanged(t, mark, tr(got, from, job.StateQueued))

			// Retrying again is a no-op.
			again, err := b.s.JobRetry(b.ctx, &store.JobRetryParams{ID: before.ID, Now: later.Add(time.Minute)})
			require.NoError(t, err)
			requireUnchanged(t, got, again)

			// The job is due at once; its next attempt has a new number, so
			// a holder of the old lease (a worker partitioned away since)
			// can neither renew nor finish the new one.
			rows := b.acquire(t, before.Queue, 10, later.Add(time.Second))
			require.Len(t, rows, 1)
			require.Equal(t, 2, rows[0].Attempt)
			require.Equal(t, 1, rows[0].AttemptsUsed())
			hb, err := b.s.JobHeartbeat(b.ctx, &store.JobHeartbeatParams{
				Jobs: []job.Ref{{ID: before.ID, Attempt: 1}}, LeaseDuration: time.Minute, Now: later.Add(2 * time.Second),
			})
			require.NoError(t, err)
			require.False(t, hb[0].Extended, "the old lease is fenced")
			ok, err := b.s.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: later.Add(2 * time.Second),
				Jobs: []*store.JobFinishParams{{ID: before.ID, Attempt: 1, State: job.StateSuccess}}})
			require.NoError(t, err)
			require.Equal(t, []job.State{""}, ok, "the old lease cannot finish the new attempt")
		})
	}

	for _, from := range []job.State{job.StateCreated, job.StateQueued, job.StateRetry, job.StateRunning} {
		t.Run("Unchanged"+string(from), func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			before := b.jobIn(t, from)
			mark := b.outboxMark(t)
			got, err := b.s.JobRetry(b.ctx, &store.JobRetryParams{ID: before.ID, Now: later})
			require.NoError(t, err)
			requireUnchanged(t, before, got)
			requireUnchanged(t, before, b.get(t, before.ID))
			b.requireNoOutbox(t, mark)
		})
	}

	// A RUNNING job whose cancel is requested will end CANCELED: answering
	// it unchanged would tell the caller the retry holds when it does not.
	// It is refused, naming the request, and the request is kept.
	t.Run("RunningCancelRequested", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		res, err := b.s.JobCancel(b.ctx, &store.JobCancelParams{ID: row.ID, Now: at(10 * time.Second)})
		require.NoError(t, err)
		before := res.Job
		require.True(t, before.CancelRequested)
		mark := b.outboxMark(t)
		_, err = b.s.JobRetry(b.ctx, &store.JobRetryParams{ID: before.ID, Now: later})
		requireInvalidTransition(t, err, job.StateRunning, job.StateQueued)
		var ite *job.InvalidTransitionError
		require.ErrorAs(t, err, &ite)
		require.Equal(t, job.ReasonCancelRequested, ite.Reason)
		after := b.get(t, before.ID)
		requireUnchanged(t, before, after)
		require.True(t, after.CancelRequested, "the cancel request is kept")
		b.requireNoOutbox(t, mark)
	})

	t.Run("FromSUCCESS", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		before := b.jobIn(t, job.StateSuccess)
		mark := b.outboxMark(t)
		_, err := b.s.JobRetry(b.ctx, &store.JobRetryParams{ID: before.ID, Now: later})
		requireInvalidTransition(t, err, job.StateSuccess, job.StateQueued)
		requireUnchanged(t, before, b.get(t, before.ID))
		b.requireNoOutbox(t, mark)
	})

	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		_, err := b.s.JobRetry(b.ctx, &store.JobRetryParams{ID: newID(), Now: later})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
