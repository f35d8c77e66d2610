package store

import (
	"context"
	"encoding/json"
	"time"
)

// InboxStore is the inbox domain, which durable event consumers use:
// exactly-once effects through an inbox of handled event ids, and dead
// letters.
//
// A consumer handles an event with InboxHandle: one write transaction that
// first records (consumer, event id) in the inbox, then runs the consumer's
// effect through a Tx — the store bound to that same transaction — and
// commits both together. A redelivered event finds its inbox row and is
// skipped, so the effect happens once per event however often the bus
// delivers it.
type InboxStore interface {
	// InboxHandle runs fn inside one write transaction that first inserts
	// (p.Consumer, p.EventID) into the inbox:
	//   - the inbox has it already: fn does not run, nothing of fn is
	//     written, and handled is false (a duplicate delivery: ack and
	//     skip);
	//   - fn returns an error: everything is rolled back, the inbox row
	//     too, so a redelivery runs fn again; the error is returned as is;
	//   - otherwise the inbox row, fn's writes and the removal of the
	//     event's dead letter for this consumer (if any) commit together,
	//     and handled is true.
	// fn must write through tx only (see Transactor.InTx and Tx). A concurrent InboxHandle of the same event waits for
	// this one, then sees it as a duplicate (or runs, if this one rolled
	// back).
	InboxHandle(ctx context.Context, p *InboxHandleParams, fn func(ctx context.Context, tx Tx) error) (handled bool, err error)
	// InboxDeleteHandled deletes up to p.Max inbox rows handled before
	// p.HandledBefore (0 = no limit). Returns how many. An event redelivered
	// after its row is gone would be handled again, so keep rows longer
	// than the bus can redeliver (its duplicate window and max age).
	InboxDeleteHandled(ctx context.Context, p *InboxDeleteHandledParams) (int, error)

	// DeadLetterRecord records that a consumer gave up on an event: a new
	// dead letter, or, when the event is dead already for that consumer,
	// Deliveries added to its count, LastError replaced and any pending
	// retry request cleared. Nothing is recorded (false) when the inbox
	// says the consumer handled the event meanwhile (another delivery of it
	// succeeded).
	DeadLetterRecord(ctx context.Context, p *DeadLetterRecordParams) (recorded bool, err error)
	// DeadLetterList lists dead letters oldest first, of one consumer or
	// of all (p.Consumer "").
	DeadLetterList(ctx context.Context, p *DeadLetterListParams) ([]*DeadLetter, error)
	// DeadLetterRequestRetry asks the consumer to handle the event again
	// (it claims the request with DeadLetterClaimRetries). Requesting twice
	// keeps the first request. ErrNotFound when there is no such dead
	// letter.
	DeadLetterRequestRetry(ctx context.Context, p *DeadLetterRequestRetryParams) (*DeadLetter, error)
	// DeadLetterClaimRetries takes up to p.Max retry requests of one
	// consumer, oldest first, clearing them: each request is claimed by one
	// caller. The dead letter itself stays until InboxHandle of the event
	// succeeds (which removes it) or DeadLetterRecord counts a new failure.
	DeadLetterClaimRetries(ctx context.Context, p *DeadLetterClaimRetriesParams) ([]*DeadLetter, error)
}

// InboxHandleParams names the event a consumer handles.
type InboxHandleParams struct {
	Consumer string // the durable consumer's name
	EventID  string // events.Envelope.ID
	Now      time.Time
}

// InboxDeleteHandledParams prunes the inbox.
type InboxDeleteHandledParams struct {
	HandledBefore time.Time
	Max           int
}

// DeadLetter is an event a consumer gave up on.
type DeadLetter struct {
	Consumer  string
	EventID   string
	EventType string
	// Envelope is the event as delivered (events.Envelope JSON, or the raw
	// message body when it could not be decoded).
	Envelope   json.RawMessage
	Deliveries int // how many times the consumer tried it
	LastError  string
	CreatedAt  time.Time
	UpdatedAt  time.Time // when the last failure was recorded
	// RetryRequestedAt is when a retry was asked for and not yet claimed;
	// zero when none is pending.
	RetryRequestedAt time.Time
}

// DeadLetterRecordParams records a consumer's failure on an event.
type DeadLetterRecordParams struct {
	Consumer   string
	EventID    string
	EventType  string
	Envelope   json.RawMessage // valid JSON
	Deliveries int             // tries made since the last record
	LastError  string
	Now        time.Time
}

// DeadLetterListParams filters DeadLetterList.
type DeadLetterListParams struct {
	Consumer string // "" = every consumer
	Limit    int    // 0 = no limit
	// After continues a listing: only dead letters that sort after it
	// (created_at, consumer, event_id); nil = from the oldest.
	After *DeadLetterKey
}

// DeadLetterKey is where a dead letter sorts in DeadLetterList: the last
// one of a page continues the listing. created_at never changes (a new
// failure only counts a delivery), so a page boundary stays put.
type DeadLetterKey struct {
	CreatedAt time.Time
	Consumer  string
	EventID   string
}

// Validate refuses a consumer (or After key) that is not text (checkText).
func (p *DeadLetterListParams) Validate() error {
	pr := problemsOf("list dead letters")
	checkText(pr, "consumer", p.Consumer)
	if p.After != nil {
		checkText(pr, "after.consumer", p.After.Consumer)
		checkText(pr, "after.eventId", p.After.EventID)
	}
	return pr.Err()
}

// DeadLetterRequestRetryParams asks for one dead letter to be retried.
type DeadLetterRequestRetryParams struct {
	Consumer string
	EventID  string
	Now      time.Time
}

// Validate refuses a consumer or event id that is not text (checkText).
func (p *DeadLetterRequestRetryParams) Validate() error {
	pr := problemsOf("retry dead letter")
	checkText(pr, "consumer", p.Consumer)
	checkText(pr, "eventId", p.EventID)
	return pr.Err()
}

// DeadLetterClaimRetriesParams claims pending retry requests.
type DeadLetterClaimRetriesParams struct {
	Consumer string
	Max      int
}
