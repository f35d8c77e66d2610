package docket_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// manualClock is a clock tests move by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestRemoteLeaseLifecycle(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend, fastConfig())
		params := docket.LeaseParams{Queues: []string{"test.echo"}, Max: 10, Duration: 30 * time.Second, WorkerID: "py-worker-1"}

		// Long poll: nothing due, a job arrives while waiting. The poll's
		// goroutine hands its error to the test goroutine, which checks it.
		type polled struct {
			leases []*docket.Lease
			err    error
		}
		got := make(chan polled, 1)
		go func() {
			p := params
			p.Wait = 10 * time.Second
			leases, err := b.client.Lease(ctx, p)
			got <- polled{leases, err}
		}()
		time.Sleep(50 * time.Millisecond) // let the poll start waiting (either order passes)
		res, err := b.client.Insert(ctx, echoArgs{N: 1}, &docket.InsertOpts{MaxAttempts: 2})
		require.NoError(t, err)
		var leases []*docket.Lease
		select {
		case r := <-got:
			require.NoError(t, r.err)
			leases = r.leases
		case <-time.After(9 * time.Second):
			t.Fatal("long poll did not return the new job")
		}
		require.Len(t, leases, 1)
		l := leases[0]
		requireLeaseOf(t, res.Job.ID, 1, l.ID)
		require.Equal(t, "py-worker-1", l.Job.LeaseOwner)
		require.JSONEq(t, `{"N":1}`, string(l.Job.Payload))

		p := 30.0
		st, err := b.client.LeaseHeartbeat(ctx, l.ID, time.Minute, &p, "a third")
		require.NoError(t, err)
		require.False(t, st.CancelRequested)
		require.True(t, st.ExpiresAt.After(l.ExpiresAt))
		row, err := b.client.Get(ctx, res.Job.ID)
		require.NoError(t, err)
		require.InDelta(t, 30, row.Progress, 0.001)
		// A message alone renews the lease and keeps the progress.
		st2, err := b.client.LeaseHeartbeat(ctx, l.ID, 2*time.Minute, nil, "still going")
		require.NoError(t, err)
		require.True(t, st2.ExpiresAt.After(st.ExpiresAt))
		row, err = b.client.Get(ctx, res.Job.ID)
		require.NoError(t, err)
		require.InDelta(t, 30, row.Progress, 0.001)
		require.Equal(t, "still going", row.ProgressMsg)
		require.True(t, row.LeaseExpiresAt.Equal(st2.ExpiresAt))

		state, err := b.client.LeaseFail(ctx, l.ID, "upstream 503", true)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateRetry, state)
		// The old lease is fenced now.
		require.ErrorIs(t, b.client.LeaseComplete(ctx, l.ID, nil), docket.ErrLeaseLost)
		_, err = b.client.LeaseHeartbeat(ctx, l.ID, time.Minute, nil, "")
		require.ErrorIs(t, err, docket.ErrLeaseLost)

		// Once retried the second attempt is the last: a failure is final.
		_, err = b.client.Retry(ctx, res.Job.ID) // RETRY: unchanged
		require.NoError(t, err)
		b.start(t) // the scheduler requeues it; no handler for test.echo here
		var second []*docket.Lease
		eventually(t, 10*time.Second, "the retry to be leasable", func() bool {
			second, err = b.client.Lease(ctx, params)
			require.NoError(t, err)
			return len(second) == 1
		})
		requireLeaseOf(t, res.Job.ID, 2, second[0].ID)
		state, err = b.client.LeaseFail(ctx, second[0].ID, "still broken", true)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateDead, state)
	})
}

func TestRemoteLeaseExpiryIsFenced(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		clock := &manualClock{now: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}
		url := backend.URL(t)
		client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: true, Now: clock.Now})
		require.NoError(t, err)
		defer client.Close()
		res, err := client.Insert(ctx, echoArgs{}, nil)
		require.NoError(t, err)
		params := docket.LeaseParams{Queues: []string{"test.echo"}, Max: 1, Duration: 10 * time.Second, WorkerID: "a"}
		first, err := client.Lease(ctx, params)
		require.NoError(t, err)
		require.Len(t, first, 1)

		// The holder stalls past its lease; the leader's rescuer (here a
		// worker on the same clock) requeues the job; a second worker takes it.
		clock.Advance(11 * time.Second)
		w := docket.NewWorker(client, docket.WorkerConfig{
			RescueInterval: 10 * time.Millisecond, SchedulerInterval: 10 * time.Millisecond,
			LeaderTTL: 300 * time.Millisecond, RetryBackoffBase: time.Millisecond, RetryBackoffMax: time.Millisecond,
		})
		require.NoError(t, w.Start(ctx))
		defer w.Stop(ctx)
		params.WorkerID = "b"
		var second []*docket.Lease
		eventually(t, 10*time.Second, "the rescued job to be leased again", func() bool {
			clock.Advance(time.Millisecond)
			second, err = client.Lease(ctx, params)
			require.NoError(t, err)
			return len(second) == 1
		})
		require.ErrorIs(t, client.LeaseComplete(ctx, first[0].ID, json.RawMessage(`{"by":"a"}`)), docket.ErrLeaseLost)
		require.NoError(t, client.LeaseComplete(ctx, second[0].ID, json.RawMessage(`{"by":"b"}`)))
		row, err := client.Get(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateSuccess, row.State)
		require.JSONEq(t, `{"by":"b"}`, string(row.Result))
	})
}

func TestLeaseValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0], fastConfig())
	ctx := context.Background()
	cases := map[string]struct {
		p     docket.LeaseParams
		field string
	}{
		"no queues": {docket.LeaseParams{Max: 1, Duration: time.Minute, WorkerID: "w"}, "queues"},
		"max":       {docket.LeaseParams{Queues: []string{"q"}, Max: 101, Duration: time.Minute, WorkerID: "w"}, "max"},
		"wait":      {docket.LeaseParams{Queues: []string{"q"}, Max: 1, Wait: time.Hour, Duration: time.Minute, WorkerID: "w"}, "waitSeconds"},
		"lease":     {docket.LeaseParams{Queues: []string{"q"}, Max: 1, Duration: time.Second, WorkerID: "w"}, "leaseSeconds"},
		"worker":    {docket.LeaseParams{Queues: []string{"q"}, Max: 1, Duration: time.Minute}, "workerId"},
		"bad queue": {docket.LeaseParams{Queues: []string{"a b"}, Max: 1, Duration: time.Minute, WorkerID: "w"}, "queues[0]"},
	}
	for name, c := range cases {
		_, err := b.client.Lease(ctx, c.p)
		var verr *docket.ValidationError
		require.ErrorAs(t, err, &verr, name)
		require.Equal(t, c.field, verr.Field, name)
	}
	for _, bad := range []string{"", "x", "not-a-uuid.1", "0192f5a0-0000-7000-8000-000000000000.0", "0192f5a0-0000-7000-8000-000000000000.x"} {
		_, _, err := docket.ParseLeaseID(bad)
		require.Error(t, err, bad)
	}
}

// TestLeaseWaitersTakeTurns: many long-polls wait on one queue (one at a
// time listens, the others wait for its turn) and a long-poll on another
// queue is not held up by them. Every job inserted one by one reaches
// exactly one waiter, and every waiter gets one.
func TestLeaseWaitersTakeTurns(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend, fastConfig())
		const waiters = 12
		poll := func(queue string) <-chan []*docket.Lease {
			got := make(chan []*docket.Lease, 1)
			go func() {
				leases, err := b.client.Lease(ctx, docket.LeaseParams{
					Queues: []string{queue}, Max: 1, Wait: 20 * time.Second,
					Duration: 30 * time.Second, WorkerID: "w",
				})
				if err != nil {
					t.Errorf("lease: %v", err)
				}
				got <- leases
			}()
			return got
		}
		var polls []<-chan []*docket.Lease
		for range waiters {
			polls = append(polls, poll("test.echo"))
		}
		time.Sleep(100 * time.Millisecond) // let them wait (either order passes)

		// Another queue: its waiter has a turn of its own.
		other := poll("test.fatal")
		time.Sleep(50 * time.Millisecond)
		_, err := b.client.Insert(ctx, fatalArgs{}, nil)
		require.NoError(t, err)
		select {
		case leases := <-other:
			require.Len(t, leases, 1, "the other queue's waiter got its job")
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter on another queue was held up")
		}

		seen := map[string]bool{}
		for i := range waiters {
			_, err := b.client.Insert(ctx, echoArgs{N: i}, nil)
			require.NoError(t, err)
		}
		for i, got := range polls {
			select {
			case leases := <-got:
				require.Len(t, leases, 1, "waiter %d", i)
				require.False(t, seen[leases[0].ID], "lease %s handed out twice", leases[0].ID)
				seen[leases[0].ID] = true
			case <-time.After(15 * time.Second):
				t.Fatalf("waiter %d got nothing", i)
			}
		}
		require.Len(t, seen, waiters)
	})
}

// TestRemoteLeaseRelease: a lease given back on the last attempt leaves the
// job due again with the attempt refunded; the next lease can complete it;
// the released lease is fenced like a completed one.
func TestRemoteLeaseRelease(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend, fastConfig())
		res, err := b.client.Insert(ctx, echoArgs{N: 7}, &docket.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		params := docket.LeaseParams{Queues: []string{"test.echo"}, Max: 1, Duration: 30 * time.Second, WorkerID: "w1"}
		first, err := b.client.Lease(ctx, params)
		require.NoError(t, err)
		require.Len(t, first, 1)

		_, err = b.client.LeaseRelease(ctx, "not-a-lease", "")
		var verr *docket.ValidationError
		require.ErrorAs(t, err, &verr)
		require.Equal(t, "leaseId", verr.Field)

		state, err := b.client.LeaseRelease(ctx, first[0].ID, "worker w1 shutting down")
		require.NoError(t, err)
		require.Equal(t, docket.JobStateRetry, state)
		row, err := b.client.Get(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateRetry, row.State)
		require.Equal(t, 0, row.AttemptsUsed(), "the released attempt is refunded")
		require.Equal(t, "worker w1 shutting down", row.LastError)

		// Fenced: the released lease can neither end nor be released again.
		_, err = b.client.LeaseRelease(ctx, first[0].ID, "")
		require.ErrorIs(t, err, docket.ErrLeaseLost)
		require.ErrorIs(t, b.client.LeaseComplete(ctx, first[0].ID, nil), docket.ErrLeaseLost)

		b.start(t) // the scheduler queues the RETRY
		var second []*docket.Lease
		eventually(t, 10*time.Second, "the released job to be leasable", func() bool {
			second, err = b.client.Lease(ctx, params)
			require.NoError(t, err)
			return len(second) == 1
		})
		requireLeaseOf(t, res.Job.ID, 2, second[0].ID)
		require.NoError(t, b.client.LeaseComplete(ctx, second[0].ID, json.RawMessage(`{"ok":true}`)))
		attempts, err := b.client.Attempts(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Len(t, attempts, 2)
		require.Equal(t, docket.OutcomeInterrupted, attempts[0].Outcome)
	})
}

// validationFields lists the fields an error of the Go API names: one
// *ValidationError or an errors.Join of them.
func validationFields(t *testing.T, err error) []string {
	t.Helper()
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var fields []string
	for _, e := range errs {
		var v *docket.ValidationError
		require.ErrorAs(t, e, &v)
		fields = append(fields, v.Field)
	}
	return fields
}

// Every invalid field of a lease call is reported at once, not the first.
func TestLeaseValidationNamesEveryField(t *testing.T) {
	t.Parallel()
	p := docket.LeaseParams{Queues: []string{"ok", "not ok"}, Max: 0, Wait: time.Hour, Duration: time.Second}
	require.Equal(t, []string{"queues[1]", "max", "waitSeconds", "leaseSeconds", "workerId"}, validationFields(t, p.Validate()))
	p = docket.LeaseParams{Queues: []string{"q"}, Max: 1, Duration: time.Minute, WorkerID: "w"}
	require.NoError(t, p.Validate())
	// The queues are bounded (each is looked at every round of a wait);
	// past the bound their names are not judged one by one.
	p.Queues = make([]string, docket.LeaseMaxQueues)
	for i := range p.Queues {
		p.Queues[i] = fmt.Sprintf("q%d", i)
	}
	require.NoError(t, p.Validate())
	p.Queues = append(p.Queues, "not ok")
	require.Equal(t, []string{"queues"}, validationFields(t, p.Validate()))

	ctx := context.Background()
	c, err := docket.NewClient(ctx, docket.Config{DatabaseURL: "sqlite:" + t.TempDir() + "/docket.db", AutoMigrate: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	_, err = c.Lease(ctx, docket.LeaseParams{Queues: []string{"q"}, Max: 1000, Duration: time.Hour * 24})
	require.Equal(t, []string{"max", "leaseSeconds", "workerId"}, validationFields(t, err))
	progress := 101.0
	_, err = c.LeaseHeartbeat(ctx, "nope", time.Second, &progress, "")
	require.Equal(t, []string{"leaseId", "leaseSeconds", "progress"}, validationFields(t, err))
	progress = math.NaN() // not between 0 and 100 either (PostgreSQL stored it)
	_, err = c.LeaseHeartbeat(ctx, "nope", time.Second, &progress, "")
	require.Equal(t, []string{"leaseId", "leaseSeconds", "progress"}, validationFields(t, err))
	// A message alone is valid (it keeps the job's progress): on a lease
	// nobody holds any more (a real id, its job completed), the lease is
	// lost.
	_, err = c.Insert(ctx, docket.RawArgs{Type: "t", Payload: json.RawMessage(`{}`)}, &docket.InsertOpts{Queue: "q"})
	require.NoError(t, err)
	leases, err := c.Lease(ctx, docket.LeaseParams{Queues: []string{"q"}, Max: 1, Duration: time.Minute, WorkerID: "w"})
	require.NoError(t, err)
	require.Len(t, leases, 1)
	require.NoError(t, c.LeaseComplete(ctx, leases[0].ID, nil))
	_, err = c.LeaseHeartbeat(ctx, leases[0].ID, time.Minute, nil, "halfway")
	require.ErrorIs(t, err, docket.ErrLeaseLost)
}
