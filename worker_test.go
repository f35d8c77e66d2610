package docket_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// Job types used by the tests.
type (
	echoArgs  struct{ N int }
	flakyArgs struct{ FailTimes int }
	blockArgs struct{ Key string }
	fatalArgs struct{}
	panicArgs struct{}
	slowArgs  struct{}
)

func (echoArgs) JobType() string  { return "test.echo" }
func (flakyArgs) JobType() string { return "test.flaky" }
func (blockArgs) JobType() string { return "test.block" }
func (fatalArgs) JobType() string { return "test.fatal" }
func (panicArgs) JobType() string { return "test.panic" }
func (slowArgs) JobType() string  { return "test.slow" }

type bundle struct {
	client *docket.Client
	worker *docket.Worker
	url    string
}

// fastConfig keeps every engine timing short so tests wait on signals and
// short polls, never on production intervals.
func fastConfig() docket.WorkerConfig {
	return docket.WorkerConfig{
		LeaseDuration:     5 * time.Second,
		RescueInterval:    100 * time.Millisecond,
		SchedulerInterval: 20 * time.Millisecond,
		PollInterval:      50 * time.Millisecond,
		LeaderTTL:         300 * time.Millisecond,
		RetryBackoffBase:  time.Millisecond,
		RetryBackoffMax:   10 * time.Millisecond,
	}
}

func setup(t *testing.T, backend testdb.Backend, cfg docket.WorkerConfig) *bundle {
	t.Helper()
	ctx := context.Background()
	url := backend.URL(t)
	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, client.Close()) })
	w := docket.NewWorker(client, cfg)
	return &bundle{client: client, worker: w, url: url}
}

func (b *bundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.worker.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b.worker.Stop(ctx)
	})
}

// eventually polls cond every 10 ms until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *bundle) waitState(t *testing.T, id uuid.UUID, want docket.JobState) *docket.JobRow {
	t.Helper()
	var row *docket.JobRow
	eventually(t, 20*time.Second, fmt.Sprintf("job %s to be %s", id, want), func() bool {
		var err error
		row, err = b.client.Get(context.Background(), id)
		require.NoError(t, err)
		return row.State == want
	})
	return row
}

func forEachBackend(t *testing.T, fn func(t *testing.T, backend testdb.Backend)) {
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, backend)
		})
	}
}

func TestWorkerRunsJobsWithResults(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		var runs atomic.Int64
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[echoArgs]) error {
			runs.Add(1)
			return docket.SetResult(ctx, map[string]int{"double": j.Args.N * 2})
		})
		b.start(t)
		params := make([]docket.InsertParams, 50)
		for i := range params {
			params[i] = docket.InsertParams{Args: echoArgs{N: i}}
		}
		res, err := b.client.InsertMany(context.Background(), params)
		require.NoError(t, err)
		for i, r := range res {
			row := b.waitState(t, r.Job.ID, docket.JobStateSuccess)
			require.JSONEq(t, fmt.Sprintf(`{"double":%d}`, 2*i), string(row.Result))
			require.Equal(t, 1, row.Attempt)
			require.False(t, row.FinishedAt.IsZero())
			require.Empty(t, row.LeaseOwner)
		}
		require.EqualValues(t, 50, runs.Load())
		atts, err := b.client.Attempts(context.Background(), res[0].Job.ID)
		require.NoError(t, err)
		require.Len(t, atts, 1)
		require.Equal(t, b.worker.NodeID(), atts[0].Node)
		require.EqualValues(t, "success", atts[0].Outcome)
	})
}

func TestWorkerRetriesThenSucceeds(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[flakyArgs]) error {
			if j.Attempt <= j.Args.FailTimes {
				return fmt.Errorf("flaky failure %d", j.Attempt)
			}
			return nil
		})
		b.start(t)
		res, err := b.client.Insert(context.Background(), flakyArgs{FailTimes: 2}, nil)
		require.NoError(t, err)
		row := b.waitState(t, res.Job.ID, docket.JobStateSuccess)
		require.Equal(t, 3, row.Attempt)
		atts, err := b.client.Attempts(context.Background(), res.Job.ID)
		require.NoError(t, err)
		require.Len(t, atts, 3)
		require.EqualValues(t, "error", atts[0].Outcome)
		require.Equal(t, "flaky failure 1", atts[0].Error)
		require.EqualValues(t, "error", atts[1].Outcome)
		require.EqualValues(t, "success", atts[2].Outcome)
	})
}

func TestWorkerRetryExhaustedGoesDead(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[flakyArgs]) error {
			return errors.New("always fails")
		})
		b.start(t)
		res, err := b.client.Insert(context.Background(), flakyArgs{}, &docket.InsertOpts{MaxAttempts: 3})
		require.NoError(t, err)
		row := b.waitState(t, res.Job.ID, docket.JobStateDead)
		require.Equal(t, 3, row.Attempt)
		require.Equal(t, "always fails", row.LastError)
	})
}

func TestWorkerFatalPanicTimeout(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[fatalArgs]) error {
			return docket.Fatal(errors.New("bad card"))
		})
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[panicArgs]) error {
			panic("boom")
		})
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[slowArgs]) error {
			<-ctx.Done()
			return context.Cause(ctx)
		})
		b.start(t)
		ctx := context.Background()
		fatal, err := b.client.Insert(ctx, fatalArgs{}, nil)
		require.NoError(t, err)
		panicked, err := b.client.Insert(ctx, panicArgs{}, &docket.InsertOpts{MaxAttempts: 2})
		require.NoError(t, err)
		slow, err := b.client.Insert(ctx, slowArgs{}, &docket.InsertOpts{MaxAttempts: 1, Timeout: 50 * time.Millisecond})
		require.NoError(t, err)

		row := b.waitState(t, fatal.Job.ID, docket.JobStateDead)
		require.Equal(t, 1, row.Attempt, "a fatal error is not retried")
		require.Contains(t, row.LastError, "bad card")

		row = b.waitState(t, panicked.Job.ID, docket.JobStateDead)
		require.Equal(t, 2, row.Attempt, "a panic is retried")
		require.Contains(t, row.LastError, "panic: boom")
		require.Contains(t, row.LastError, "goroutine", "the stack is recorded")
		atts, err := b.client.Attempts(ctx, panicked.Job.ID)
		require.NoError(t, err)
		require.EqualValues(t, "panic", atts[0].Outcome)

		row = b.waitState(t, slow.Job.ID, docket.JobStateDead)
		require.Contains(t, row.LastError, "timed out after 50ms")
		atts, err = b.client.Attempts(ctx, slow.Job.ID)
		require.NoError(t, err)
		require.EqualValues(t, "timeout", atts[0].Outcome)
	})
}

// TestWorkerTimeoutContext: a handler's context carries the attempt's
// deadline and, when it passes, ends like a context with a deadline:
// Err is context.DeadlineExceeded, the cause is one too, and contexts the
// handler derived from it end with it.
func TestWorkerTimeoutContext(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0], fastConfig())
	type seen struct {
		deadline     time.Time
		hasDeadline  bool
		err, cause   error
		childErr     error
		childCause   error
		startedAfter time.Time
	}
	got := make(chan seen, 1)
	docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[slowArgs]) error {
		var s seen
		s.startedAfter = time.Now()
		s.deadline, s.hasDeadline = ctx.Deadline()
		child, cancel := context.WithCancel(ctx)
		defer cancel()
		<-child.Done()
		s.err, s.cause = ctx.Err(), context.Cause(ctx)
		s.childErr, s.childCause = child.Err(), context.Cause(child)
		got <- s
		return s.cause
	})
	b.start(t)
	before := time.Now()
	res, err := b.client.Insert(context.Background(), slowArgs{}, &docket.InsertOpts{MaxAttempts: 1, Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	var s seen
	select {
	case s = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context never ended")
	}
	require.True(t, s.hasDeadline, "the attempt's deadline is on its context")
	require.WithinRange(t, s.deadline, before, s.startedAfter.Add(200*time.Millisecond))
	require.ErrorIs(t, s.err, context.DeadlineExceeded)
	require.ErrorIs(t, s.cause, context.DeadlineExceeded)
	require.ErrorIs(t, s.childCause, context.DeadlineExceeded, "derived contexts end with the same cause")
	require.ErrorIs(t, s.childErr, context.DeadlineExceeded, "and the same error")
	row := b.waitState(t, res.Job.ID, docket.JobStateDead)
	require.Contains(t, row.LastError, "timed out after 200ms")
}

// blocker lets a test hold handlers inside a job and release them.
type blocker struct {
	mu      sync.Mutex
	started map[string]chan struct{}
	release chan struct{}
	causes  sync.Map // key -> error (context cause seen by the handler)
}

func newBlocker() *blocker {
	return &blocker{started: map[string]chan struct{}{}, release: make(chan struct{})}
}

func (bl *blocker) startedCh(key string) chan struct{} {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	ch, ok := bl.started[key]
	if !ok {
		ch = make(chan struct{})
		bl.started[key] = ch
	}
	return ch
}

func waitCh(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestProgressAndCancelRunningJob(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		bl := newBlocker()
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[blockArgs]) error {
			if err := docket.Progress(ctx, 40, "warming up"); err != nil {
				return err
			}
			close(bl.startedCh(j.Args.Key))
			<-ctx.Done()
			bl.causes.Store(j.Args.Key, context.Cause(ctx))
			return ctx.Err()
		})
		b.start(t)
		ctx := context.Background()
		res, err := b.client.Insert(ctx, blockArgs{Key: "a"}, nil)
		require.NoError(t, err)
		waitCh(t, bl.startedCh("a"), "handler start")

		row, err := b.client.Get(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateRunning, row.State)
		require.InDelta(t, 40, row.Progress, 0.001)
		require.Equal(t, "warming up", row.ProgressMsg)
		require.Equal(t, b.worker.NodeID(), row.LeaseOwner)

		row, err = b.client.Cancel(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateRunning, row.State)
		require.True(t, row.CancelRequested)

		row = b.waitState(t, res.Job.ID, docket.JobStateCanceled)
		cause, _ := bl.causes.Load("a")
		require.ErrorIs(t, cause.(error), docket.ErrCancelRequested)
		require.Contains(t, row.LastError, "canceled while running")

		// Canceling again changes nothing; retrying brings it back.
		again, err := b.client.Cancel(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Equal(t, row.Version, again.Version)
		row, err = b.client.Retry(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateQueued, row.State)
		require.Equal(t, 0, row.AttemptsUsed(), "a fresh budget of attempts")
	})
}

// A result PostgreSQL cannot store (a NUL in a string) is refused by
// SetResult, so it can never poison a batch of completions.
// Progress that is not a number is refused like progress out of range, on
// both backends: PostgreSQL stored NaN (a job whose progress no JSON can
// carry), SQLite refused it with a constraint error.
func TestProgressRefusesNaN(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		errs := make(chan [2]error, 1)
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[echoArgs]) error {
			errs <- [2]error{docket.Progress(ctx, 101, ""), docket.Progress(ctx, math.NaN(), "0/0")}
			return nil
		})
		b.start(t)
		res, err := b.client.Insert(context.Background(), echoArgs{}, nil)
		require.NoError(t, err)
		got := <-errs
		require.EqualError(t, got[0], "progress must be between 0 and 100")
		require.EqualError(t, got[1], got[0].Error())
		row := b.waitState(t, res.Job.ID, docket.JobStateSuccess)
		require.Zero(t, row.Progress)
		require.Empty(t, row.ProgressMsg)
	})
}

func TestSetResultRefusesNUL(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		errs := make(chan error, 1)
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[echoArgs]) error {
			err := docket.SetResult(ctx, map[string]string{"s": "a\x00b"})
			errs <- err
			return docket.SetResult(ctx, "fine")
		})
		b.start(t)
		res, err := b.client.Insert(context.Background(), echoArgs{}, nil)
		require.NoError(t, err)
		var verr *docket.ValidationError
		require.ErrorAs(t, <-errs, &verr)
		require.Equal(t, "result", verr.Field)
		row := b.waitState(t, res.Job.ID, docket.JobStateSuccess)
		require.JSONEq(t, `"fine"`, string(row.Result))
	})
}

func TestProgressOutsideJob(t *testing.T) {
	require.ErrorIs(t, docket.Progress(context.Background(), 1, ""), docket.ErrNotInJob)
}

func TestCancelAndRetryRules(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		queued, err := b.client.Insert(ctx, echoArgs{}, &docket.InsertOpts{RunAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		row, err := b.client.Retry(ctx, queued.Job.ID)
		require.NoError(t, err)
		require.Equal(t, queued.Job.Version, row.Version, "retrying a queued job changes nothing")
		row, err = b.client.Cancel(ctx, queued.Job.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateCanceled, row.State)

		_, err = b.client.Get(ctx, uuid.Must(uuid.NewV7()))
		require.ErrorIs(t, err, docket.ErrNotFound)

		// A job that succeeded can be neither canceled nor retried.
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[echoArgs]) error { return nil })
		b.start(t)
		done, err := b.client.Insert(ctx, echoArgs{}, nil)
		require.NoError(t, err)
		b.waitState(t, done.Job.ID, docket.JobStateSuccess)
		var invalid *docket.InvalidTransitionError
		_, err = b.client.Cancel(ctx, done.Job.ID)
		require.ErrorAs(t, err, &invalid)
		_, err = b.client.Retry(ctx, done.Job.ID)
		require.ErrorAs(t, err, &invalid)
		require.Equal(t, docket.JobStateSuccess, invalid.From)
	})
}

func TestIdempotentInsert(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		var wg sync.WaitGroup
		ids := make([]uuid.UUID, 100)
		errs := make([]error, 100)
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := b.client.Insert(ctx, echoArgs{N: 7}, &docket.InsertOpts{IdempotencyKey: "order-7"})
				errs[i] = err
				if err == nil {
					ids[i] = res.Job.ID
				}
			}()
		}
		wg.Wait()
		for i := range ids {
			require.NoError(t, errs[i])
			require.Equal(t, ids[0], ids[i])
		}
		rows, err := b.client.List(ctx, docket.ListParams{})
		require.NoError(t, err)
		require.Len(t, rows, 1)
	})
}

// A RunAt past what both backends store is refused: SQLite wrapped year
// 300000 into year -284555 (the job ran at once), PostgreSQL answered
// "timestamp out of range".
func TestInsertRunAtOutOfRange(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		for _, at := range []time.Time{time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC)} {
			_, err := b.client.Insert(ctx, echoArgs{}, &docket.InsertOpts{RunAt: at})
			var verr *docket.ValidationError
			require.ErrorAs(t, err, &verr, "runAt %v", at)
			require.Equal(t, "runAt", verr.Field)
		}
		last := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
		res, err := b.client.Insert(ctx, echoArgs{}, &docket.InsertOpts{RunAt: last})
		require.NoError(t, err)
		row, err := b.client.Get(ctx, res.Job.ID)
		require.NoError(t, err)
		require.True(t, row.RunAt.Equal(last), "run at %v, want %v", row.RunAt, last)
	})
}

func TestInsertValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0], fastConfig())
	ctx := context.Background()
	bad := 12
	cases := map[string]struct {
		args  docket.JobArgs
		opts  *docket.InsertOpts
		field string
	}{
		"no type":      {docket.RawArgs{}, nil, "jobType"},
		"bad type":     {docket.RawArgs{Type: "a b"}, nil, "jobType"},
		"bad queue":    {echoArgs{}, &docket.InsertOpts{Queue: strings.Repeat("q", 200)}, "queue"},
		"bad priority": {echoArgs{}, &docket.InsertOpts{Priority: &bad}, "priority"},
		"bad attempts": {echoArgs{}, &docket.InsertOpts{MaxAttempts: -1}, "maxAttempts"},
		// Stored in milliseconds, it read as 0: the worker's 5 minutes.
		"tiny timeout": {echoArgs{}, &docket.InsertOpts{Timeout: time.Microsecond}, "timeout"},
		"bad payload":  {docket.RawArgs{Type: "x", Payload: json.RawMessage("{")}, nil, "payload"},
	}
	for name, c := range cases {
		_, err := b.client.Insert(ctx, c.args, c.opts)
		var verr *docket.ValidationError
		require.ErrorAs(t, err, &verr, name)
		require.Equal(t, c.field, verr.Field, name)
	}
	rows, err := b.client.List(ctx, docket.ListParams{})
	require.NoError(t, err)
	require.Empty(t, rows, "nothing half-written")
}

func TestGracefulShutdownGivesLeasesBack(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		bl := newBlocker()
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[blockArgs]) error {
			close(bl.startedCh(j.Args.Key))
			<-bl.release // ignores its context on purpose
			return nil
		})
		require.NoError(t, b.worker.Start(context.Background()))
		ctx := context.Background()
		// Its only attempt: an interruption must not use it up.
		res, err := b.client.Insert(ctx, blockArgs{Key: "stuck"}, &docket.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		waitCh(t, bl.startedCh("stuck"), "handler start")

		stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		b.worker.Stop(stopCtx)
		cancel()
		row, err := b.client.Get(ctx, res.Job.ID)
		require.NoError(t, err)
		// Given back as RETRY, due at once; the scheduler (still running
		// until the worker's maintenance stops) may already have queued it.
		require.Contains(t, []docket.JobState{docket.JobStateRetry, docket.JobStateQueued}, row.State, "the lease is given back")
		require.Empty(t, row.LeaseOwner)
		require.Equal(t, 1, row.Attempt)
		require.Equal(t, 0, row.AttemptsUsed(), "an interrupted attempt is refunded")
		atts, err := b.client.Attempts(ctx, res.Job.ID)
		require.NoError(t, err)
		require.EqualValues(t, "interrupted", atts[0].Outcome)
		close(bl.release) // the late return is fenced: nothing changes
		row2, err := b.client.Get(ctx, res.Job.ID)
		require.NoError(t, err)
		require.NotEqual(t, docket.JobStateSuccess, row2.State)

		// The next worker runs it to the end on the attempt it still has.
		next := docket.NewWorker(b.client, fastConfig())
		docket.AddHandler(next, func(ctx context.Context, j *docket.Job[blockArgs]) error { return nil })
		require.NoError(t, next.Start(ctx))
		defer next.Stop(ctx)
		done := b.waitState(t, res.Job.ID, docket.JobStateSuccess)
		require.Equal(t, 2, done.Attempt)
		require.Equal(t, 1, done.AttemptsUsed())
	})
}

func TestPausedQueueIsNotWorked(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		require.NoError(t, b.client.PauseQueue(ctx, "test.echo"))
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[echoArgs]) error { return nil })
		b.start(t)
		res, err := b.client.Insert(ctx, echoArgs{}, nil)
		require.NoError(t, err)
		// Several poll intervals pass with the queue paused.
		for range 5 {
			row, err := b.client.Get(ctx, res.Job.ID)
			require.NoError(t, err)
			require.Equal(t, docket.JobStateQueued, row.State)
			time.Sleep(60 * time.Millisecond)
		}
		qs, err := b.client.Queues(ctx)
		require.NoError(t, err)
		require.Len(t, qs, 1)
		require.True(t, qs[0].Paused)
		require.NoError(t, b.client.ResumeQueue(ctx, "test.echo"))
		b.waitState(t, res.Job.ID, docket.JobStateSuccess)

		// A name no job's queue can have is refused, as the HTTP API
		// refuses it, and leaves no queue behind (SQLite kept one named
		// "", PostgreSQL refused it; both kept "no such queue").
		for _, name := range []string{"", "no such queue"} {
			var ve *docket.ValidationError
			require.ErrorAs(t, b.client.PauseQueue(ctx, name), &ve, "pause %q", name)
			require.Equal(t, "queue", ve.Field)
			require.ErrorAs(t, b.client.ResumeQueue(ctx, name), &ve, "resume %q", name)
		}
		qs, err = b.client.Queues(ctx)
		require.NoError(t, err)
		require.Len(t, qs, 1)
	})
}

// TestAddHandlerWhileRunningPanics: handlers are registered before Start;
// registering on a running worker panics (rather than racing the engine for
// its map, with the new type's queue never worked). After Stop, a handler
// added is worked from the next Start.
func TestAddHandlerWhileRunningPanics(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[echoArgs]) error { return nil })
		require.NoError(t, b.worker.Start(ctx))
		require.PanicsWithValue(t,
			`docket: AddHandler for job type "test.fatal" on a running worker: register handlers before Start`,
			func() {
				docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[fatalArgs]) error { return nil })
			})
		echo, err := b.client.Insert(ctx, echoArgs{}, nil)
		require.NoError(t, err)
		b.waitState(t, echo.Job.ID, docket.JobStateSuccess)
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		b.worker.Stop(stopCtx)

		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[fatalArgs]) error { return nil })
		b.start(t)
		fatal, err := b.client.Insert(ctx, fatalArgs{}, nil)
		require.NoError(t, err)
		b.waitState(t, fatal.Job.ID, docket.JobStateSuccess)
	})
}

// TestAddHandlerTwicePanics: a job type has one handler. A second
// AddHandler for it (by the same args type or by another whose JobType is
// the same) panics naming the type, as registering on a running worker
// does, and the first handler keeps working the type. It used to replace
// the first handler silently.
func TestAddHandlerTwicePanics(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backend{Name: "sqlite", URL: testdb.SQLiteURL}, fastConfig())
	ctx := context.Background()
	docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[echoArgs]) error {
		return docket.SetResult(ctx, "first")
	})
	want := `docket: AddHandler for job type "test.echo": the worker has a handler for it already (one handler per job type)`
	require.PanicsWithValue(t, want, func() {
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[echoArgs]) error {
			return docket.SetResult(ctx, "second")
		})
	})
	require.PanicsWithValue(t, want, func() {
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[echoAlias]) error { return nil })
	})
	b.start(t)
	res, err := b.client.Insert(ctx, echoArgs{N: 1}, nil)
	require.NoError(t, err)
	row := b.waitState(t, res.Job.ID, docket.JobStateSuccess)
	require.JSONEq(t, `"first"`, string(row.Result))
}

// echoAlias is another args type of job type test.echo.
type echoAlias struct{}

func (echoAlias) JobType() string { return "test.echo" }

// Each of RetryBackoffBase and RetryBackoffMax defaults on its own (to the
// worker's, the client's, then 1 s and 1 h), so one set alone is honoured:
// a Max alone caps the delays (it was dropped, the defaults kept, when the
// Base was not set too), and a Base alone grows up to the default Max (a
// handler's was capped at its own Base: a constant delay).
func TestRetryBackoffFieldsDefaultAlone(t *testing.T) {
	t.Parallel()
	sqlite := testdb.Backend{Name: "sqlite", URL: testdb.SQLiteURL}
	// delayAfter fails a job until its attempt n+1 and returns the delay
	// the retry after attempt n was given: the run-at of the attempt after
	// it less the end of attempt n.
	delayAfter := func(t *testing.T, cfg docket.Config, wcfg docket.WorkerConfig, opts docket.HandlerOpts, n int) time.Duration {
		t.Helper()
		ctx := context.Background()
		cfg.DatabaseURL, cfg.AutoMigrate = sqlite.URL(t), true
		client, err := docket.NewClient(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, client.Close()) })
		wcfg.PollInterval, wcfg.SchedulerInterval = 10*time.Millisecond, 10*time.Millisecond
		w := docket.NewWorker(client, wcfg)
		runAt := make(chan time.Time, 1)
		docket.AddHandler(w, func(ctx context.Context, j *docket.Job[flakyArgs]) error {
			if j.Attempt <= n {
				return errors.New("again")
			}
			runAt <- j.RunAt
			return nil
		}, opts)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() { w.Stop(ctx) })
		res, err := client.Insert(ctx, flakyArgs{}, &docket.InsertOpts{MaxAttempts: n + 1})
		require.NoError(t, err)
		var due time.Time
		select {
		case due = <-runAt:
		case <-time.After(20 * time.Second):
			t.Fatalf("attempt %d did not run", n+1)
		}
		atts, err := client.Attempts(ctx, res.Job.ID)
		require.NoError(t, err)
		return due.Sub(atts[n-1].FinishedAt)
	}
	const capped = 50 * time.Millisecond
	t.Run("worker Max alone", func(t *testing.T) {
		t.Parallel()
		d := delayAfter(t, docket.Config{}, docket.WorkerConfig{RetryBackoffMax: capped}, docket.HandlerOpts{}, 1)
		require.LessOrEqual(t, d, capped)
	})
	t.Run("handler Max alone", func(t *testing.T) {
		t.Parallel()
		d := delayAfter(t, docket.Config{}, docket.WorkerConfig{}, docket.HandlerOpts{RetryBackoffMax: capped}, 1)
		require.LessOrEqual(t, d, capped)
	})
	t.Run("client Max alone", func(t *testing.T) {
		t.Parallel()
		d := delayAfter(t, docket.Config{RetryBackoffMax: capped}, docket.WorkerConfig{}, docket.HandlerOpts{}, 1)
		require.LessOrEqual(t, d, capped)
	})
	t.Run("handler Base alone", func(t *testing.T) {
		t.Parallel()
		// After attempt 7 the ceiling is 1 ms × 2^6 = 64 ms under the
		// worker's Max (1 h), so the delay is at least 32 ms.
		d := delayAfter(t, docket.Config{}, docket.WorkerConfig{}, docket.HandlerOpts{RetryBackoffBase: time.Millisecond}, 7)
		require.GreaterOrEqual(t, d, 32*time.Millisecond)
	})
}

// A Worker not made by NewWorker (the zero value) or made without a client
// is a mistake Start reports, not a nil map or pointer that panics (in
// AddHandler, in Start).
func TestWorkerWithoutClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, w := range map[string]*docket.Worker{"zero": {}, "nil client": docket.NewWorker(nil, docket.WorkerConfig{})} {
		docket.AddHandler(w, func(ctx context.Context, j *docket.Job[echoArgs]) error { return nil })
		require.EqualError(t, w.Start(ctx), "docket: worker has no client: make it with NewWorker(client, …)", name)
		w.Stop(ctx)
	}
}
