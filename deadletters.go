package docket

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/docket-run/docket/internal/store"
)

// DeadLetter is an event a durable consumer gave up on after its maximum
// number of deliveries; the consumer's other events keep flowing.
type DeadLetter struct {
	Consumer  string
	EventID   string
	EventType string
	// Envelope is the event as delivered (an Event as JSON, or the raw
	// message body when it could not be decoded).
	Envelope   json.RawMessage
	Deliveries int // how many times the consumer tried it
	LastError  string
	CreatedAt  time.Time
	UpdatedAt  time.Time // when the last failure was recorded
	// RetryRequestedAt is when a retry was asked for that the consumer has
	// not taken up yet; zero when none is pending.
	RetryRequestedAt time.Time
}

// DeadLetterListParams filter DeadLetterList.
type DeadLetterListParams struct {
	Consumer string // "" = every consumer
	Limit    int    // 0 = no limit
	// After continues a listing after this dead letter (the last of the
	// previous page; its CreatedAt, Consumer and EventID are what count);
	// nil = from the oldest.
	After *DeadLetter
}

// DeadLetterCursor is the opaque position of d in a dead-letter listing,
// as GET /v1/dead-letters and the dashboard hand it out: the base64url of
// the JSON array [createdAt in unix microseconds, consumer, eventId].
func DeadLetterCursor(d *DeadLetter) string {
	b, _ := json.Marshal([]any{d.CreatedAt.UnixMicro(), d.Consumer, d.EventID}) // cannot fail: an int and two strings
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseDeadLetterCursor reads a DeadLetterCursor back into the dead letter
// to page after (DeadLetterListParams.After); false for anything
// DeadLetterCursor does not write (one spelling per cursor).
func ParseDeadLetterCursor(s string) (*DeadLetter, bool) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, false
	}
	var key []json.RawMessage
	if json.Unmarshal(b, &key) != nil || len(key) != 3 {
		return nil, false
	}
	var (
		micros            int64
		consumer, eventID string
	)
	if json.Unmarshal(key[0], &micros) != nil || json.Unmarshal(key[1], &consumer) != nil || json.Unmarshal(key[2], &eventID) != nil {
		return nil, false
	}
	d := &DeadLetter{CreatedAt: time.UnixMicro(micros).UTC(), Consumer: consumer, EventID: eventID}
	if DeadLetterCursor(d) != s {
		return nil, false
	}
	return d, true
}

// DeadLetterList lists the dead letters of durable event consumers, oldest
// first (ties by consumer, then event id); page with Limit and After.
// docket serve answers GET /v1/dead-letters from it.
func (c *Client) DeadLetterList(ctx context.Context, p DeadLetterListParams) ([]*DeadLetter, error) {
	sp := &store.DeadLetterListParams{Consumer: p.Consumer, Limit: p.Limit}
	if p.After != nil {
		sp.After = &store.DeadLetterKey{CreatedAt: p.After.CreatedAt, Consumer: p.After.Consumer, EventID: p.After.EventID}
	}
	ds, err := c.store.DeadLetterList(ctx, sp)
	if err != nil {
		return nil, fieldErrors(err)
	}
	out := make([]*DeadLetter, len(ds))
	for i, d := range ds {
		out[i] = deadLetterOf(d)
	}
	return out, nil
}

// DeadLetterRetry asks consumer to handle the dead letter of eventID again:
// the consumer, in whichever process runs it, claims the request and
// handles the event in its inbox transaction (success removes the dead
// letter, failure counts one more delivery). Asking twice keeps the first
// request. ErrNotFound when there is no such dead letter.
func (c *Client) DeadLetterRetry(ctx context.Context, consumer, eventID string) (*DeadLetter, error) {
	d, err := c.store.DeadLetterRequestRetry(ctx, &store.DeadLetterRequestRetryParams{
		Consumer: consumer, EventID: eventID, Now: c.cfg.Now(),
	})
	if err != nil {
		return nil, fieldErrors(err)
	}
	return deadLetterOf(d), nil
}

func deadLetterOf(d *store.DeadLetter) *DeadLetter {
	return &DeadLetter{
		Consumer: d.Consumer, EventID: d.EventID, EventType: d.EventType, Envelope: d.Envelope,
		Deliveries: d.Deliveries, LastError: d.LastError, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
		RetryRequestedAt: d.RetryRequestedAt,
	}
}
