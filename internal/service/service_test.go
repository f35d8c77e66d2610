package service

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A loop stopped right after it started (an elector does this when it
// loses leadership at once, or at shutdown) must not race its goroutine.
func TestLoopStopRightAfterStart(t *testing.T) {
	t.Parallel()
	for range 500 {
		l := &Loop{Name: "test", Interval: time.Hour, Fn: func(context.Context) {}}
		require.NoError(t, l.Start(t.Context()))
		require.True(t, l.Running(), "running after Start")
		l.Stop()
		l.Stop()
		require.False(t, l.Running(), "running after Stop")
	}
}

// The loop's final step runs once per run, after Fn has returned for good.
func TestLoopFinalRunsAfterTheLoop(t *testing.T) {
	t.Parallel()
	var inFn, finals atomic.Int32
	l := &Loop{
		Name: "test", Interval: time.Millisecond,
		Fn: func(context.Context) {
			inFn.Add(1)
			defer inFn.Add(-1)
		},
		Final: func(context.Context) {
			require.Zero(t, inFn.Load(), "Final while Fn runs")
			finals.Add(1)
		},
	}
	l.Stop() // before Start: nothing to finalize
	require.Zero(t, finals.Load())
	for i := range 3 {
		require.NoError(t, l.Start(t.Context()))
		l.Stop()
		l.Stop()
		require.Equal(t, int32(i+1), finals.Load())
	}
}

type ctxKey struct{}

// Stop cancels the run, waits for every goroutine of it, then runs the
// final steps, last added first, with Start's context without its
// cancellation.
func TestLifecycleStopOrder(t *testing.T) {
	t.Parallel()
	var l Lifecycle
	var exited atomic.Int32
	var order []string
	start, cancelStart := context.WithCancel(context.WithValue(t.Context(), ctxKey{}, "v"))
	err := l.Start(start, func(ctx context.Context, r *Run) error {
		for range 3 {
			r.Go(func() {
				<-ctx.Done()
				exited.Add(1)
			})
		}
		for _, name := range []string{"first", "second"} {
			r.OnStop(func(ctx context.Context) {
				require.Equal(t, int32(3), exited.Load(), "final step before the goroutines exited")
				require.NoError(t, ctx.Err(), "final step's context is done")
				require.Equal(t, "v", ctx.Value(ctxKey{}), "final step's context lost Start's values")
				order = append(order, name)
			})
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, l.Running())
	cancelStart() // the caller's context ending does not stop the service ...
	require.True(t, l.Running())
	l.Stop() // ... Stop does, and its final steps still get a live context.
	require.False(t, l.Running())
	require.Equal(t, []string{"second", "first"}, order)
}

// A failed Start leaves nothing running: the goroutines it launched have
// exited and its final steps have run when it returns, and the service
// can be started again.
func TestLifecycleFailedStartLeavesNothingRunning(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var l Lifecycle
	boom := errors.New("boom")
	var exited, finals atomic.Int32
	err := l.Start(t.Context(), func(ctx context.Context, r *Run) error {
		r.OnStop(func(context.Context) { finals.Add(1) })
		for range 4 {
			r.Go(func() {
				<-ctx.Done()
				exited.Add(1)
			})
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, int32(4), exited.Load(), "Start returned before its goroutines exited")
	require.Equal(t, int32(1), finals.Load())
	require.False(t, l.Running())
	l.Stop() // nothing to stop: no second final step
	require.Equal(t, int32(1), finals.Load())

	require.NoError(t, l.Start(t.Context(), func(ctx context.Context, r *Run) error {
		r.Go(func() { <-ctx.Done() })
		return nil
	}))
	require.True(t, l.Running())
	l.Stop()
}

// Starting a running service does nothing: its start function is not
// called again.
func TestLifecycleStartTwice(t *testing.T) {
	t.Parallel()
	var l Lifecycle
	var starts int
	start := func(ctx context.Context, r *Run) error {
		starts++
		r.Go(func() { <-ctx.Done() })
		return nil
	}
	require.NoError(t, l.Start(t.Context(), start))
	require.NoError(t, l.Start(t.Context(), start))
	require.Equal(t, 1, starts)
	l.Stop()
	require.NoError(t, l.Start(t.Context(), start))
	require.Equal(t, 2, starts)
	l.Stop()
}

// Stop called from many goroutines at once: each returns only after the
// run's goroutines have exited and its final step has run, and the final
// step runs once.
func TestLifecycleConcurrentStops(t *testing.T) {
	t.Parallel()
	for range 50 {
		var l Lifecycle
		release := make(chan struct{})
		stopping := make(chan struct{})
		var done, finals atomic.Int32
		require.NoError(t, l.Start(t.Context(), func(ctx context.Context, r *Run) error {
			r.Go(func() {
				<-ctx.Done()
				close(stopping)
				<-release // a slow shutdown
				done.Add(1)
			})
			r.OnStop(func(context.Context) { finals.Add(1) })
			return nil
		}))
		const stoppers = 8
		errs := make(chan error, stoppers)
		for range stoppers {
			go func() {
				l.Stop()
				if done.Load() != 1 || finals.Load() != 1 {
					errs <- errors.New("Stop returned before the run ended")
					return
				}
				errs <- nil
			}()
		}
		<-stopping
		close(release)
		for range stoppers {
			require.NoError(t, <-errs)
		}
		require.Equal(t, int32(1), finals.Load())
	}
}

// Start and Stop racing from many goroutines: runs never overlap, every
// run that started is ended exactly once, and after the last Stop nothing
// runs. Run it with -race.
func TestLifecycleStartStopRace(t *testing.T) {
	t.Parallel()
	var l Lifecycle
	var active, maxActive, started, ended atomic.Int32
	start := func(ctx context.Context, r *Run) error {
		started.Add(1)
		n := active.Add(1)
		for {
			m := maxActive.Load()
			if n <= m || maxActive.CompareAndSwap(m, n) {
				break
			}
		}
		r.Go(func() { <-ctx.Done() })
		r.OnStop(func(context.Context) {
			active.Add(-1)
			ended.Add(1)
		})
		return nil
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				if (g+i)%2 == 0 {
					if err := l.Start(t.Context(), start); err != nil {
						t.Error(err)
						return
					}
				} else {
					l.Stop()
				}
			}
		})
	}
	wg.Wait()
	l.Stop()
	require.Equal(t, int32(1), maxActive.Load(), "two runs at once")
	require.Zero(t, active.Load())
	require.Equal(t, started.Load(), ended.Load())
	require.Positive(t, started.Load())
	require.False(t, l.Running())
}

// failing is a service whose Start fails.
type failing struct{ err error }

func (f failing) Start(context.Context) error { return f.err }
func (failing) Stop()                         {}

// StartAll stops, in reverse order, the services it started before one
// failed: none of their goroutines is left.
func TestStartAllStopsWhatStartedOnFailure(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var order []string
	loop := func(name string) *Loop {
		return &Loop{Name: name, Interval: time.Hour, Fn: func(context.Context) {},
			Final: func(context.Context) { order = append(order, name) }}
	}
	a, b, never := loop("a"), loop("b"), loop("never")
	boom := errors.New("boom")
	err := StartAll(t.Context(), a, b, failing{boom}, never)
	require.ErrorIs(t, err, boom)
	require.False(t, a.Running())
	require.False(t, b.Running())
	require.False(t, never.Running())
	require.Equal(t, []string{"b", "a"}, order)
}
