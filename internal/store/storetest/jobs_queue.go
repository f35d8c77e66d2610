package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

func testQueue(t *testing.T, open opener) {
	t.Run("QueueList", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		qs, err := b.s.QueueList(b.ctx)
		require.NoError(t, err)
		require.Empty(t, qs)

		f := b.listFixture(t)
		empty := newQueue()
		require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: empty, Paused: true, Now: at(time.Minute)}))
		require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: f.q1, Paused: true, Now: at(2 * time.Minute)}))

		got := queueMap(t, b)
		require.Len(t, got, 4)
		require.True(t, got[f.q1].Paused)
		requireTime(t, at(2*time.Minute), got[f.q1].UpdatedAt)
		require.Equal(t, map[job.State]int{job.StateQueued: 2}, nonZero(got[f.q1].Counts))
		require.False(t, got[f.q2].Paused)
		require.True(t, got[f.q2].UpdatedAt.IsZero(), "pause flag never set")
		require.Equal(t, map[job.State]int{job.StateCreated: 1, job.StateCanceled: 1}, nonZero(got[f.q2].Counts))
		require.False(t, got[f.q3].Paused)
		require.Equal(t, map[job.State]int{job.StateRunning: 1}, nonZero(got[f.q3].Counts))
		require.True(t, got[empty].Paused)
		requireTime(t, at(time.Minute), got[empty].UpdatedAt)
		require.Empty(t, nonZero(got[empty].Counts))

		require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: f.q1, Paused: false, Now: at(3 * time.Minute)}))
		got = queueMap(t, b)
		require.False(t, got[f.q1].Paused)
		require.True(t, got[f.q1].UpdatedAt.IsZero(), "no pause flag once resumed")

		// A queue paused then resumed with no jobs is not listed: the
		// resume deletes its pause row (it stayed listed forever).
		require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: empty, Paused: false, Now: at(3 * time.Minute)}))
		got = queueMap(t, b)
		require.NotContains(t, got, empty)
		require.Len(t, got, 3)
		counted, err := b.s.QueueCount(b.ctx, &store.QueueCountParams{Cap: 10})
		require.NoError(t, err)
		for _, q := range counted {
			require.NotEqual(t, empty, q.Name, "QueueCount (GET /v1/queues) lists it")
		}
		// Resuming a queue that was never paused stores nothing either.
		never := newQueue()
		require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: never, Paused: false, Now: at(3 * time.Minute)}))
		require.NotContains(t, queueMap(t, b), never)
		// Pausing again lists it again, and workers of a paused queue
		// still get nothing (the flag is what acquire reads).
		require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: empty, Paused: true, Now: at(4 * time.Minute)}))
		require.True(t, queueMap(t, b)[empty].Paused)

		// No queue has an empty name: pausing one is refused on both
		// backends (SQLite stored it).
		require.Error(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: "", Paused: true, Now: at(4 * time.Minute)}))
		require.NotContains(t, queueMap(t, b), "")
	})
}

func queueMap(t *testing.T, b *bundle) map[string]*store.Queue {
	t.Helper()
	qs, err := b.s.QueueList(b.ctx)
	require.NoError(t, err)
	m := map[string]*store.Queue{}
	for _, q := range qs {
		require.NotContains(t, m, q.Name, "queue listed twice")
		m[q.Name] = q
	}
	return m
}

func nonZero(m map[job.State]int) map[job.State]int {
	out := map[job.State]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// testJobQueueOf: a job's queue alone, ErrNotFound for no job.
func testJobQueueOf(t *testing.T, open opener) {
	b := setup(t, open)
	q := newQueue()
	res := b.insertAt(t, at(0), newJob(q))
	got, err := b.s.JobQueueOf(b.ctx, res[0].Job.ID)
	require.NoError(t, err)
	require.Equal(t, q, got)
	_, err = b.s.JobQueueOf(b.ctx, newID())
	require.ErrorIs(t, err, store.ErrNotFound)
}
