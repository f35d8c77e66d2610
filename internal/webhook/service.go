// Package webhook delivers docket's events to HTTP endpoints: subscriptions,
// the fan-out of outbox rows into one delivery per (subscription, event),
// the delivery worker with retries, backoff, a dead state and a circuit
// breaker per endpoint, HMAC-SHA256 signatures, and a guard against
// server-side request forgery.
//
// The dispatcher and the delivery worker run on the maintenance leader
// only (the node that holds the leadership row of docket.Worker), so one
// process fans out and one breaker per endpoint governs sending.
package webhook

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/docket-run/docket/internal/store"
)

// Log attribute keys.
const (
	attrService  = "service"
	attrError    = "error"
	attrCount    = "count"
	attrEndpoint = "endpoint"
	attrWebhook  = "webhook_id"
	attrDelivery = "delivery_id"
	attrEventID  = "event_id"
)

// Service runs webhooks: the subscription calls the API uses, and, while
// this node leads, the dispatcher and the delivery worker.
type Service struct {
	cfg   Config
	store store.Store
	log   *slog.Logger
	guard *guard

	client    *http.Client
	transport *http.Transport
	breakers  *breakers
	wake      chan struct{} // wakes the delivery worker

	mu      sync.Mutex
	cancel  context.CancelFunc // of the elector
	done    chan struct{}
	leading bool
	// leaderCancel and leaderDone stop the leader-only loops.
	leaderCancel context.CancelFunc
	leaderDone   chan struct{}
}

// New makes a Service; Start runs its background work.
func New(cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g, err := newGuard(cfg.AllowHosts, cfg.AllowAny, cfg.Resolver)
	if err != nil {
		return nil, err
	}
	s := &Service{
		cfg: cfg, store: cfg.Store, guard: g,
		log:  cfg.Logger.With(attrService, "webhooks"),
		wake: make(chan struct{}, 1),
	}
	s.transport = &http.Transport{
		Proxy:                 nil, // a proxy would dial for us, past the guard
		DialContext:           g.dialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
	}
	s.client = &http.Client{
		Transport: s.transport,
		Timeout:   cfg.Timeout,
		// A redirect is an answer like any other: not 2xx, so a failure.
		// Following it could lead past the guard's subscribe-time check.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	s.breakers = newBreakers(cfg, s.log)
	return s, nil
}

// Start runs the elector: while this node holds the maintenance
// leadership, the dispatcher and the delivery worker run.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return nil
	}
	ctx, s.cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	s.done = done
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.LeaderTTL / 3)
		defer t.Stop()
		for {
			s.elect(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// Stop stops the elector and the leader's loops and waits for them; safe to
// call twice and before Start. It does not resign the leadership: the
// worker that shares it does.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.done = nil, nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	s.mu.Lock()
	s.stopLeading()
	s.mu.Unlock()
	s.transport.CloseIdleConnections()
}

// elect renews (or takes) the leadership with the worker's node id, and
// starts or stops the leader's loops to match.
func (s *Service) elect(ctx context.Context) {
	ok, err := s.store.LeaderAttemptElect(ctx, &store.LeaderElectParams{
		NodeID: s.cfg.NodeID, TTL: s.cfg.LeaderTTL, Now: s.cfg.Now(),
	})
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("leader election failed", attrError, err)
		ok = false // cannot prove the term was renewed: stop to be safe
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case ok && !s.leading:
		s.log.Info("leading: starting webhook dispatcher and delivery worker")
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		s.leaderCancel, s.leaderDone, s.leading = cancel, done, true
		go func() {
			defer close(done)
			var wg sync.WaitGroup
			wg.Go(func() { s.runDispatcher(lctx) })
			wg.Go(func() { s.runDeliverer(lctx) })
			wg.Wait()
		}()
	case !ok && s.leading:
		s.log.Info("not leading: stopping webhook dispatcher and delivery worker")
		s.stopLeading()
	}
}

// stopLeading stops the leader's loops; s.mu is held.
func (s *Service) stopLeading() {
	if !s.leading {
		return
	}
	s.leaderCancel()
	<-s.leaderDone
	s.leading = false
}

// Leading reports whether this node runs the dispatcher and the delivery
// worker now.
func (s *Service) Leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading
}

// notify wakes the delivery worker (without blocking).
func (s *Service) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
