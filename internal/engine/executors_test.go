package engine

import (
	"context"
	"encoding/json"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/testdb"
)

// testExecutions makes n executions told apart by their row's attempt.
func testExecutions(n int) []*execution {
	exs := make([]*execution, n)
	for i := range exs {
		exs[i] = &execution{row: &job.Row{Attempt: i}}
	}
	return exs
}

func waitCounts(t *testing.T, x *executors, what string, ok func(live, parked, started int) bool) {
	t.Helper()
	waitFor(t, what, func() bool { return ok(x.counts()) })
}

// An executor that finished its attempt runs the next one launched: one
// after the other, the attempts of a quiet engine all run on the first
// executor.
func TestExecutorsReuse(t *testing.T) {
	t.Parallel()
	var ran atomic.Int64
	x := newExecutors(func(*execution) { ran.Add(1) })
	defer x.close()
	for i := range 20 {
		x.launch(testExecutions(1))
		waitCounts(t, x, "the attempt to run and its executor to park", func(live, parked, started int) bool {
			return ran.Load() == int64(i+1) && parked == 1
		})
	}
	live, parked, started := x.counts()
	require.Equal(t, []int{1, 1, 1}, []int{live, parked, started})
}

// No attempt waits for another's handler: a batch of handlers that block
// all start, each on an executor of its own, and no more executors than
// that are started.
func TestExecutorsNoAttemptWaitsBehindAnother(t *testing.T) {
	t.Parallel()
	const n = 50
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(n)
	x := newExecutors(func(*execution) {
		started.Done()
		<-release
	})
	x.launch(testExecutions(n))
	started.Wait() // hangs (the test times out) if one waits behind another
	live, _, total := x.counts()
	require.Equal(t, n, live)
	require.LessOrEqual(t, total, n+1, "executors started for %d attempts", n)
	close(release)
	x.close()
	waitCounts(t, x, "every executor to exit", func(live, parked, started int) bool { return live == 0 })
}

// An executor idle for its idle time exits; attempts launched after that
// start a new one.
func TestExecutorsIdleExit(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var ran atomic.Int64
	x := newExecutors(func(*execution) {
		if ran.Add(1) <= 5 {
			<-release
		}
	})
	x.idle = 20 * time.Millisecond
	x.launch(testExecutions(5))
	waitCounts(t, x, "five executors", func(live, parked, started int) bool { return live == 5 })
	close(release)
	waitCounts(t, x, "every idle executor to exit", func(live, parked, started int) bool { return live == 0 && parked == 0 })
	x.launch(testExecutions(1))
	waitCounts(t, x, "a new executor to run the next attempt", func(live, parked, started int) bool { return ran.Load() == 6 })
	x.close()
	// close does not wait for an executor still on its way back from its
	// attempt (counted busy); it exits on its own.
	waitCounts(t, x, "every executor to exit", func(live, parked, started int) bool { return live == 0 })
}

// close ends the parked executors and waits for them; one running a
// handler that does not return keeps running, and exits once it returns.
func TestExecutorsCloseWaitsForTheIdle(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	x := newExecutors(func(ex *execution) {
		if ex.row.Attempt == 0 {
			<-release
		}
	})
	x.launch(testExecutions(8))
	waitCounts(t, x, "seven attempts run", func(live, parked, started int) bool { return parked == live-1 && live > 1 })
	x.close()
	live, parked, _ := x.counts()
	require.Equal(t, []int{1, 0}, []int{live, parked}, "close returned before the idle executors exited")
	close(release)
	waitCounts(t, x, "the last executor to exit", func(live, parked, started int) bool { return live == 0 })
}

// A handler that ends its goroutine (runtime.Goexit, as testing's FailNow
// does) loses its executor, not the attempts queued behind it, and close
// does not wait for it.
func TestExecutorsGoexit(t *testing.T) {
	t.Parallel()
	var ran atomic.Int64
	x := newExecutors(func(ex *execution) {
		ran.Add(1)
		if ex.row.Attempt == 0 {
			runtime.Goexit()
		}
	})
	x.launch(testExecutions(10))
	waitFor(t, "every attempt to run", func() bool { return ran.Load() == 10 })
	x.launch(testExecutions(1)) // a Goexit again
	waitFor(t, "the next attempt to run", func() bool { return ran.Load() == 11 })
	x.close() // hangs (the test times out) if the lost executors still count
	waitCounts(t, x, "every executor to exit", func(live, parked, started int) bool { return live == 0 })
}

// Launches from several goroutines racing executors on their way back from
// attempts, with an idle time short enough for executors to exit between
// them: every execution runs (none is left queued with no executor
// searching: a lost wakeup), and close returns.
func TestExecutorsStress(t *testing.T) {
	t.Parallel()
	var ran atomic.Int64
	x := newExecutors(func(*execution) { ran.Add(1) })
	x.idle = time.Millisecond
	const launchers, launches = 4, 300
	var want atomic.Int64
	var wg sync.WaitGroup
	for g := range launchers {
		wg.Go(func() {
			for i := range launches {
				n := 1 + (g+i)%3
				want.Add(int64(n))
				x.launch(testExecutions(n))
				if i%50 == 0 {
					time.Sleep(2 * time.Millisecond) // let executors park and exit
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "every launched execution to run", func() bool { return ran.Load() == want.Load() })
	closed := make(chan struct{})
	go func() { x.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("close did not return")
	}
	waitCounts(t, x, "every executor to exit", func(live, parked, started int) bool { return live == 0 })
}

// A handler that panics does not end its executor: with a concurrency of
// one, the attempts after it run on the same executor, and the panic is
// recorded as the attempt's end as before.
func TestPanicKeepsExecutor(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		ids := b.insert(t, "p", 4)
		var calls atomic.Int64
		panicked := make(chan job.Ref, 1)
		e, err := New(b.store, b.config(map[string]int{"p": 1}), map[string]*Handler{
			"p": {Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) {
				if calls.Add(1) == 1 {
					panicked <- job.Ref{ID: row.ID, Attempt: row.Attempt}
					panic("boom")
				}
				return nil, nil
			}},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		ref := <-panicked
		for _, id := range ids {
			if id == ref.ID {
				continue
			}
			waitFor(t, "the jobs after the panic to succeed", func() bool {
				row, err := b.store.JobGet(ctx, id)
				require.NoError(t, err)
				return row.State == job.StateSuccess
			})
		}
		row, err := b.store.JobGet(ctx, ref.ID)
		require.NoError(t, err)
		require.Equal(t, job.StateRetry, row.State)
		require.Contains(t, row.LastError, "panic: boom")
		// No executor has exited: had the panic ended its executor, a
		// second would have been started for the jobs after it. (Not
		// started == 1: a launch in the moment between a slot's release and
		// its executor's return may start a second one.)
		live, _, started := e.executors.counts()
		require.Equal(t, started, live, "executors started and still live")

		e.Stop(ctx)
		waitCounts(t, e.executors, "every executor to exit after Stop", func(live, parked, started int) bool { return live == 0 })
	})
}
