package docket

import (
	"context"

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
type EventHistory = events.History

// EventHistory returns the event history of c's database.
func (c *Client) EventHistory() *EventHistory { return events.NewHistory(c.store) }

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
