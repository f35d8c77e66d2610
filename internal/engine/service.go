// Package engine runs jobs: producers acquire leases, executors run handlers,
// the completer writes results in batches, and the leader's maintenance
// services rescue expired leases, schedule retries and prune old jobs.
package engine

import (
	"context"
	"sync"
	"time"
)

// Service is the lifecycle every background service shares: Start launches
// its goroutines and returns; Stop is safe to call twice (and before Start)
// and returns once they have exited.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

// loop runs fn every interval (and once at start) in one goroutine until
// stopped. Services built on it get Start/Stop for free.
type loop struct {
	name     string
	interval time.Duration
	fn       func(ctx context.Context)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *loop) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return nil
	}
	ctx, l.cancel = context.WithCancel(ctx)
	done := make(chan struct{}) // Stop clears l.done, maybe before this goroutine runs
	l.done = done
	go func() {
		defer close(done)
		t := time.NewTicker(l.interval)
		defer t.Stop()
		for {
			l.fn(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

func (l *loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// startAll starts services in order; on failure it stops those started.
func startAll(ctx context.Context, services ...Service) error {
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			stopAll(services[:i]...)
			return err
		}
	}
	return nil
}

// stopAll stops services in reverse order.
func stopAll(services ...Service) {
	for i := len(services) - 1; i >= 0; i-- {
		services[i].Stop()
	}
}
