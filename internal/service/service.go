// Package service is the lifecycle every background service of docket
// shares: Start launches its goroutines and returns; Stop is safe to call
// twice (and before Start) and returns once they have exited. Loop is the
// common kind (a function run on a ticker); StartAll and StopAll start and
// stop a set of them.
package service

import (
	"context"
	"sync"
	"time"
)

// Service is a background service.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

// Loop runs Fn every Interval (and once at start) in one goroutine until
// stopped.
type Loop struct {
	Name     string
	Interval time.Duration
	Fn       func(ctx context.Context)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start launches the loop; a running loop is left as it is.
func (l *Loop) Start(ctx context.Context) error {
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
	}()
	return nil
}

// Stop cancels the loop's context and waits for Fn to return.
func (l *Loop) Stop() {
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

// Running reports whether the loop was started and not stopped since.
func (l *Loop) Running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cancel != nil
}

// StartAll starts services in order; on failure it stops those started.
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
