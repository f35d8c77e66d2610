package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// faultyStore injects failures into a real store: renewals or writes of
// completions fail while the flags are set, as when the database is
// unreachable from this node.
type faultyStore struct {
	store.Store
	heartbeatDown atomic.Bool
	finishDown    atomic.Bool
	nodeDown      atomic.Bool  // the node cannot register
	nodeBeats     atomic.Int64 // NodeHeartbeat calls

	// quietCancels: Subscribe's cancel wakeups never arrive. The channel's
	// name is one per database, and the tests share one: a cancel in
	// another test (or a listener's reconnect) would wake this engine too.
	quietCancels bool

	mu      sync.Mutex
	renewed map[uuid.UUID]int // JobHeartbeat calls that renewed each job's lease
}

func (f *faultyStore) Subscribe(topic store.Topic) (<-chan string, func()) {
	if topic == store.TopicJobCancel && f.quietCancels {
		return make(chan string), func() {}
	}
	return f.Store.Subscribe(topic)
}

var errInjected = errors.New("injected: database unreachable")

func (f *faultyStore) JobHeartbeat(ctx context.Context, p *store.JobHeartbeatParams) ([]*store.JobHeartbeatResult, error) {
	if f.heartbeatDown.Load() {
		return nil, errInjected
	}
	res, err := f.Store.JobHeartbeat(ctx, p)
	if err != nil {
		return res, err
	}
	f.mu.Lock() // counted once written: the tests read the rows after
	if f.renewed == nil {
		f.renewed = map[uuid.UUID]int{}
	}
	for _, r := range res {
		if r.Extended {
			f.renewed[r.Ref.ID]++
		}
	}
	f.mu.Unlock()
	return res, nil
}

func (f *faultyStore) JobFinishMany(ctx context.Context, p *store.JobFinishManyParams) ([]job.State, error) {
	if f.finishDown.Load() {
		return nil, errInjected
	}
	return f.Store.JobFinishMany(ctx, p)
}

func (f *faultyStore) NodeHeartbeat(ctx context.Context, p *store.NodeHeartbeatParams) error {
	f.nodeBeats.Add(1)
	if f.nodeDown.Load() {
		return errInjected
	}
	return f.Store.NodeHeartbeat(ctx, p)
}

func (f *faultyStore) Ping(ctx context.Context) error {
	if f.finishDown.Load() {
		return errInjected
	}
	return f.Store.Ping(ctx)
}

// A handler whose lease runs out without a renewal is canceled: from then
// on another node may run the job, and two holders must never run at once.
func TestHandlerStopsWhenLeaseRunsOutUnrenewed(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		fs := &faultyStore{Store: b.store}
		ctx := context.Background()
		b.insert(t, "lapse", 1)
		started := make(chan struct{})
		causes := make(chan error, 1)
		cfg := b.config(map[string]int{"lapse": 1})
		e, err := New(fs, cfg, map[string]*Handler{
			"lapse": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) {
				close(started)
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return nil, ctx.Err()
			}},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		defer e.Stop(ctx)
		receive(t, "the handler to start", started)
		fs.heartbeatDown.Store(true)
		b.clock.Advance(cfg.LeaseDuration + time.Second)
		require.ErrorIs(t, receive(t, "the handler to stop past its lease", causes), errLeaseLost)
	})
}

// renewals is how many JobHeartbeat calls renewed the job's lease.
func (f *faultyStore) renewals(id uuid.UUID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.renewed[id]
}

// The heartbeat leaves a lease alone until a quarter of the lease duration
// has passed (most short jobs end before that), and renews it then: before,
// every tick rewrote the row of every attempt in flight.
func TestHeartbeatSkipsFreshLeases(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		fs := &faultyStore{Store: b.store, quietCancels: true}
		ctx := context.Background()
		id := b.insert(t, "fresh", 1)[0]
		started, release := make(chan struct{}), make(chan struct{})
		var releaseOnce sync.Once
		releaseHandler := func() { releaseOnce.Do(func() { close(release) }) }
		cfg := b.config(map[string]int{"fresh": 1})
		e, err := New(fs, cfg, map[string]*Handler{
			"fresh": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) {
				close(started)
				<-release
				return nil, nil
			}},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		defer e.Stop(ctx)
		defer releaseHandler() // before Stop, which waits for the handler
		receive(t, "a handler to start", started)
		acquired, err := b.store.JobGet(ctx, id)
		require.NoError(t, err)

		// The engine's clock stands still: four looks (a sixth of the
		// lease apart) find the lease as fresh as when it was taken.
		time.Sleep(4*heartbeatEvery(cfg.LeaseDuration) + 200*time.Millisecond)
		require.Zero(t, fs.renewals(id), "a fresh lease was renewed")

		b.clock.Advance(renewAge(cfg.LeaseDuration) - time.Millisecond)
		time.Sleep(2*heartbeatEvery(cfg.LeaseDuration) + 200*time.Millisecond)
		require.Zero(t, fs.renewals(id), "a lease renewed before a quarter of it had passed")

		b.clock.Advance(2 * time.Millisecond)
		waitFor(t, "the lease renewed", func() bool { return fs.renewals(id) > 0 })
		row, err := b.store.JobGet(ctx, id)
		require.NoError(t, err)
		require.True(t, row.LeaseExpiresAt.After(acquired.LeaseExpiresAt), "lease %v, acquired with %v", row.LeaseExpiresAt, acquired.LeaseExpiresAt)
		releaseHandler()
		waitFor(t, "the job to succeed", func() bool {
			row, err := b.store.JobGet(ctx, id)
			require.NoError(t, err)
			return row.State == job.StateSuccess
		})
	})
}

// A cancel wakeup renews the leases of the jobs it names, however fresh,
// which is how their handlers learn of the request at once; the other
// leases are left to the ticks.
func TestCancelWakeupRenewsItsJobOnly(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		fs := &faultyStore{Store: b.store}
		ctx := context.Background()
		ids := b.insert(t, "wake", 2)
		started := make(chan uuid.UUID, 2)
		causes := make(chan error, 2)
		release := make(chan struct{})
		cfg := b.config(map[string]int{"wake": 2})
		cfg.LeaseDuration = time.Minute // no tick renews anything while the test runs
		e, err := New(fs, cfg, map[string]*Handler{
			"wake": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) {
				started <- row.ID
				select {
				case <-ctx.Done():
					causes <- context.Cause(ctx)
					return nil, ctx.Err()
				case <-release:
					return nil, nil
				}
			}},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		defer e.Stop(ctx)
		defer close(release) // before Stop, which waits for the handlers
		receive(t, "a handler to start", started)
		receive(t, "a handler to start", started)
		_, err = b.store.JobCancel(ctx, &store.JobCancelParams{ID: ids[0], Now: b.clock.Now()})
		require.NoError(t, err)
		require.ErrorIs(t, receive(t, "the canceled job's handler to be told", causes), ErrCancelRequested)
		require.Positive(t, fs.renewals(ids[0]), "the canceled job's lease renewed")
		require.Zero(t, fs.renewals(ids[1]), "the other job's lease renewed by a wakeup that did not name it")
		waitFor(t, "the canceled job to end CANCELED", func() bool {
			row, err := b.store.JobGet(ctx, ids[0])
			require.NoError(t, err)
			return row.State == job.StateCanceled
		})
	})
}

// The schedule's promises (heartbeat.go, docs/operations.md): a lease is
// renewed with more than half of it left, a cancel missed by its wakeup is
// learned within half a lease, and the fourth renewal in a row still starts
// before the lease ends when each of the three before it hangs until it
// gives up.
func TestLeaseRenewalSchedule(t *testing.T) {
	for _, lease := range []time.Duration{LeaseDurationMin, 3 * time.Second, LeaseDurationDefault, time.Hour} {
		latest := renewAge(lease) + heartbeatEvery(lease) // the latest a lease is first seen due
		require.Greater(t, lease-latest, lease/2, "%v: renewed with more than half left", lease)
		require.Less(t, latest, lease/2, "%v: a cancel learned within half a lease", lease)
		require.Greater(t, lease-latest-3*heartbeatEvery(lease), time.Duration(0), "%v: a fourth try after three hung ones", lease)
		require.Greater(t, renewAge(lease), heartbeatEvery(lease), "%v: a lease taken just before a look is not renewed at it", lease)
	}
}

// receive waits for a value on ch, failing the test after 20 s with what
// it waited for.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestCanceledIDs(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	more := make(chan string, 3)
	more <- b.String()
	ids, all := canceledIDs(a.String(), more)
	require.False(t, all)
	require.Equal(t, map[uuid.UUID]bool{a: true, b: true}, ids, "the wakeups queued behind the first are read too")
	require.Empty(t, more)

	more <- ""
	_, all = canceledIDs(a.String(), more)
	require.True(t, all, "a wakeup naming no job renews every lease")
	_, all = canceledIDs("not-an-id", more)
	require.True(t, all)
}

// Canceling the context given to Start stops acquisition only: a running
// handler finishes and its success is recorded, not overwritten at Stop.
func TestStartContextCancelKeepsCompletions(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		id := b.insert(t, "ctx", 1)[0]
		started, release := make(chan struct{}), make(chan struct{})
		e, err := New(b.store, b.config(map[string]int{"ctx": 1}), map[string]*Handler{
			"ctx": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) {
				close(started)
				<-release
				return nil, nil
			}},
		})
		require.NoError(t, err)
		startCtx, cancel := context.WithCancel(context.Background())
		require.NoError(t, e.Start(startCtx))
		receive(t, "the handler to start", started)
		cancel()
		close(release)
		waitFor(t, "the success to be written", func() bool {
			row, err := b.store.JobGet(context.Background(), id)
			require.NoError(t, err)
			return row.State == job.StateSuccess
		})
		stopCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		e.Stop(stopCtx)
		require.NoError(t, stopCtx.Err(), "Stop returned before its deadline")
	})
}

// Stop returns even when the database cannot take the last completions:
// the jobs run again after their leases expire.
func TestStopReturnsWhileDatabaseDown(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		fs := &faultyStore{Store: b.store}
		id := b.insert(t, "down", 1)[0]
		done := make(chan struct{})
		e, err := New(fs, b.config(map[string]int{"down": 1}), map[string]*Handler{
			"down": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) {
				fs.finishDown.Store(true)
				close(done)
				return nil, nil
			}},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(context.Background()))
		<-done
		stopped := make(chan struct{})
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			e.Stop(ctx)
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(60 * time.Second):
			t.Fatal("Stop hung while the database was down")
		}
		row, err := b.store.JobGet(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, job.StateRunning, row.State, "not recorded: the lease will expire and the job run again")
	})
}

// A Start that fails (the node cannot register) leaves an engine that a
// second Start runs like a fresh one: every completion is written, none
// dropped as if the engine were stopping.
func TestStartAfterFailedStartKeepsEveryCompletion(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		fs := &faultyStore{Store: b.store}
		ctx := context.Background()
		const n = 60
		ids := b.insert(t, "again", n)
		e, err := New(fs, b.config(map[string]int{"again": 10}), map[string]*Handler{
			"again": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) { return nil, nil }},
		})
		require.NoError(t, err)
		fs.nodeDown.Store(true)
		require.ErrorIs(t, e.Start(ctx), errInjected)
		fs.nodeDown.Store(false)
		require.NoError(t, e.Start(ctx))
		defer e.Stop(ctx)
		// The clock stands still: no lease expires, so a dropped completion
		// leaves its job RUNNING for good.
		for _, id := range ids {
			waitFor(t, "every job to succeed", func() bool {
				row, err := b.store.JobGet(ctx, id)
				require.NoError(t, err)
				return row.State == job.StateSuccess
			})
		}
	})
}
