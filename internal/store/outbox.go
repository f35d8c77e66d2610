package store

// OutboxStore is the part of Store the outbox relay and the event history
// (SSE) use. Filled in by the events work.
type OutboxStore interface{}
