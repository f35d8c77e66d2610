package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/docket-run/docket/internal/backoff"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// Log attribute keys.
const (
	attrService = "service"
	attrError   = "error"
	attrCount   = "count"
)

// Defaults of RelayConfig.
const (
	RelayPollIntervalDefault  = 200 * time.Millisecond
	RelayBatchDefault         = 200
	RelayBatchMaxDefault      = 2000
	RelayBatchEventsDefault   = 5000
	RelayRetentionDefault     = 24 * time.Hour
	RelayPruneIntervalDefault = time.Minute
	RelayBackoffBaseDefault   = 100 * time.Millisecond
	RelayBackoffMaxDefault    = 5 * time.Second
	RelayBreakerTripDefault   = 3
	RelayBreakerOpenDefault   = 5 * time.Second
)

// RelayConfig configures a Relay. Zero fields take the defaults above.
type RelayConfig struct {
	// PollInterval: how often the relay looks for unpublished rows when no
	// wakeup came. Wakeups come with inserted jobs; other state changes
	// (acquire, finish) are found by this poll. Default 200 ms.
	PollInterval time.Duration
	// Batch: most outbox rows published per round. Default 200.
	Batch int
	// BatchMax: while a backlog lasts, rounds grow. A round that took all
	// the rows it asked for is followed by one asking for twice as many, up
	// to BatchMax; a round that found fewer goes back to Batch. Each round
	// costs the same three round trips (read, publish and acks, mark) and
	// waits for a database connection three times, whatever its size: on a
	// busy server (the pool's connections queued for by hundreds of
	// requests) fixed rounds of 200 fell behind a thousand events a second.
	// Default 2000 (at least Batch).
	BatchMax int
	// BatchEvents: a round stops taking rows once it has this many events
	// (one row of a large batch of jobs fans out into many); it always
	// takes at least one row. Default 5000.
	BatchEvents int
	// Retention: published rows are kept this long for the event history
	// (SSE resume), then pruned every PruneInterval. Defaults 24 h and 1 min.
	Retention     time.Duration
	PruneInterval time.Duration
	// Backoff: the wait after a failed round grows from BackoffBase to
	// BackoffMax. Defaults 100 ms and 5 s.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// BreakerTrip consecutive failed publishes open the circuit: for
	// BreakerOpen no publish is tried, then one is. Defaults 3 and 5 s.
	BreakerTrip uint32
	BreakerOpen time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults.
func (c RelayConfig) WithDefaults() RelayConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.PollInterval, RelayPollIntervalDefault)
	def(&c.Retention, RelayRetentionDefault)
	def(&c.PruneInterval, RelayPruneIntervalDefault)
	def(&c.BackoffBase, RelayBackoffBaseDefault)
	def(&c.BackoffMax, RelayBackoffMaxDefault)
	def(&c.BreakerOpen, RelayBreakerOpenDefault)
	if c.BackoffMax < c.BackoffBase {
		c.BackoffMax = c.BackoffBase
	}
	if c.Batch <= 0 {
		c.Batch = RelayBatchDefault
	}
	if c.BatchMax <= 0 {
		c.BatchMax = RelayBatchMaxDefault
	}
	if c.BatchMax < c.Batch {
		c.BatchMax = c.Batch
	}
	if c.BatchEvents <= 0 {
		c.BatchEvents = RelayBatchEventsDefault
	}
	if c.BreakerTrip == 0 {
		c.BreakerTrip = RelayBreakerTripDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Publisher publishes events and returns once the bus has stored them all
// (or recognised them as duplicates). Bus implements it.
type Publisher interface {
	Publish(ctx context.Context, evs []Envelope) error
}

// RelayStore is what the relay needs of the store.
type RelayStore interface {
	store.OutboxStore
	Subscribe(topic store.Topic) (<-chan string, func())
}

// Relay publishes the outbox to the bus. Run it on one node at a time, the
// holder of the events leadership (one relay at a time gives the history
// its order; two overlapping at a change of leader publish some events
// twice, which the bus drops by id).
//
// Each round reads unpublished rows in id order, publishes their events in
// that order, waits for the acks, then marks the rows published in one
// statement. Per job this is commit order: a job's later change commits
// after its earlier one (the row is locked) and so gets a higher outbox id,
// and the earlier row is visible whenever the later one is. A crash between
// publishing and marking publishes the rows again on the next round; the bus
// drops the duplicates by Nats-Msg-Id = event id.
//
// While the bus is down rounds fail: the relay backs off, and after
// BreakerTrip failures a circuit breaker stops trying for BreakerOpen at a
// time. Nothing is lost: events wait in the outbox.
type Relay struct {
	cfg     RelayConfig
	store   RelayStore
	pub     Publisher
	log     *slog.Logger
	breaker *gobreaker.CircuitBreaker[struct{}]
	backoff backoff.Policy

	life service.Lifecycle

	mu      sync.Mutex
	lastErr error
}

// NewRelay makes a relay from st to pub; Start runs it.
func NewRelay(st RelayStore, pub Publisher, cfg RelayConfig) *Relay {
	cfg = cfg.WithDefaults()
	r := &Relay{
		cfg: cfg, store: st, pub: pub,
		log:     cfg.Logger.With(attrService, "relay"),
		backoff: backoff.Policy{Base: cfg.BackoffBase, Max: cfg.BackoffMax},
	}
	r.breaker = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "event bus",
		MaxRequests: 1,
		Timeout:     cfg.BreakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= cfg.BreakerTrip },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			r.log.Info("event bus circuit breaker changed state", "from", from.String(), "to", to.String())
		},
		// A round cut short by Stop says nothing about the bus.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
	})
	return r
}

// Start launches the relay's goroutine. It may be started again after Stop
// (a leader's services stop and start with its terms).
func (r *Relay) Start(ctx context.Context) error {
	return r.life.Start(ctx, func(ctx context.Context, run *service.Run) error {
		run.Go(func() { r.run(ctx) })
		run.OnStop(func(context.Context) { r.setErr(nil) }) // a relay that does not run reports nothing
		return nil
	})
}

// Stop stops the relay and waits for it. Safe to call twice and before
// Start.
func (r *Relay) Stop() { r.life.Stop() }

// ErrRelayDatabase: the relay's round failed on the database (reading the
// outbox or marking it published), not on the bus.
var ErrRelayDatabase = errors.New("database failed")

// Health is nil unless the last round failed (the bus is down or refused
// the events, or the database failed: ErrRelayDatabase).
func (r *Relay) Health() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastErr != nil {
		return fmt.Errorf("outbox relay (circuit %s): %w", r.breaker.State(), r.lastErr)
	}
	return nil
}

func (r *Relay) setErr(err error) {
	r.mu.Lock()
	r.lastErr = err
	r.mu.Unlock()
}

func (r *Relay) run(ctx context.Context) {
	wake, unsubscribe := r.store.Subscribe(store.TopicJobAvailable)
	defer unsubscribe()
	poll := time.NewTicker(r.cfg.PollInterval)
	defer poll.Stop()
	nextPrune := time.Now()
	failures := 0
	limit := r.cfg.Batch
	for ctx.Err() == nil {
		if !time.Now().Before(nextPrune) {
			r.prune(ctx)
			nextPrune = time.Now().Add(r.cfg.PruneInterval)
		}
		n, more, err := r.round(ctx, limit)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			r.setErr(err)
			wait := r.backoff.Delay(failures)
			r.log.Warn("publish outbox failed; events wait in the outbox", attrError, err,
				"failures", failures, "retry_in", wait.String())
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			continue
		}
		if failures > 0 {
			r.log.Info("publishing outbox again", "after_failures", failures)
			failures = 0
			r.setErr(nil)
		}
		if n == limit { // a full round: a backlog, ask for more next time
			limit = min(2*limit, r.cfg.BatchMax)
		} else {
			limit = r.cfg.Batch
		}
		if more {
			continue
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-poll.C:
		}
	}
}

// Round publishes one batch of unpublished rows and marks them published.
// It returns how many rows it published.
func (r *Relay) Round(ctx context.Context) (int, error) {
	n, _, err := r.round(ctx, r.cfg.Batch)
	return n, err
}

// round is Round of at most limit rows, also telling whether more rows may
// be waiting.
func (r *Relay) round(ctx context.Context, limit int) (n int, more bool, err error) {
	rows, err := r.store.OutboxListUnpublished(ctx, &store.OutboxListUnpublishedParams{Limit: limit})
	if err != nil {
		return 0, false, fmt.Errorf("%w: %w", ErrRelayDatabase, err)
	}
	if len(rows) == 0 {
		return 0, false, nil
	}
	var (
		evs []Envelope
		ids []int64
	)
	for _, row := range rows {
		ev, err := expandOrRaw(row)
		if err != nil {
			r.log.Error("outbox row does not decode; published as it is", "outbox_id", row.ID, attrError, err)
		}
		if len(ids) > 0 && len(evs)+len(ev) > r.cfg.BatchEvents {
			break // the rest next round, in order
		}
		ids = append(ids, row.ID)
		evs = append(evs, ev...)
	}
	_, err = r.breaker.Execute(func() (struct{}, error) {
		return struct{}{}, r.pub.Publish(ctx, evs)
	})
	if err != nil {
		return 0, false, fmt.Errorf("publish %d events of %d outbox rows: %w", len(evs), len(ids), err)
	}
	if _, err := r.store.OutboxMarkPublished(ctx, &store.OutboxMarkPublishedParams{IDs: ids, Now: r.cfg.Now()}); err != nil {
		return 0, false, fmt.Errorf("%w: %w", ErrRelayDatabase, err)
	}
	return len(ids), len(ids) < len(rows) || len(rows) == limit, nil
}

// prune deletes published rows past retention.
func (r *Relay) prune(ctx context.Context) {
	before := r.cfg.Now().Add(-r.cfg.Retention)
	for ctx.Err() == nil {
		n, err := r.store.OutboxDeletePublished(ctx, &store.OutboxDeletePublishedParams{PublishedBefore: before, Max: 1000})
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("prune published outbox rows failed", attrError, err)
			}
			return
		}
		if n > 0 {
			r.log.Debug("pruned published outbox rows", attrCount, n)
		}
		if n < 1000 {
			return
		}
	}
}

// expandOrRaw is Expand, except that a row that does not decode gives one
// event with its data as written (and the error): such a row must not hold
// the rest of the outbox back, and every surface shows it alike.
func expandOrRaw(row *store.OutboxEvent) ([]Envelope, error) {
	evs, err := Expand(row)
	if err != nil {
		return []Envelope{{ID: EventID(row.ID, 0), Type: row.Type, OccurredAt: row.CreatedAt, Data: row.Data}}, err
	}
	return evs, nil
}
