// Package service is the lifecycle every background service of docket
// shares, written once in Lifecycle and embedded (as a field) by each of
// them. The contract:
//
//   - Start(ctx) launches the service's goroutines and returns; it does not
//     wait for their work. Starting a running service does nothing.
//   - A Start that fails leaves nothing running: before it returns the
//     error, what it launched is canceled, waited for and finalized.
//   - Stop cancels the context the goroutines run under, waits until every
//     one of them has returned, then runs the service's final steps (give a
//     leadership up, deregister a node). It is safe to call twice, from
//     several goroutines at once, and before Start; a second Stop returns
//     once the first is done. A stopped service may be started again.
//   - Final steps get Start's context without its cancellation
//     (context.WithoutCancel: its values, no deadline, never done) and bound
//     their own work with a timeout. No lifecycle code makes a
//     context.Background of its own.
//   - Start and Stop of one service never interleave. Neither may be called
//     from the service's own goroutines or final steps: Stop would wait for
//     itself.
//
// Loop is the common kind of service (a function run on a ticker);
// StartAll and StopAll start and stop a set of them in order.
package service

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Service is a background service.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

// Lifecycle is the start and stop of a service, the same for every one.
// The zero value is a stopped service. A service keeps one as a field and
// implements its methods through it:
//
//	func (s *S) Start(ctx context.Context) error {
//		return s.life.Start(ctx, func(ctx context.Context, r *service.Run) error {
//			r.Go(func() { s.run(ctx) })
//			return nil
//		})
//	}
//
//	func (s *S) Stop() { s.life.Stop() }
type Lifecycle struct {
	mu      sync.Mutex // held through Start and Stop
	run     *Run       // the current run; nil when stopped
	running atomic.Bool
}

// Run is one run of a service, from a Start to the Stop that ends it.
type Run struct {
	base   context.Context // Start's, without its cancellation: for final steps
	cancel context.CancelFunc
	wg     sync.WaitGroup
	final  []func(ctx context.Context)
}

// Go runs fn in a goroutine of the run: Stop returns only after fn has.
// Call it from the start function or from another goroutine of the run.
func (r *Run) Go(fn func()) { r.wg.Go(fn) }

// OnStop adds a final step, run by Stop after every goroutine of the run
// has returned; the last added runs first. ctx is Start's context without
// its cancellation: fn bounds its work with a timeout of its own. Call it
// from the start function only.
func (r *Run) OnStop(fn func(ctx context.Context)) { r.final = append(r.final, fn) }

// end cancels the run, waits for its goroutines and runs its final steps.
func (r *Run) end() {
	r.cancel()
	r.wg.Wait()
	for i := len(r.final) - 1; i >= 0; i-- {
		r.final[i](r.base)
	}
}

// Start begins a run unless one is going: start gets a context that Stop
// cancels and the Run to launch goroutines with. If start returns an
// error, the run ends at once (its context canceled, its goroutines waited
// for, its final steps run) and Start returns the error: the service is
// stopped, as if never started.
func (l *Lifecycle) Start(ctx context.Context, start func(ctx context.Context, r *Run) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.run != nil {
		return nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	r := &Run{base: context.WithoutCancel(ctx), cancel: cancel}
	if err := start(runCtx, r); err != nil {
		r.end()
		return err
	}
	l.run = r
	l.running.Store(true)
	return nil
}

// Stop ends the run, if any: it cancels the run's context, waits for its
// goroutines and runs its final steps.
func (l *Lifecycle) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.run == nil {
		return
	}
	l.running.Store(false)
	l.run.end()
	l.run = nil
}

// Running reports whether the service was started and not stopped since.
// It does not wait for a Start or Stop under way.
func (l *Lifecycle) Running() bool { return l.running.Load() }

// Loop runs Fn every Interval (and once at start) in one goroutine until
// stopped; then Final, if set, runs once.
type Loop struct {
	Name     string
	Interval time.Duration
	Fn       func(ctx context.Context)
	// Final is the loop's final step: see Run.OnStop.
	Final func(ctx context.Context)

	life Lifecycle
}

// Start launches the loop; a running loop is left as it is.
func (l *Loop) Start(ctx context.Context) error {
	return l.life.Start(ctx, func(ctx context.Context, r *Run) error {
		if l.Final != nil {
			r.OnStop(l.Final)
		}
		r.Go(func() {
			t := time.NewTicker(l.Interval)
			defer t.Stop()
			for {
				l.Fn(ctx)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
		return nil
	})
}

// Stop cancels the loop's context, waits for Fn to return, then runs Final.
func (l *Loop) Stop() { l.life.Stop() }

// Running reports whether the loop was started and not stopped since.
func (l *Loop) Running() bool { return l.life.Running() }

// StartAll starts services in order; if one fails, it stops those it
// started (in reverse order) and returns the error.
func StartAll(ctx context.Context, services ...Service) error {
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			StopAll(services[:i]...)
			return err
		}
	}
	return nil
}

// StopAll stops services in reverse order.
func StopAll(services ...Service) {
	for i := len(services) - 1; i >= 0; i-- {
		services[i].Stop()
	}
}
