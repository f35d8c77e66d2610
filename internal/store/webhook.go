package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// WebhookTx is the part of WebhookStore that runs in a caller's
// transaction (Tx) as well as on its own.
type WebhookTx interface {
	// WebhookInsert records a subscription.
	WebhookInsert(ctx context.Context, p *WebhookInsertParams) (*Webhook, error)
	// WebhookGet returns a subscription; ErrNotFound when there is none.
	WebhookGet(ctx context.Context, id uuid.UUID) (*Webhook, error)
}

// WebhookStore is the webhooks domain: subscriptions and their deliveries.
//
// Fan-out never skips or repeats an outbox row: an outbox row carries a
// "fanned out" mark that is NULL when it is committed, and the dispatcher
// reads the unmarked rows (not rows above a cursor, so a row that commits
// late with a lower id than rows already handled is still found), inserts
// their deliveries and marks them in one transaction. Deliveries are unique
// per (webhook, event id), so two dispatchers racing on the same rows
// insert each delivery once.
type WebhookStore interface {
	WebhookTx

	// WebhookList lists every subscription, oldest first.
	WebhookList(ctx context.Context) ([]*Webhook, error)
	// WebhookDelete deletes a subscription and its deliveries; ErrNotFound
	// when there is none.
	WebhookDelete(ctx context.Context, id uuid.UUID) error

	// WebhookOutboxListPending lists up to Limit outbox rows not fanned out
	// yet, oldest first.
	WebhookOutboxListPending(ctx context.Context, p *WebhookOutboxListPendingParams) ([]*OutboxEvent, error)
	// WebhookFanOut inserts p.Deliveries (skipping any whose (webhook, event
	// id) exists, and any whose webhook was deleted meanwhile) and marks
	// the outbox rows p.OutboxIDs fanned out, in one transaction. It returns
	// how many deliveries it inserted.
	WebhookFanOut(ctx context.Context, p *WebhookFanOutParams) (int, error)

	// WebhookDeliveryClaim takes up to Max due PENDING deliveries, at most
	// PerWebhook of each webhook and none of the webhooks in Exclude,
	// oldest event first: each gets attempts+1 and its next attempt moved
	// to LeaseUntil, so no other claimer takes it while it is being sent
	// (a claimer that dies leaves it to be retried after LeaseUntil, or
	// to WebhookDeliveryReclaim). The claim records NodeID until the
	// attempt is finished or released.
	WebhookDeliveryClaim(ctx context.Context, p *WebhookDeliveryClaimParams) ([]*WebhookDelivery, error)
	// WebhookDeliveryReclaim makes the PENDING deliveries claimed by
	// another node than NodeID, and neither finished nor released, due at
	// Now: a new holder of the webhooks leadership takes over the claims
	// of the previous one (dead, or stepped down) instead of waiting for
	// their leases. Their attempts stay counted (the request may have been
	// sent), so a late Finish or Release of the old claim is fenced once
	// they are claimed again. It returns how many it made due.
	WebhookDeliveryReclaim(ctx context.Context, p *WebhookDeliveryReclaimParams) (int, error)
	// WebhookDeliveryFinish records the outcome of a claimed attempt,
	// guarded by state PENDING and attempts = p.Attempt (fencing). It
	// reports whether the row was updated.
	WebhookDeliveryFinish(ctx context.Context, p *WebhookDeliveryFinishParams) (bool, error)
	// WebhookDeliveryRelease gives a claimed attempt back unmade (attempts
	// -1, due at p.NextAttemptAt), with the same guard as Finish.
	WebhookDeliveryRelease(ctx context.Context, p *WebhookDeliveryReleaseParams) (bool, error)
	// WebhookDeliverySkip counts an attempt that is due but not made (the
	// endpoint's circuit breaker is open) for up to Max due PENDING
	// deliveries of WebhookIDs, oldest event first: attempts+1, the status
	// code 0 and Error recorded (LastAttemptAt unchanged: no request was
	// sent), then DEAD if attempts reached MaxAttempts, else due again
	// Delays[attempts-1] after Now. A claimed delivery is not due (its next
	// attempt is its lease) and is left alone. It returns how many it
	// changed.
	WebhookDeliverySkip(ctx context.Context, p *WebhookDeliverySkipParams) (int, error)
	// WebhookDeliveryHasten brings forward, due at Now, up to Max of
	// WebhookID's backlog, oldest event first: its PENDING deliveries made
	// before Before and last attempted (if ever) before Before, that are
	// not due yet — those an endpoint's open circuit breaker held back,
	// sent again once it recovered. Attempts, errors and LastAttemptAt
	// are unchanged. One batch at a time: while some of the backlog is
	// due already (brought forward before and not claimed yet, or due on
	// its own schedule) it brings none forward, and counts those as
	// waiting. A claimed delivery is not due either (its lease): the
	// caller hastens only the webhooks it has no claim in flight for.
	WebhookDeliveryHasten(ctx context.Context, p *WebhookDeliveryHastenParams) (*WebhookDeliveryHastenResult, error)
	// WebhookDeliveryList lists a webhook's deliveries, newest event first.
	WebhookDeliveryList(ctx context.Context, p *WebhookDeliveryListParams) ([]*WebhookDelivery, error)
	// WebhookDeliveryRedeliver puts a DELIVERED or DEAD delivery back to
	// PENDING, due at Now with attempts reset; a PENDING one is returned
	// unchanged. ErrNotFound when the webhook has no such delivery.
	WebhookDeliveryRedeliver(ctx context.Context, p *WebhookDeliveryRedeliverParams) (*WebhookDelivery, error)
	// WebhookDeliveryDeleteFinished deletes up to Max DELIVERED and DEAD
	// deliveries finished before FinishedBefore. Returns how many.
	WebhookDeliveryDeleteFinished(ctx context.Context, p *WebhookDeliveryDeleteFinishedParams) (int, error)
}

// Webhook is a subscription: events of EventTypes are POSTed to URL,
// signed with Secret.
type Webhook struct {
	ID         uuid.UUID
	URL        string
	EventTypes []string // event types, or "*" for all
	Secret     string
	CreatedAt  time.Time
}

// WebhookInsertParams records a new subscription.
type WebhookInsertParams struct {
	ID         uuid.UUID
	URL        string
	EventTypes []string
	Secret     string
	Now        time.Time
}

// WebhookOutboxListPendingParams lists outbox rows not fanned out yet.
type WebhookOutboxListPendingParams struct {
	Limit int
}

// WebhookFanOutParams: insert these deliveries and mark these outbox rows.
type WebhookFanOutParams struct {
	OutboxIDs  []int64
	Deliveries []*WebhookDeliveryInsertParams
	Now        time.Time
}

// WebhookDeliveryInsertParams is one event for one webhook, due at Now.
type WebhookDeliveryInsertParams struct {
	ID         uuid.UUID // UUIDv7, made by the caller
	WebhookID  uuid.UUID
	EventID    string
	EventType  string
	OutboxID   int64 // with EventIndex, the event's order
	EventIndex int
	Payload    json.RawMessage // the body POSTed: the event envelope
}

// WebhookDeliveryState is where a delivery is.
type WebhookDeliveryState string

// Delivery states.
const (
	DeliveryPending   WebhookDeliveryState = "PENDING"   // due at NextAttemptAt
	DeliveryDelivered WebhookDeliveryState = "DELIVERED" // a 2xx answered
	DeliveryDead      WebhookDeliveryState = "DEAD"      // out of attempts
)

// WebhookDelivery is one event for one webhook and the story of sending it.
type WebhookDelivery struct {
	ID             uuid.UUID
	WebhookID      uuid.UUID
	EventID        string
	EventType      string
	OutboxID       int64
	EventIndex     int
	Payload        json.RawMessage
	State          WebhookDeliveryState
	Attempts       int
	LastStatusCode int    // 0: no HTTP answer (yet)
	LastError      string // "" after a success
	NextAttemptAt  time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	LastAttemptAt  time.Time // zero before the first attempt made (claimed is not made)
	FinishedAt     time.Time // when it became DELIVERED or DEAD
}

// WebhookDeliveryClaimParams: claim due deliveries at Now.
type WebhookDeliveryClaimParams struct {
	Now        time.Time
	Max        int
	PerWebhook int
	Exclude    []uuid.UUID
	LeaseUntil time.Time
	NodeID     string // the claimer
}

// WebhookDeliveryReclaimParams: take over the claims of nodes other than
// NodeID at Now.
type WebhookDeliveryReclaimParams struct {
	NodeID string
	Now    time.Time
}

// WebhookDeliveryFinishParams is the outcome of one attempt.
type WebhookDeliveryFinishParams struct {
	ID         uuid.UUID
	Attempt    int                  // fencing: the attempts the claim returned
	State      WebhookDeliveryState // DELIVERED, PENDING (retry) or DEAD
	StatusCode int
	Error      string
	// NextAttemptAt: when a PENDING delivery is due again.
	NextAttemptAt time.Time
	// AttemptedAt: when the attempt's request was sent, recorded as the
	// delivery's LastAttemptAt. A claim does not set it: an attempt it
	// gives back (WebhookDeliveryRelease) was never made.
	AttemptedAt time.Time
	Now         time.Time
}

// AttemptedAtOrNow is AttemptedAt, or Now when it is not set.
func (p *WebhookDeliveryFinishParams) AttemptedAtOrNow() time.Time {
	if p.AttemptedAt.IsZero() {
		return p.Now
	}
	return p.AttemptedAt
}

// WebhookDeliveryReleaseParams gives back a claimed attempt not made.
type WebhookDeliveryReleaseParams struct {
	ID            uuid.UUID
	Attempt       int
	NextAttemptAt time.Time
	Now           time.Time
}

// WebhookDeliverySkipParams counts a due attempt not made.
type WebhookDeliverySkipParams struct {
	WebhookIDs  []uuid.UUID
	Now         time.Time
	Error       string
	MaxAttempts int
	// Delays[n-1] is the delay after the n-th attempt; it needs at least
	// MaxAttempts-1 entries.
	Delays []time.Duration
	Max    int
}

// Check reports Delays too short for MaxAttempts.
func (p *WebhookDeliverySkipParams) Check() error {
	if p.MaxAttempts < 1 || len(p.Delays) < p.MaxAttempts-1 {
		return fmt.Errorf("skip webhook deliveries: %d delays for %d attempts", len(p.Delays), p.MaxAttempts)
	}
	return nil
}

// DelayMicros is Delays in microseconds.
func (p *WebhookDeliverySkipParams) DelayMicros() []int64 {
	out := make([]int64, len(p.Delays))
	for i, d := range p.Delays {
		out[i] = d.Microseconds()
	}
	return out
}

// WebhookDeliveryHastenParams brings a webhook's waiting deliveries
// forward.
type WebhookDeliveryHastenParams struct {
	WebhookID uuid.UUID
	Before    time.Time // only deliveries made before this, last attempted before it or never
	Now       time.Time
	Max       int
}

// WebhookDeliveryHastenResult is what WebhookDeliveryHasten found and
// did. Both zero: the backlog is drained.
type WebhookDeliveryHastenResult struct {
	Hastened int // brought forward by this call
	Waiting  int // of the backlog, due already (none was brought forward)
}

// WebhookDeliveryListParams lists a webhook's deliveries. State "" is any.
type WebhookDeliveryListParams struct {
	WebhookID uuid.UUID
	State     WebhookDeliveryState
	Limit     int
}

// WebhookDeliveryRedeliverParams re-queues one delivery of a webhook.
type WebhookDeliveryRedeliverParams struct {
	WebhookID uuid.UUID
	ID        uuid.UUID
	Now       time.Time
}

// WebhookDeliveryDeleteFinishedParams prunes old finished deliveries.
type WebhookDeliveryDeleteFinishedParams struct {
	FinishedBefore time.Time
	Max            int
}
