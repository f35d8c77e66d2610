package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/docket-run/docket/internal/natsurl"
)

// StreamName is the JetStream stream every event goes to, under subjects
// NATSSubject(type) = docket.<type>.
const StreamName = "DOCKET_EVENTS"

// Defaults of BusConfig.
const (
	DuplicateWindowDefault = 5 * time.Minute
	StreamMaxAgeDefault    = 7 * 24 * time.Hour
	PublishTimeoutDefault  = 10 * time.Second
)

// InProcessServer is a NATS server running in this process, reached
// without a socket (package natsembed's Server). The bus only connects to
// it: whoever started it stops it, after closing the bus. Keeping the
// server behind this interface keeps the NATS server out of the binaries
// of programs that do not embed one.
type InProcessServer interface {
	InProcessConn() (net.Conn, error)
	String() string
}

// BusConfig configures the event bus.
type BusConfig struct {
	// URL of an external NATS server or cluster with JetStream, e.g.
	// "nats://127.0.0.1:4222" (several comma-separated).
	URL string
	// Embedded is the in-process server to use instead; exactly one of URL
	// and Embedded is required.
	Embedded InProcessServer
	// DuplicateWindow: JetStream drops a message whose Nats-Msg-Id it saw
	// within this window, so an event the relay publishes again (it
	// crashed between publishing and marking rows published) is stored
	// once. Default 5 min.
	DuplicateWindow time.Duration
	// StreamMaxAge: how long the stream keeps events. Default 7 days.
	StreamMaxAge time.Duration
	// PublishTimeout: how long one Publish waits for JetStream's acks.
	// Default 10 s.
	PublishTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c BusConfig) WithDefaults() BusConfig {
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = DuplicateWindowDefault
	}
	if c.StreamMaxAge <= 0 {
		c.StreamMaxAge = StreamMaxAgeDefault
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = PublishTimeoutDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports an invalid configuration.
func (c BusConfig) Validate() error {
	if (c.URL == "") == (c.Embedded == nil) {
		return errors.New("invalid BusConfig: give the URL of an external NATS or an Embedded server, not both")
	}
	if c.DuplicateWindow > c.StreamMaxAge {
		return fmt.Errorf("invalid BusConfig: DuplicateWindow %v exceeds StreamMaxAge %v", c.DuplicateWindow, c.StreamMaxAge)
	}
	return nil
}

// ErrBusDown: the bus connection is not up; nothing was published.
var ErrBusDown = errors.New("event bus is not connected")

// Bus is the connection to NATS JetStream. It is safe for concurrent use.
type Bus struct {
	cfg BusConfig
	log *slog.Logger
	nc  *nats.Conn
	js  jetstream.JetStream

	mu          sync.Mutex
	streamReady bool  // the stream was created or updated on this connection
	lastErr     error // of the last Publish; nil after a success
}

// OpenBus connects to the embedded server or to the external one. An external server that is down does not fail OpenBus: the
// connection keeps retrying in the background, Health reports it, and
// Publish fails with ErrBusDown until it is up. The stream is created (or
// its configuration updated) before the first publish.
func OpenBus(ctx context.Context, cfg BusConfig) (*Bus, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Bus{cfg: cfg, log: cfg.Logger.With(attrService, "bus")}
	opts := []nats.Option{
		nats.Name("docket"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				b.log.Warn("event bus disconnected", attrError, err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			b.log.Info("event bus reconnected", "url", nc.ConnectedUrlRedacted())
			b.mu.Lock()
			b.streamReady = false // the server may have lost it
			b.mu.Unlock()
		}),
	}
	var err error
	if cfg.Embedded != nil {
		opts = append(opts, nats.InProcessServer(cfg.Embedded))
		b.nc, err = nats.Connect("", opts...)
	} else {
		opts = append(opts, nats.RetryOnFailedConnect(true))
		b.nc, err = nats.Connect(cfg.URL, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", b.where(), err)
	}
	b.js, err = jetstream.New(b.nc,
		jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout))
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("JetStream on %s: %w", b.where(), err)
	}
	if b.nc.IsConnected() {
		// Best effort now; Publish retries it.
		if err := b.ensureStream(ctx); err != nil {
			b.log.Warn("create event stream failed; will retry", "stream", StreamName, attrError, err)
		}
	}
	return b, nil
}

// where names the server for errors and logs: the embedded one, or the
// URLs of the external one without their credentials (Health's error is
// logged by every /healthz while the bus is down, and shown on the
// dashboard).
func (b *Bus) where() string {
	if b.cfg.Embedded != nil {
		return b.cfg.Embedded.String()
	}
	return natsurl.Redact(b.cfg.URL)
}

// ensureStream creates the stream, or updates its configuration, once per
// connection.
func (b *Bus) ensureStream(ctx context.Context) error {
	b.mu.Lock()
	ready := b.streamReady
	b.mu.Unlock()
	if ready {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.PublishTimeout)
	defer cancel()
	_, err := b.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "docket events, published from the transactional outbox",
		Subjects:    []string{NATSSubject(">")},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      b.cfg.StreamMaxAge,
		Duplicates:  b.cfg.DuplicateWindow,
	})
	if err != nil {
		return fmt.Errorf("create or update stream %s: %w", StreamName, err)
	}
	b.mu.Lock()
	b.streamReady = true
	b.mu.Unlock()
	return nil
}

// Publish publishes events to JetStream, each under NATSSubject(type) with
// Nats-Msg-Id = its id, and returns once JetStream acknowledged every one
// (stored, or dropped as a duplicate). On error some may have been stored:
// publishing them again is safe within the duplicate window.
func (b *Bus) Publish(ctx context.Context, evs []Envelope) error {
	err := b.publish(ctx, evs)
	b.mu.Lock()
	b.lastErr = err
	if err != nil {
		b.streamReady = false // re-check the stream before the next try
	}
	b.mu.Unlock()
	return err
}

func (b *Bus) publish(ctx context.Context, evs []Envelope) error {
	if !b.nc.IsConnected() {
		return ErrBusDown
	}
	if err := b.ensureStream(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.PublishTimeout)
	defer cancel()
	futures := make([]jetstream.PubAckFuture, 0, len(evs))
	for i := range evs {
		data, err := json.Marshal(&evs[i])
		if err != nil {
			return fmt.Errorf("encode event %s: %w", evs[i].ID, err)
		}
		msg := &nats.Msg{Subject: NATSSubject(evs[i].Type), Data: data}
		// More than the pending limit waits for acks, up to the timeout.
		f, err := b.js.PublishMsgAsync(msg, jetstream.WithMsgID(evs[i].ID), jetstream.WithExpectStream(StreamName),
			jetstream.WithStallWait(b.cfg.PublishTimeout))
		if err != nil {
			return fmt.Errorf("publish event %s: %w", evs[i].ID, err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish event %s: %w", f.Msg().Header.Get(jetstream.MsgIDHeader), err)
		case <-ctx.Done():
			return fmt.Errorf("wait for JetStream acks: %w", ctx.Err())
		}
	}
	return nil
}

// Health is nil while the bus is connected and the last Publish (if any)
// succeeded; otherwise it says what is wrong.
func (b *Bus) Health() error {
	if !b.nc.IsConnected() {
		return fmt.Errorf("%w (%s, %s)", ErrBusDown, b.where(), b.nc.Status())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lastErr != nil {
		return fmt.Errorf("last publish failed: %w", b.lastErr)
	}
	return nil
}

// Conn is the NATS connection, for subscribers in this process.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream is the JetStream context, for durable consumers.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Close drains nothing: it closes the connection (not the embedded
// server). Events not yet acknowledged stay unpublished in the outbox.
func (b *Bus) Close() {
	if b.nc != nil {
		b.nc.Close()
	}
}
