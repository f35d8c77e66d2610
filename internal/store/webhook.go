package store

// WebhookStore is the part of Store webhook subscriptions and deliveries
// use. Filled in by the events work.
type WebhookStore interface{}
