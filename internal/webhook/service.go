// Package webhook delivers docket's events to HTTP endpoints: subscriptions,
// the fan-out of outbox rows into one delivery per (subscription, event),
// the delivery worker with retries, backoff, a dead state and a circuit
// breaker per endpoint, HMAC-SHA256 signatures, and a guard against
// server-side request forgery.
//
// The dispatcher and the delivery worker run on one node at a time, the
// holder of the webhooks leadership, so one process fans out and one
// breaker per endpoint governs sending.
package webhook

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/docket-run/docket/internal/leader"
	"github.com/docket-run/docket/internal/service"
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
	store Store
	log   *slog.Logger
	guard *guard

	client    *http.Client
	transport *http.Transport
	breakers  *breakers
	wake      chan struct{} // wakes the delivery worker
	elector   *leader.Elector
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
	s.elector = leader.New(leader.Config{
		Name: leader.Webhooks, NodeID: cfg.NodeID, TTL: cfg.LeaderTTL,
		Store: cfg.Store, Logger: cfg.Logger, Now: cfg.Now, Services: []service.Service{&loops{s: s}},
	})
	return s, nil
}

// Start runs the elector: while this node holds the webhooks leadership,
// the dispatcher and the delivery worker run.
func (s *Service) Start(ctx context.Context) error { return s.elector.Start(ctx) }

// Stop stops the elector and the leader's loops, waits for them and gives
// the leadership up; safe to call twice and before Start.
func (s *Service) Stop() {
	s.elector.Stop()
	s.transport.CloseIdleConnections()
}

// Leading reports whether this node runs the dispatcher and the delivery
// worker now.
func (s *Service) Leading() bool { return s.elector.Leading() }

// loops is the dispatcher and the delivery worker, run by the leader.
type loops struct {
	s    *Service
	life service.Lifecycle
}

// Start is called by the elector only, at the start of a term.
func (l *loops) Start(ctx context.Context) error {
	return l.life.Start(ctx, func(ctx context.Context, r *service.Run) error {
		r.Go(func() {
			l.s.reclaim(ctx)
			l.s.runDeliverer(ctx)
		})
		r.Go(func() { l.s.runDispatcher(ctx) })
		return nil
	})
}

// reclaim takes over, at the start of a term, the deliveries the previous
// holder of the leadership claimed and did not finish: it died (or was cut
// off) while sending them, and they would wait for the end of its claim,
// (PerWebhookBatch+1) × Timeout, while later events of their
// subscriptions are sent before them. A previous holder that stepped down
// gave its claims back already. A failure leaves them to their lease.
func (s *Service) reclaim(ctx context.Context) {
	n, err := s.store.WebhookDeliveryReclaim(ctx, &store.WebhookDeliveryReclaimParams{NodeID: s.cfg.NodeID, Now: s.cfg.Now()})
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("take over the previous leader's webhook deliveries failed; they are sent after their claim", attrError, err)
	case n > 0:
		s.log.Info("took over webhook deliveries the previous leader had claimed", attrCount, n)
	}
}

// Stop is called by the elector only, at the end of a term.
func (l *loops) Stop() { l.life.Stop() }

// notify wakes the delivery worker (without blocking).
func (s *Service) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
