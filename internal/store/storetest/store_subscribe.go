package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

const (
	// wakeupDeadline is how long a test waits for a wakeup.
	wakeupDeadline = 5 * time.Second
	// wakeupNudge: a wakeup sent while a listener is still connecting may
	// be lost (delivery is best effort), so the trigger is repeated this
	// often until one arrives.
	wakeupNudge = 500 * time.Millisecond
)

// awaitWakeup calls trigger, then waits until ch delivers want or "" (which
// means "anything may have changed"), calling trigger again every
// wakeupNudge. It fails the test after wakeupDeadline.
func awaitWakeup(t *testing.T, ch <-chan string, want string, trigger func()) {
	t.Helper()
	trigger()
	deadline := time.NewTimer(wakeupDeadline)
	defer deadline.Stop()
	nudge := time.NewTicker(wakeupNudge)
	defer nudge.Stop()
	var other []string
	for {
		select {
		case got := <-ch:
			if got == want || got == "" {
				return
			}
			other = append(other, got)
		case <-nudge.C:
			trigger()
		case <-deadline.C:
			t.Fatalf("no wakeup %q within %v (got only %q)", want, wakeupDeadline, other)
		}
	}
}

func testSubscribe(t *testing.T, open opener) {
	t.Run("JobAvailableOnInsert", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		ch, cancel := b.s.Subscribe(store.TopicJobAvailable)
		defer cancel()
		q := newQueue()
		awaitWakeup(t, ch, q, func() { b.insertOne(t, newJob(q)) })
	})

	t.Run("JobAvailableOnSchedule", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRetry)
		// Subscribed after the setup: wakeups of the insert are not waited for.
		ch, cancel := b.s.Subscribe(store.TopicJobAvailable)
		defer cancel()
		scheduled := false
		awaitWakeup(t, ch, row.Queue, func() {
			if scheduled {
				return // the job moved once; nothing is left to nudge
			}
			n, err := b.s.JobSchedule(b.ctx, &store.JobScheduleParams{Now: later, Max: 10})
			require.NoError(t, err)
			require.Equal(t, 1, n)
			scheduled = true
		})
	})

	t.Run("JobAvailableOnResume", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateQueued)
		require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: row.Queue, Paused: true, Now: at(time.Minute)}))
		// Subscribed after the setup: wakeups of the insert are not waited for.
		ch, cancel := b.s.Subscribe(store.TopicJobAvailable)
		defer cancel()
		awaitWakeup(t, ch, row.Queue, func() {
			require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: row.Queue, Paused: false, Now: at(2 * time.Minute)}))
		})
	})

	t.Run("JobAvailableOnNotifyInserted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		due := b.insertOne(t, newJob(newQueue()))
		ch, cancel := b.s.Subscribe(store.TopicJobAvailable)
		defer cancel()
		// received drains what was delivered so far: JobNotifyInserted
		// publishes before it returns.
		received := func() map[string]bool {
			got := map[string]bool{}
			for {
				select {
				case q := <-ch:
					got[q] = true
				default:
					return got
				}
			}
		}
		notDue, created := *due, *due
		notDue.Queue, notDue.RunAt = newQueue(), due.RunAt.Add(time.Hour)
		created.Queue, created.State = newQueue(), job.StateCreated
		received()
		b.s.JobNotifyInserted(&store.JobNotifyInsertedParams{Jobs: []*job.Row{&notDue, &created, nil}, Now: due.RunAt})
		got := received()
		require.False(t, got[notDue.Queue], "a job not due yet")
		require.False(t, got[created.Queue], "a CREATED job")
		b.s.JobNotifyInserted(&store.JobNotifyInsertedParams{Jobs: []*job.Row{due, due}, Now: due.RunAt})
		require.True(t, received()[due.Queue], "a QUEUED job due now")
	})

	t.Run("JobCancelOnRunning", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		ch, cancel := b.s.Subscribe(store.TopicJobCancel)
		defer cancel()
		awaitWakeup(t, ch, row.ID.String(), func() {
			got, err := b.s.JobCancel(b.ctx, &store.JobCancelParams{ID: row.ID, Now: at(10 * time.Second)})
			require.NoError(t, err)
			require.True(t, got.Job.CancelRequested)
		})
	})

	t.Run("JobCancelOnRunningInTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		ch, cancel := b.s.Subscribe(store.TopicJobCancel)
		defer cancel()
		awaitWakeup(t, ch, row.ID.String(), func() {
			require.NoError(t, b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
				got, err := tx.JobCancel(ctx, &store.JobCancelParams{ID: row.ID, Now: at(10 * time.Second)})
				require.NoError(t, err)
				require.True(t, got.Job.CancelRequested)
				select {
				case id := <-ch:
					require.NotEqual(t, row.ID.String(), id, "the holder was woken before the commit")
				default:
				}
				return nil
			}))
		})
	})

	t.Run("CancelStopsDelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		stopped, cancelStopped := b.s.Subscribe(store.TopicJobAvailable)
		cancelStopped()
		cancelStopped() // safe twice
		// What came before the cancel may wait in the buffer (on
		// PostgreSQL, NOTIFY is shared with every parallel test on the
		// server): nothing may come after it.
	drain:
		for {
			select {
			case _, ok := <-stopped:
				if !ok {
					break drain
				}
			default:
				break drain
			}
		}
		live, cancelLive := b.s.Subscribe(store.TopicJobAvailable)
		defer cancelLive()
		q := newQueue()
		awaitWakeup(t, live, q, func() { b.insertOne(t, newJob(q)) })
		select {
		case got, ok := <-stopped:
			require.False(t, ok, "canceled subscription got %q", got) // closed is fine
		default:
		}
	})
}
