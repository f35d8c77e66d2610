package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// testCancelOnRetry: a cancel requested while a job runs is not lost when
// the attempt then ends in RETRY (a retryable failure, or the rescuer
// retrying an expired lease): the job ends CANCELED instead of running
// again with the request cleared by the next acquire.
func testCancelOnRetry(t *testing.T, open opener) {
	// requestCancel starts a RUNNING job and asks to cancel it.
	requestCancel := func(t *testing.T, b *bundle) *job.Row {
		t.Helper()
		row := b.jobIn(t, job.StateRunning)
		got, err := b.s.JobCancel(b.ctx, &store.JobCancelParams{ID: row.ID, Now: at(10 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, job.StateRunning, got.Job.State)
		require.True(t, got.Job.CancelRequested)
		return got.Job
	}
	// requireCanceled asserts row's job ended CANCELED at now and is never
	// run again.
	requireCanceled := func(t *testing.T, b *bundle, row *job.Row, now time.Time) {
		t.Helper()
		got := b.get(t, row.ID)
		require.Equal(t, job.StateCanceled, got.State)
		requireTime(t, now, got.FinishedAt)
		requireTime(t, row.RunAt, got.RunAt, "run_at of a canceled job")
		require.Equal(t, "temporary failure", got.LastError)
		require.Equal(t, row.Attempt, got.Attempt)
		requireNoLease(t, got)
		_, err := b.s.JobSchedule(b.ctx, &store.JobScheduleParams{Now: later.Add(time.Hour), Max: 100})
		require.NoError(t, err)
		require.Empty(t, b.acquire(t, row.Queue, 10, later.Add(time.Hour)))
		require.Equal(t, job.StateCanceled, b.get(t, row.ID).State)
	}

	t.Run("HolderRetries", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := requestCancel(t, b)
		mark := b.outboxMark(t)
		now := at(20 * time.Second)
		require.Equal(t, []job.State{job.StateCanceled}, b.finishEnded(t, now, finishParams(row, job.StateRetry)),
			"the result is the state written, not the one asked for")
		b.requireOneStateChanged(t, mark, tr(row, job.StateRunning, job.StateCanceled))
		requireCanceled(t, b, row, now)
	})

	t.Run("RescuerRetries", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := requestCancel(t, b)
		mark := b.outboxMark(t)
		now := setupAcquire.Add(lease + time.Second) // the lease has expired
		ok, err := b.s.JobFinishMany(b.ctx, &store.JobFinishManyParams{
			Jobs: []*store.JobFinishParams{finishParams(row, job.StateRetry)}, Now: now, ExpiredOnly: true,
		})
		require.NoError(t, err)
		require.Equal(t, []job.State{job.StateCanceled}, ok)
		b.requireOneStateChanged(t, mark, tr(row, job.StateRunning, job.StateCanceled))
		requireCanceled(t, b, row, now)
	})

	t.Run("BatchMixed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		canceled := requestCancel(t, b)
		retried := b.jobIn(t, job.StateRunning)
		mark := b.outboxMark(t)
		now := at(20 * time.Second)
		require.Equal(t, []job.State{job.StateCanceled, job.StateRetry}, b.finishEnded(t, now,
			finishParams(canceled, job.StateRetry), finishParams(retried, job.StateRetry)))
		b.requireOneStateChanged(t, mark,
			tr(canceled, job.StateRunning, job.StateCanceled),
			tr(retried, job.StateRunning, job.StateRetry))
		got := b.get(t, retried.ID)
		require.Equal(t, job.StateRetry, got.State)
		require.True(t, got.FinishedAt.IsZero())
		requireTime(t, at(30*time.Minute), got.RunAt)
		requireCanceled(t, b, canceled, now)
	})

	t.Run("DeadStaysDead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := requestCancel(t, b)
		mark := b.outboxMark(t)
		require.Equal(t, []job.State{job.StateDead}, b.finishEnded(t, later, finishParams(row, job.StateDead)))
		b.requireOneStateChanged(t, mark, tr(row, job.StateRunning, job.StateDead))
		require.Equal(t, job.StateDead, b.get(t, row.ID).State)
	})
}
