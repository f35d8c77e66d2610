package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/docket-run/docket/internal/backoff"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/leader"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// clock is a manual clock: time moves only when the test says so.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type bundle struct {
	store store.Store
	clock *clock
}

func setup(t *testing.T, backend testdb.Backend) *bundle {
	t.Helper()
	st := teststore.Open(t, backend.URL(t))
	return &bundle{store: st, clock: &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}}
}

func (b *bundle) config(queues map[string]int) Config {
	return Config{
		NodeID: "node-test", Queues: queues, LeaseDuration: 3 * time.Second,
		RescueInterval: 10 * time.Millisecond, SchedulerInterval: 10 * time.Millisecond,
		PollInterval: 20 * time.Millisecond, LeaderTTL: 150 * time.Millisecond,
		RetryBackoff: backoff.Policy{Base: time.Second, Max: time.Second},
		Now:          b.clock.Now,
	}
}

func (b *bundle) insert(t *testing.T, typ string, n int) []uuid.UUID {
	t.Helper()
	p := &store.JobInsertManyParams{Now: b.clock.Now()}
	for range n {
		p.Jobs = append(p.Jobs, &store.JobInsertParams{
			ID: uuid.Must(uuid.NewV7()), Type: typ, Queue: typ, Payload: json.RawMessage(`{}`),
			State: job.StateQueued, MaxAttempts: 5,
		})
	}
	res, err := b.store.JobInsertMany(context.Background(), p)
	require.NoError(t, err)
	ids := make([]uuid.UUID, n)
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

// waitSucceeded waits until n jobs are SUCCESS.
func (b *bundle) waitSucceeded(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d jobs to succeed", n), func() bool {
		counts, err := b.store.JobCount(context.Background())
		require.NoError(t, err)
		for _, c := range counts {
			if c.State == job.StateSuccess {
				return c.Count == n
			}
		}
		return false
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func forEachBackend(t *testing.T, fn func(t *testing.T, backend testdb.Backend)) {
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, backend)
		})
	}
}

// A job leased by a node that died is rescued once its lease expires (on
// the engine's clock: no sleeping for 3 s) and then run here.
func TestRescueExpiredLease(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		id := b.insert(t, "rescue", 1)[0]
		got, err := b.store.JobAcquire(ctx, &store.JobAcquireParams{
			Queue: "rescue", Max: 1, Owner: "ghost", LeaseDuration: 3 * time.Second, Now: b.clock.Now(),
		})
		require.NoError(t, err)
		require.Len(t, got, 1)

		var ran atomic.Int64
		e, err := New(b.store, b.config(map[string]int{"rescue": 2}), map[string]*Handler{
			"rescue": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) {
				ran.Add(1)
				return json.RawMessage(`{"ok":true}`), nil
			}},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		defer e.Stop(ctx)

		get := func() *job.Row {
			row, err := b.store.JobGet(ctx, id)
			require.NoError(t, err)
			return row
		}
		require.Equal(t, job.StateRunning, get().State, "the lease has not expired yet")
		b.clock.Advance(4 * time.Second) // past the ghost's lease
		waitFor(t, "the rescue", func() bool { return get().State == job.StateRetry })
		require.EqualValues(t, 0, ran.Load())
		b.clock.Advance(2 * time.Second) // past the retry backoff
		waitFor(t, "the retry to succeed", func() bool { return get().State == job.StateSuccess })
		require.EqualValues(t, 1, ran.Load())

		atts, err := b.store.JobAttemptList(ctx, id)
		require.NoError(t, err)
		require.Len(t, atts, 2)
		require.Equal(t, "ghost", atts[0].Node)
		require.Equal(t, job.OutcomeExpired, atts[0].Outcome)
		require.Equal(t, "node-test", atts[1].Node)
		require.Equal(t, job.OutcomeSuccess, atts[1].Outcome)
	})
}

// Completions are written in batches: far fewer finishing statements (one
// outbox row each) than jobs.
func TestCompletionsAreBatched(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		const n = 400
		b.insert(t, "batch", n)
		cfg := b.config(map[string]int{"batch": 100})
		cfg.CompleteInterval = 20 * time.Millisecond
		cfg.FetchBatch = 100
		e, err := New(b.store, cfg, map[string]*Handler{
			"batch": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) { return nil, nil }},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		defer e.Stop(ctx)
		b.waitSucceeded(t, n)
		events, err := b.store.OutboxList(ctx, &store.OutboxListParams{Limit: 10000})
		require.NoError(t, err)
		finishes, finished := 0, 0
		for _, ev := range events {
			var data job.StateChangedData
			require.NoError(t, json.Unmarshal(ev.Data, &data))
			if len(data.Transitions) > 0 && data.Transitions[0].To == job.StateSuccess {
				finishes++
				finished += len(data.Transitions)
			}
		}
		require.Equal(t, n, finished)
		require.Less(t, finishes, n/4, "completions written in batches")
	})
}

func TestConfigValidate(t *testing.T) {
	cfg := Config{Queues: map[string]int{"q": 0, "": 1}, LeaseDuration: time.Millisecond}.WithDefaults()
	cfg.LeaseDuration = time.Millisecond
	err := cfg.Validate()
	require.Error(t, err)
	require.Contains(t, err.Error(), "LeaseDuration")
	require.Contains(t, err.Error(), `Queues["q"]`)
	require.Contains(t, err.Error(), "a queue name is empty")
	require.NoError(t, Config{}.WithDefaults().Validate())
	cfg = Config{Leaderships: map[string][]service.Service{leader.Maintenance: nil}}.WithDefaults()
	require.ErrorContains(t, cfg.Validate(), `invalid Leaderships: "default"`)
	cfg.Leaderships = map[string][]service.Service{leader.Events: nil}
	require.NoError(t, cfg.Validate())
	// A TTL of a few nanoseconds made the elector's interval (a third of
	// it) zero, and time.NewTicker panic in a goroutine of Start.
	cfg = Config{LeaderTTL: 2 * time.Nanosecond}.WithDefaults()
	require.ErrorContains(t, cfg.Validate(), "invalid LeaderTTL: 2ns is below the minimum 100ms")
}

// A handler's error is recorded whatever bytes it holds: NUL and bytes
// that are not UTF-8 (a program's output) become U+FFFD. PostgreSQL
// refused them: the failure was lost and the job ran again after its
// lease expired.
func TestHandlerErrorNotText(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		ids := b.insert(t, "bytes", 1)
		e, err := New(b.store, b.config(map[string]int{"bytes": 1}), map[string]*Handler{
			"bytes": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) {
				return nil, &FatalError{Err: errors.New("exit 1: a\x00b\xff")}
			}},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		defer e.Stop(ctx)
		waitFor(t, "the job to be DEAD", func() bool {
			row, err := b.store.JobGet(ctx, ids[0])
			require.NoError(t, err)
			return row.State == job.StateDead
		})
		row, err := b.store.JobGet(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, "fatal: exit 1: a\uFFFDb\uFFFD", row.LastError)
	})
}

// nilPtrError is an error whose Error method dereferences its receiver:
// a nil *nilPtrError returned as an error (the typed-nil mistake) panics
// when its text is read.
type nilPtrError struct{ msg string }

func (e *nilPtrError) Error() string { return e.msg }

// A handler's error whose text cannot be read — Fatal(nil), or a typed nil
// pointer whose Error method dereferences it — is the handler's fault: the
// attempt ends (Fatal: DEAD; the other: a panic, retried), and the worker
// process goes on, where reading the text outside the handler's recover
// crashed it.
func TestHandlerErrorWhoseTextPanics(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		fatal := b.insert(t, "fatalnil", 1)[0]
		typedNil := b.insert(t, "typednil", 1)[0]
		e, err := New(b.store, b.config(map[string]int{"fatalnil": 1, "typednil": 1}), map[string]*Handler{
			"fatalnil": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) {
				return nil, &FatalError{}
			}},
			"typednil": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) {
				var err *nilPtrError
				return nil, err
			}},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		defer e.Stop(ctx)
		waitFor(t, "both jobs to end their first attempt", func() bool {
			f, err := b.store.JobGet(ctx, fatal)
			require.NoError(t, err)
			n, err := b.store.JobGet(ctx, typedNil)
			require.NoError(t, err)
			return f.State == job.StateDead && n.State == job.StateRetry
		})
		row, err := b.store.JobGet(ctx, fatal)
		require.NoError(t, err)
		require.Equal(t, "fatal", row.LastError)
		atts, err := b.store.JobAttemptList(ctx, typedNil)
		require.NoError(t, err)
		require.Equal(t, job.OutcomePanic, atts[0].Outcome)
		require.Contains(t, atts[0].Error, "nil pointer dereference")
	})
}

// One completion the database refuses (PostgreSQL cannot store a NUL in
// jsonb) must not stall the others written in the same batch.
func TestRefusedCompletionDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		ids := b.insert(t, "mixed", 20)
		poison := ids[7]
		cfg := b.config(map[string]int{"mixed": 20})
		cfg.CompleteInterval = 50 * time.Millisecond // one batch for all
		e, err := New(b.store, cfg, map[string]*Handler{
			"mixed": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) {
				if row.ID == poison {
					return json.RawMessage(`{"s":"a\u0000b"}`), nil
				}
				return json.RawMessage(`{}`), nil
			}},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		defer e.Stop(ctx)
		for _, id := range ids {
			if id == poison {
				continue
			}
			waitFor(t, "the good jobs to succeed", func() bool {
				row, err := b.store.JobGet(ctx, id)
				require.NoError(t, err)
				return row.State == job.StateSuccess
			})
		}
	})
}

// Without an event relay nothing publishes the outbox: a prune round
// deletes the rows older than OutboxMaxAge (in the program the README
// shows, every state change leaves one), keeps the younger ones, and
// leaves a published row to the relay's retention. A negative age keeps
// them all.
func TestPruneBoundsOutbox(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		outbox := func() []int64 {
			evs, err := b.store.OutboxList(ctx, &store.OutboxListParams{})
			require.NoError(t, err)
			ids := []int64{}
			for _, ev := range evs {
				ids = append(ids, ev.ID)
			}
			return ids
		}
		b.insert(t, "old", 1)
		b.insert(t, "old", 1)
		b.insert(t, "old", 1)
		old := outbox()
		require.Len(t, old, 3)
		// Published by a relay (no webhook: fanned out as well).
		_, err := b.store.OutboxMarkPublished(ctx, &store.OutboxMarkPublishedParams{IDs: old[:1], Now: b.clock.Now()})
		require.NoError(t, err)
		b.clock.Advance(2 * time.Hour)
		b.insert(t, "young", 2)
		young := outbox()[3:]
		require.Len(t, young, 1)

		never := b.config(nil)
		never.OutboxMaxAge = -1
		e, err := New(b.store, never, nil)
		require.NoError(t, err)
		e.prune(ctx)
		require.Equal(t, append(append([]int64{}, old...), young...), outbox(), "a negative age deletes nothing")

		cfg := b.config(nil)
		cfg.OutboxMaxAge = time.Hour
		e, err = New(b.store, cfg, nil)
		require.NoError(t, err)
		e.prune(ctx)
		require.Equal(t, append([]int64{old[0]}, young...), outbox())
		e.prune(ctx)
		require.Equal(t, append([]int64{old[0]}, young...), outbox(), "a second round deletes no more")
	})
}
