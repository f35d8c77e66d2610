package docket

import "github.com/docket-run/docket/internal/webhook"

// Webhooks delivers committed events to HTTP endpoints: subscriptions,
// signed POSTs with retries, backoff, a dead state, redelivery and a
// circuit breaker per endpoint (docs/events.md, "Webhooks"). Its
// dispatcher and delivery worker run in one process at a time: the holder
// of the webhooks leadership, elected among the processes running
// Webhooks.
type Webhooks = webhook.Service

// WebhooksConfig configures Webhooks; zero fields take the documented
// defaults. Its Store is set by Client.NewWebhooks.
type WebhooksConfig = webhook.Config

// NewWebhooks makes the webhook service of c's database, with c's logger
// and clock unless cfg has its own.
func (c *Client) NewWebhooks(cfg WebhooksConfig) (*Webhooks, error) {
	cfg.Store = c.store
	if cfg.Logger == nil {
		cfg.Logger = c.cfg.Logger
	}
	if cfg.Now == nil {
		cfg.Now = c.cfg.Now
	}
	return webhook.New(cfg)
}
