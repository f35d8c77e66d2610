package webhook

import (
	"github.com/docket-run/docket/internal/leader"
	"github.com/docket-run/docket/internal/store"
)

// Store is what the webhook service needs of the store: the webhooks
// domain, and the leadership its elector holds.
type Store interface {
	store.WebhookStore
	leader.Store
}
