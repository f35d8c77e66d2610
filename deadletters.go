package docket

import (
	"context"

	"github.com/docket-run/docket/internal/store"
)

// DeadLetterStore lists the dead letters of durable event consumers (events
// a consumer gave up on) and records requests to retry them, which the
// consumer takes up. docket serve answers /v1/dead-letters from it.
type DeadLetterStore interface {
	DeadLetterList(ctx context.Context, p *store.DeadLetterListParams) ([]*store.DeadLetter, error)
	DeadLetterRequestRetry(ctx context.Context, p *store.DeadLetterRequestRetryParams) (*store.DeadLetter, error)
}

// DeadLetters returns the dead letters of c's database.
func (c *Client) DeadLetters() DeadLetterStore { return c.store }
