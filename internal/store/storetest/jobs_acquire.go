package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

func testAcquire(t *testing.T, open opener) {
	t.Run("SetsLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := newJob(newQueue())
		before := b.insertOne(t, p)
		now := at(10 * time.Second)
		rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{
			Queue: p.Queue, Max: 5, Owner: "node-x", LeaseDuration: 45 * time.Second, Now: now,
		})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		for _, row := range []*job.Row{rows[0], b.get(t, p.ID)} {
			require.Equal(t, p.ID, row.ID)
			require.Equal(t, job.StateRunning, row.State)
			require.Equal(t, 1, row.Attempt)
			require.Equal(t, "node-x", row.LeaseOwner)
			requireTime(t, now.Add(45*time.Second), row.LeaseExpiresAt)
			requireTime(t, now, row.AttemptedAt)
			requireTime(t, now, row.UpdatedAt)
			require.Greater(t, row.Version, before.Version)
			require.JSONEq(t, string(p.Payload), string(row.Payload))
			require.Equal(t, p.Type, row.Type)
		}
		require.Equal(t, b.get(t, p.ID), rows[0], "the acquired row is the row as stored")
	})

	// A job acquired again after a retry, at times finer than the store
	// keeps: the row JobAcquire returns is still the row as stored (the
	// PostgreSQL store fills in the columns it set from the values it set
	// them to rather than reading them back).
	t.Run("ReacquiredRowIsStoredRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := newJob(newQueue())
		p.IdempotencyKey = "reacquired-" + p.ID.String()
		b.insertOne(t, p)
		first := b.acquire(t, p.Queue, 1, at(time.Second+123456789))
		require.Len(t, first, 1)
		require.Equal(t, b.get(t, p.ID), first[0])
		retry := finishParams(first[0], job.StateRetry)
		retry.RunAt = at(2*time.Second + 987654321)
		require.Equal(t, []bool{true}, b.finish(t, at(2*time.Second), retry))
		_, err := b.s.JobSchedule(b.ctx, &store.JobScheduleParams{Now: at(3 * time.Second), Max: 10})
		require.NoError(t, err)
		again := b.acquire(t, p.Queue, 1, at(3*time.Second+555555555))
		require.Len(t, again, 1)
		require.Equal(t, 2, again[0].Attempt)
		require.NotEmpty(t, again[0].LastError, "the retry's error stays on the row")
		require.Equal(t, b.get(t, p.ID), again[0], "the acquired row is the row as stored")
	})

	t.Run("PriorityOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		var ps []*store.JobInsertParams
		for _, prio := range []int{2, 0, 1} {
			p := newJob(q)
			p.Priority = prio
			ps = append(ps, p)
		}
		b.insert(t, ps...)
		now := at(time.Second)
		for _, want := range []*store.JobInsertParams{ps[1], ps[2], ps[0]} {
			rows := b.acquire(t, q, 1, now)
			require.Len(t, rows, 1)
			require.Equal(t, want.ID, rows[0].ID, "want priority %d next, got priority %d", want.Priority, rows[0].Priority)
		}
	})

	t.Run("PriorityAging", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		// Default aging is 5 minutes per priority step.
		old := newJob(q) // key: base-10m + 1×5m = base-5m
		old.Priority = 1
		old.RunAt = at(-10 * time.Minute)
		fresh := newJob(q) // key: base
		fresh.RunAt = base
		notOldEnough := newJob(q) // key: base-2m + 2×5m = base+8m
		notOldEnough.Priority = 2
		notOldEnough.RunAt = at(-2 * time.Minute)
		b.insert(t, fresh, notOldEnough, old)
		now := at(time.Second)
		for _, want := range []*store.JobInsertParams{old, fresh, notOldEnough} {
			rows := b.acquire(t, q, 1, now)
			require.Len(t, rows, 1)
			require.Equal(t, want.ID, rows[0].ID, "want priority %d run_at %v next", want.Priority, want.RunAt)
		}
	})

	t.Run("PriorityDoesNotDelayDueJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := newJob(newQueue())
		p.Priority = 9
		b.insertOne(t, p)
		rows := b.acquire(t, p.Queue, 1, at(time.Second))
		require.Len(t, rows, 1, "a due job of low priority is acquired when nothing else waits")
	})

	t.Run("EqualKeysByID", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		ps := []*store.JobInsertParams{newJob(q), newJob(q), newJob(q), newJob(q)}
		// Insert newest id first, so insertion order is not id order.
		b.insert(t, ps[3], ps[1], ps[2], ps[0])
		var got []uuid.UUID
		for range ps {
			rows := b.acquire(t, q, 1, at(time.Second))
			require.Len(t, rows, 1)
			got = append(got, rows[0].ID)
		}
		require.Equal(t, []uuid.UUID{ps[0].ID, ps[1].ID, ps[2].ID, ps[3].ID}, got)
	})

	t.Run("BatchTakesBest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		var ps []*store.JobInsertParams
		for i := range 6 {
			p := newJob(q)
			p.Priority = 5 - i // the last inserted are the best
			ps = append(ps, p)
		}
		b.insert(t, ps...)
		rows := b.acquire(t, q, 3, at(time.Second))
		require.ElementsMatch(t, []uuid.UUID{ps[3].ID, ps[4].ID, ps[5].ID}, ids(rows))
	})

	t.Run("FutureRunAt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := newJob(newQueue())
		p.RunAt = at(10 * time.Minute)
		b.insertOne(t, p)
		require.Empty(t, b.acquire(t, p.Queue, 10, at(time.Second)))
		require.Empty(t, b.acquire(t, p.Queue, 10, at(10*time.Minute-time.Second)))
		require.Equal(t, job.StateQueued, b.get(t, p.ID).State)
		rows := b.acquire(t, p.Queue, 10, at(10*time.Minute+time.Second))
		require.Equal(t, []uuid.UUID{p.ID}, ids(rows))
	})

	t.Run("Max", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		for range 5 {
			b.insert(t, newJob(q))
		}
		seen := map[uuid.UUID]bool{}
		for _, want := range []int{3, 2, 0} {
			rows := b.acquire(t, q, 3, at(time.Second))
			require.Len(t, rows, want)
			for _, r := range rows {
				require.False(t, seen[r.ID], "acquired twice")
				seen[r.ID] = true
			}
		}
	})

	t.Run("OtherQueuesUntouched", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q1, q2 := newQueue(), newQueue()
		a1, a2, other := newJob(q1), newJob(q1), newJob(q2)
		b.insert(t, a1, a2, other)
		rows := b.acquire(t, q1, 10, at(time.Second))
		require.ElementsMatch(t, []uuid.UUID{a1.ID, a2.ID}, ids(rows))
		require.Equal(t, job.StateQueued, b.get(t, other.ID).State)
		require.Equal(t, 0, b.get(t, other.ID).Attempt)
	})

	t.Run("OnlyQueued", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		created := newJob(q)
		created.State = job.StateCreated
		b.insert(t, created)
		// A RETRY job whose run_at has passed waits for the scheduler, and an
		// expired RUNNING lease waits for the rescuer.
		retry, running := newJob(q), newJob(q)
		b.insert(t, retry, running)
		rows := b.acquire(t, q, 2, at(time.Second))
		require.Len(t, rows, 2)
		var retryRow *job.Row
		for _, r := range rows {
			if r.ID == retry.ID {
				retryRow = r
			}
		}
		require.NotNil(t, retryRow)
		fp := finishParams(retryRow, job.StateRetry)
		fp.RunAt = at(time.Minute)
		require.Equal(t, []bool{true}, b.finish(t, at(2*time.Second), fp))

		require.Empty(t, b.acquire(t, q, 10, later))
		require.Equal(t, job.StateCreated, b.get(t, created.ID).State)
		require.Equal(t, job.StateRetry, b.get(t, retry.ID).State)
		require.Equal(t, 1, b.get(t, running.ID).Attempt)
	})

	t.Run("PausedQueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		p := newJob(q)
		b.insertOne(t, p)
		require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: q, Paused: true, Now: at(time.Second)}))
		mark := b.outboxMark(t)
		require.Empty(t, b.acquire(t, q, 10, at(2*time.Second)))
		require.Equal(t, job.StateQueued, b.get(t, p.ID).State)
		b.requireNoOutbox(t, mark)

		// Pausing one queue leaves others alone.
		other := newJob(newQueue())
		b.insertOne(t, other)
		require.Len(t, b.acquire(t, other.Queue, 10, at(2*time.Second)), 1)

		require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: q, Paused: false, Now: at(3 * time.Second)}))
		rows := b.acquire(t, q, 10, at(4*time.Second))
		require.Equal(t, []uuid.UUID{p.ID}, ids(rows))
	})

	t.Run("PauseBeforeAnyJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: q, Paused: true, Now: base}))
		b.insertOne(t, newJob(q))
		require.Empty(t, b.acquire(t, q, 10, at(time.Second)))
	})

	t.Run("EmptyQueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		require.Empty(t, b.acquire(t, newQueue(), 10, at(time.Second)))
	})
}

// testSortKeyFollowsRunAt checks that a job put back in the queue is ordered
// by its new run_at, not the one it was inserted with: job A (inserted at
// base, run_at base) is requeued by each path with a run_at after base+10m,
// and job B of the same priority, due at base+10m, must go first.
func testSortKeyFollowsRunAt(t *testing.T, open opener) {
	requeue := map[string]func(t *testing.T, b *bundle, a *job.Row) time.Time{
		"Schedule": func(t *testing.T, b *bundle, a *job.Row) time.Time {
			n, err := b.s.JobSchedule(b.ctx, &store.JobScheduleParams{Now: later, Max: 10})
			require.NoError(t, err)
			require.Equal(t, 1, n)
			return later
		},
		"TransitionRetryToQueued": func(t *testing.T, b *bundle, a *job.Row) time.Time {
			_, err := b.s.JobTransition(b.ctx, &store.JobTransitionParams{
				ID: a.ID, From: job.StateRetry, To: job.StateQueued, RunAt: at(50 * time.Minute), Now: at(20 * time.Minute),
			})
			require.NoError(t, err)
			return later
		},
		"Retry": func(t *testing.T, b *bundle, a *job.Row) time.Time {
			_, err := b.s.JobTransition(b.ctx, &store.JobTransitionParams{ID: a.ID, From: job.StateRetry, To: job.StateDead, Now: at(20 * time.Minute)})
			require.NoError(t, err)
			_, err = b.s.JobRetry(b.ctx, &store.JobRetryParams{ID: a.ID, Now: later})
			require.NoError(t, err)
			return later.Add(time.Second)
		},
		"TransitionDeadToQueued": func(t *testing.T, b *bundle, a *job.Row) time.Time {
			_, err := b.s.JobTransition(b.ctx, &store.JobTransitionParams{ID: a.ID, From: job.StateRetry, To: job.StateDead, Now: at(20 * time.Minute)})
			require.NoError(t, err)
			_, err = b.s.JobTransition(b.ctx, &store.JobTransitionParams{ID: a.ID, From: job.StateDead, To: job.StateQueued, Now: later})
			require.NoError(t, err)
			return later.Add(time.Second)
		},
	}
	for name, requeue := range requeue {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			a := b.jobIn(t, job.StateRetry) // RETRY, run_at base+30m
			bp := newJob(a.Queue)
			bp.RunAt = at(10 * time.Minute)
			b.insertOne(t, bp)
			now := requeue(t, b, a)
			require.Equal(t, job.StateQueued, b.get(t, a.ID).State)
			var got []uuid.UUID
			for range 2 {
				rows := b.acquire(t, a.Queue, 1, now)
				require.Len(t, rows, 1)
				got = append(got, rows[0].ID)
			}
			require.Equal(t, []uuid.UUID{bp.ID, a.ID}, got, "the requeued job must be ordered by its new run_at")
		})
	}

	t.Run("FutureJobDoesNotBlock", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		future := newJob(q) // key base+1m, not due before it
		future.RunAt = at(time.Minute)
		due := newJob(q) // key base+5m, due
		due.Priority = 1
		b.insert(t, future, due)
		rows := b.acquire(t, q, 1, at(time.Second))
		require.Equal(t, []uuid.UUID{due.ID}, ids(rows))
	})

	t.Run("EqualKeysAcrossPriorities", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		first := newJob(q) // priority 1, run_at base-5m: key base
		first.Priority = 1
		first.RunAt = at(-5 * time.Minute)
		second := newJob(q) // priority 0, run_at base: key base
		b.insert(t, second, first)
		for _, want := range []uuid.UUID{first.ID, second.ID} {
			rows := b.acquire(t, q, 1, at(time.Second))
			require.Equal(t, []uuid.UUID{want}, ids(rows), "equal sort keys: lower id first")
		}
	})
}
