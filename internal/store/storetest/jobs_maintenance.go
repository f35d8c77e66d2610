package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// retryAt makes a RETRY job due at runAt, alone in its queue.
func (b *bundle) retryAt(t *testing.T, runAt time.Time) *job.Row {
	t.Helper()
	row := b.jobIn(t, job.StateRunning)
	p := finishParams(row, job.StateRetry)
	p.RunAt = runAt
	require.Equal(t, []bool{true}, b.finish(t, setupFinish, p))
	row = b.get(t, row.ID)
	require.Equal(t, job.StateRetry, row.State)
	return row
}

func testMaintenance(t *testing.T, open opener) {
	t.Run("ScheduleDueRetries", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		due1 := b.retryAt(t, at(time.Minute))
		due2 := b.retryAt(t, at(2*time.Minute)) // exactly Now: due
		notDue := b.retryAt(t, at(10*time.Minute))
		queued := b.jobIn(t, job.StateQueued)
		running := b.jobIn(t, job.StateRunning)

		now := at(2 * time.Minute)
		n, err := b.s.JobSchedule(b.ctx, &store.JobScheduleParams{Now: now, Max: 100})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		for _, r := range []*job.Row{due1, due2} {
			got := b.get(t, r.ID)
			require.Equal(t, job.StateQueued, got.State)
			require.Equal(t, r.Attempt, got.Attempt, "scheduling keeps the attempt count")
			requireTime(t, now, got.UpdatedAt)
		}
		requireUnchanged(t, notDue, b.get(t, notDue.ID))
		requireUnchanged(t, queued, b.get(t, queued.ID))
		requireUnchanged(t, running, b.get(t, running.ID))

		// Scheduled jobs are acquired, as attempt 2.
		rows := b.acquire(t, due1.Queue, 10, now.Add(time.Second))
		require.Equal(t, []uuid.UUID{due1.ID}, ids(rows))
		require.Equal(t, 2, rows[0].Attempt)
	})

	t.Run("ScheduleMax", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		for range 3 {
			b.retryAt(t, at(time.Minute))
		}
		for _, want := range []int{2, 1, 0} {
			n, err := b.s.JobSchedule(b.ctx, &store.JobScheduleParams{Now: later, Max: 2})
			require.NoError(t, err)
			require.Equal(t, want, n)
		}
		require.Equal(t, 3, countState(t, b, job.StateQueued))
	})

	t.Run("ListExpired", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		short, long, boundary := newJob(q), newJob(q), newJob(q)
		b.insert(t, short, long, boundary)
		acquireOne := func(p *store.JobInsertParams, d time.Duration) {
			t.Helper()
			// One at a time, in id order, each with its own lease.
			rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: q, Max: 1, Owner: owner, LeaseDuration: d, Now: at(time.Second)})
			require.NoError(t, err)
			require.Equal(t, []uuid.UUID{p.ID}, ids(rows))
		}
		acquireOne(short, time.Minute)      // expires base+61s
		acquireOne(long, time.Hour)         // expires base+1h1s
		acquireOne(boundary, 4*time.Minute) // expires base+4m1s: exactly Now, not before it
		b.retryAt(t, at(time.Second))       // RETRY: not RUNNING
		b.jobIn(t, job.StateQueued)

		now := at(4*time.Minute + time.Second)
		rows, err := b.s.JobListExpired(b.ctx, &store.JobListExpiredParams{Now: now, Max: 100})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{short.ID}, ids(rows))
		require.Equal(t, job.StateRunning, rows[0].State)
		require.Equal(t, 1, rows[0].Attempt)
		require.Equal(t, owner, rows[0].LeaseOwner)
		requireTime(t, at(61*time.Second), rows[0].LeaseExpiresAt)

		rows, err = b.s.JobListExpired(b.ctx, &store.JobListExpiredParams{Now: later.Add(time.Hour), Max: 100})
		require.NoError(t, err)
		require.ElementsMatch(t, []uuid.UUID{short.ID, long.ID, boundary.ID}, ids(rows))
	})

	t.Run("ListExpiredMax", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		for range 3 {
			b.jobIn(t, job.StateRunning)
		}
		rows, err := b.s.JobListExpired(b.ctx, &store.JobListExpiredParams{Now: later, Max: 2})
		require.NoError(t, err)
		require.Len(t, rows, 2)
	})

	t.Run("DeleteFinished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		finishedAt := func(state job.State, when time.Time) *job.Row {
			t.Helper()
			row := b.jobIn(t, job.StateRunning)
			require.Equal(t, []bool{true}, b.finish(t, when, finishParams(row, state)))
			return b.get(t, row.ID)
		}
		oldSuccess := finishedAt(job.StateSuccess, at(time.Minute))
		oldDead := finishedAt(job.StateDead, at(2*time.Minute))
		oldCanceled := finishedAt(job.StateCanceled, at(3*time.Minute))
		newSuccess := finishedAt(job.StateSuccess, at(10*time.Minute))
		keep := []*job.Row{
			newSuccess,
			b.jobIn(t, job.StateQueued),
			b.jobIn(t, job.StateCreated),
			b.jobIn(t, job.StateRunning),
			b.retryAt(t, at(time.Minute)),
		}

		n, err := b.s.JobDeleteFinished(b.ctx, &store.JobDeleteFinishedParams{FinishedBefore: at(5 * time.Minute), Max: 100})
		require.NoError(t, err)
		require.Equal(t, 3, n)
		for _, r := range []*job.Row{oldSuccess, oldDead, oldCanceled} {
			_, err := b.s.JobGet(b.ctx, r.ID)
			require.ErrorIs(t, err, store.ErrNotFound, "%s job", r.State)
			_, err = b.s.JobAttemptList(b.ctx, r.ID)
			require.ErrorIs(t, err, store.ErrNotFound, "attempts of a deleted %s job", r.State)
		}
		for _, r := range keep {
			requireUnchanged(t, r, b.get(t, r.ID))
			attempts, err := b.s.JobAttemptList(b.ctx, r.ID)
			require.NoError(t, err)
			if r.Attempt > 0 {
				require.NotEmpty(t, attempts)
			}
		}
		n, err = b.s.JobDeleteFinished(b.ctx, &store.JobDeleteFinishedParams{FinishedBefore: at(5 * time.Minute), Max: 100})
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("DeleteFinishedMax", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		for range 5 {
			b.jobIn(t, job.StateSuccess)
		}
		for _, want := range []int{2, 2, 1, 0} {
			n, err := b.s.JobDeleteFinished(b.ctx, &store.JobDeleteFinishedParams{FinishedBefore: later, Max: 2})
			require.NoError(t, err)
			require.Equal(t, want, n)
		}
		require.Zero(t, countState(t, b, job.StateSuccess))
	})
}

// countState is the number of jobs in state across queues.
func countState(t *testing.T, b *bundle, state job.State) int {
	t.Helper()
	counts, err := b.s.JobCount(b.ctx)
	require.NoError(t, err)
	n := 0
	for _, c := range counts {
		if c.State == state {
			n += c.Count
		}
	}
	return n
}
