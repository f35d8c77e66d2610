package docket

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/events"
	"github.com/docket-run/docket/internal/leader"
	"github.com/docket-run/docket/internal/service"
)

// Event is one committed event as every outward surface (NATS, SSE,
// webhooks) shows it: {id, type, occurredAt, subject, data}. Its id,
// "<outbox id>-<index>", is the dedupe key downstream.
type Event = events.Envelope

// EventPublisher publishes events to a bus and returns once the bus stored
// them; docket serve's NATS JetStream bus implements it.
type EventPublisher = events.Publisher

// EventBusConfig configures an EventBus: NATS JetStream, on an external
// server or cluster (URL) or on a server embedded in this process
// (Embedded; package natsembed runs one). Zero durations take defaults.
type EventBusConfig struct {
	// URL of an external NATS server or cluster with JetStream, e.g.
	// "nats://127.0.0.1:4222" (several comma-separated).
	URL string
	// Embedded is an in-process server to connect to instead
	// (*natsembed.Server). Exactly one of URL and Embedded is required.
	// The bus does not stop it: close the bus, then the server.
	Embedded EmbeddedNATS
	// DuplicateWindow: JetStream drops a message whose Nats-Msg-Id (the
	// event id) it saw within this window, so an event published again
	// after a crash is stored once. Default 5 min.
	DuplicateWindow time.Duration
	// StreamMaxAge: how long the stream keeps events. Default 7 days.
	StreamMaxAge time.Duration
	// PublishTimeout: how long one Publish waits for JetStream's acks.
	// Default 10 s.
	PublishTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// EmbeddedNATS is a NATS server running in this process, reached without
// a socket; *natsembed.Server is one. Package docket only connects to it,
// so programs that do not embed a server do not link one.
type EmbeddedNATS interface {
	InProcessConn() (net.Conn, error)
	String() string
}

// EventBus is the NATS JetStream connection events are published to, on
// stream EventStream under subjects "docket.<event type>". It is an
// EventPublisher: give it to NewEventRelay.
type EventBus struct {
	b *events.Bus
}

// EventStream is the JetStream stream of every event.
const EventStream = events.StreamName

// ErrEventBusDown: the bus is not connected; nothing was published.
var ErrEventBusDown = events.ErrBusDown

// ErrEventRelayDatabase: an EventRelay's Health when its last round
// failed on the database (reading the outbox or marking it published),
// not on the bus.
var ErrEventRelayDatabase = events.ErrRelayDatabase

// OpenEventBus connects to the bus. An external server that is down does
// not fail it: the connection keeps retrying in the background, Health
// reports it, and Publish fails with ErrEventBusDown until it is up.
func OpenEventBus(ctx context.Context, cfg EventBusConfig) (*EventBus, error) {
	bc := events.BusConfig{
		URL: cfg.URL, DuplicateWindow: cfg.DuplicateWindow, StreamMaxAge: cfg.StreamMaxAge,
		PublishTimeout: cfg.PublishTimeout, Logger: cfg.Logger,
	}
	if cfg.Embedded != nil {
		bc.Embedded = cfg.Embedded
	}
	b, err := events.OpenBus(ctx, bc)
	if err != nil {
		return nil, err
	}
	return &EventBus{b: b}, nil
}

// Publish publishes evs and returns once JetStream stored every one (or
// dropped it as a duplicate).
func (b *EventBus) Publish(ctx context.Context, evs []Event) error { return b.b.Publish(ctx, evs) }

// Health is nil while the bus is connected and the last Publish (if any)
// succeeded; otherwise it says what is wrong.
func (b *EventBus) Health() error { return b.b.Health() }

// Close closes the connection; events not yet acknowledged stay in the
// outbox.
func (b *EventBus) Close() { b.b.Close() }

// EventRelay publishes the transactional outbox to an EventPublisher. Give
// it to WorkerConfig.EventRelay: it runs while that worker holds the
// events leadership, elected among the workers that have a relay.
type EventRelay = events.Relay

// EventRelayConfig configures an EventRelay; zero fields take defaults
// (poll 200 ms, retention of published events 24 h).
type EventRelayConfig = events.RelayConfig

// NewEventRelay makes a relay of c's outbox to pub, with c's logger and
// clock unless cfg has its own.
func (c *Client) NewEventRelay(pub EventPublisher, cfg EventRelayConfig) *EventRelay {
	if cfg.Logger == nil {
		cfg.Logger = c.cfg.Logger
	}
	if cfg.Now == nil {
		cfg.Now = c.cfg.Now
	}
	return events.NewRelay(c.store, pub, cfg)
}

// EventHistory reads published events in the order they were published,
// the same for every reader, from the database (SSE serves it).
type EventHistory struct {
	h *events.History
}

// EventHistory returns the event history of c's database.
func (c *Client) EventHistory() *EventHistory { return &EventHistory{h: events.NewHistory(c.store)} }

// EventCursor is a place in the event history. The zero EventCursor is the
// start of the history (the oldest event kept); cursors compare equal when
// they are the same place.
type EventCursor struct {
	c events.Cursor
}

// EventFilter selects events. Zero fields select everything.
type EventFilter struct {
	Types []string  // event types, e.g. "job.state_changed"
	JobID uuid.UUID // the events of one job
	RunID uuid.UUID // the events of one workflow run (run and step state changes)
}

// ErrEventNotInHistory: the event is not in the history (pruned after the
// retention period, or never published); resuming after it would leave a
// gap.
var ErrEventNotInHistory = events.ErrNotInHistory

// CheckEventID reports whether id has the form of an event id,
// "<outbox id>-<index>".
func CheckEventID(id string) error {
	_, _, err := events.ParseEventID(id)
	return err
}

// Tail is the cursor after the newest event: reading from it returns only
// events published later.
func (h *EventHistory) Tail(ctx context.Context) (EventCursor, error) {
	c, err := h.h.Tail(ctx)
	return EventCursor{c}, err
}

// After is the cursor just after event id; ErrEventNotInHistory when the
// history does not hold it.
func (h *EventHistory) After(ctx context.Context, id string) (EventCursor, error) {
	c, err := h.h.After(ctx, id)
	return EventCursor{c}, err
}

// Read returns up to about limit events after cur that f selects, and the
// cursor after them (cur itself when there are none yet).
func (h *EventHistory) Read(ctx context.Context, cur EventCursor, f EventFilter, limit int) ([]Event, EventCursor, error) {
	evs, next, err := h.h.Read(ctx, cur.c, events.Filter{Types: f.Types, JobID: f.JobID, RunID: f.RunID}, limit)
	return evs, EventCursor{next}, err
}

// Wake returns a channel that receives when events may have been published
// (in this process or, on PostgreSQL, any), and the function that stops it.
// Subscribe before reading so nothing published in between is missed.
func (h *EventHistory) Wake() (<-chan string, func()) { return h.h.Wake() }

// UnpublishedEventRows counts outbox rows not yet published to the bus:
// events waiting while the bus is down, or for the relay's next round.
func (c *Client) UnpublishedEventRows(ctx context.Context) (int, error) {
	return c.store.OutboxCountUnpublished(ctx)
}

// leaderships is the leader-only services of a worker beside maintenance.
func (c WorkerConfig) leaderships() map[string][]service.Service {
	if c.EventRelay == nil {
		return nil
	}
	return map[string][]service.Service{leader.Events: {c.EventRelay}}
}
