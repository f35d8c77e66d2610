package store

import (
	"context"
	"encoding/json"
	"time"
)

// OutboxStore is the outbox domain: the events every change writes in its
// own transaction, which the relay publishes and the event history (SSE)
// reads.
//
// The relay publishes unpublished rows in id order and then marks them
// published, giving each a publish sequence number: increasing in the order
// the rows were published, and visible in that order (a reader that sees
// sequence n also sees every row published before it). Ids do not give that
// order, because an id is assigned before its transaction commits, so a row
// may commit after rows with higher ids were published. The history is
// therefore read by publish sequence.
type OutboxStore interface {
	// OutboxList lists outbox rows with id > p.AfterID, oldest first,
	// published or not.
	OutboxList(ctx context.Context, p *OutboxListParams) ([]*OutboxEvent, error)
	// OutboxListUnpublished lists up to Limit rows not yet published, in id
	// order.
	OutboxListUnpublished(ctx context.Context, p *OutboxListUnpublishedParams) ([]*OutboxEvent, error)
	// OutboxCountUnpublished counts the rows not yet published, without
	// reading them.
	OutboxCountUnpublished(ctx context.Context) (int, error)
	// OutboxMarkPublished marks the rows p.IDs published at Now in one
	// statement, numbering them after every row published before, in the
	// order of p.IDs. Rows already published (by a relay that overlapped
	// this one) keep their number. It wakes subscribers of
	// TopicOutboxPublished, in every process where the backend can.
	// When no webhook subscription exists (in the statement's view) it
	// marks the rows fanned out to webhooks as well, as the dispatcher
	// would with none (WebhookStore): a subscription that committed before
	// the statement leaves them pending, so an event committed after a
	// subscription exists is always fanned out to it.
	// Returns how many rows it marked.
	OutboxMarkPublished(ctx context.Context, p *OutboxMarkPublishedParams) (int, error)
	// OutboxGetPublished returns a published row; ErrNotFound when there is
	// no such row, it is not published yet, or it was pruned.
	OutboxGetPublished(ctx context.Context, id int64) (*PublishedEvent, error)
	// OutboxListPublished lists published rows with AfterSeq < sequence <=
	// AfterSeq + Window, in sequence order, filtered. Through is the
	// sequence up to which the result is complete: a later call with
	// AfterSeq = Through misses nothing and repeats nothing.
	OutboxListPublished(ctx context.Context, p *OutboxListPublishedParams) (rows []*PublishedEvent, through int64, err error)
	// OutboxLastSeq is the highest publish sequence so far (0 for none).
	OutboxLastSeq(ctx context.Context) (int64, error)
	// OutboxDeletePublished deletes up to Max rows published before
	// PublishedBefore, oldest first. Unpublished rows are never deleted,
	// nor rows not fanned out to webhooks yet (see WebhookStore), nor the
	// newest published row: numbering goes on after it.
	OutboxDeletePublished(ctx context.Context, p *OutboxDeletePublishedParams) (int, error)
	// OutboxDeleteOld deletes up to Max rows created before CreatedBefore
	// that OutboxDeletePublished never deletes: rows not published (no
	// relay runs, or it has been down that long) and rows not fanned out
	// to webhooks (no dispatcher runs), oldest first. The newest published
	// row is kept: numbering goes on after it. It reads only the Max
	// oldest rows of each kind (by id: rows are written in about
	// created_at order), so a call costs as much however many younger
	// rows wait; a caller repeats while it returns Max. A non-positive Max
	// reads and deletes them all.
	OutboxDeleteOld(ctx context.Context, p *OutboxDeleteOldParams) (int, error)
}

// TopicOutboxPublished wakes readers of the event history when rows were
// marked published; the payload is empty.
const TopicOutboxPublished Topic = "outbox_published"

// OutboxListUnpublishedParams lists unpublished rows.
type OutboxListUnpublishedParams struct {
	Limit int
}

// OutboxMarkPublishedParams marks rows published, numbered in IDs order.
type OutboxMarkPublishedParams struct {
	IDs []int64
	Now time.Time
}

// OutboxListPublishedParams reads the published history.
type OutboxListPublishedParams struct {
	AfterSeq int64
	// Window bounds the sequence numbers one call scans (so a filter that
	// matches little cannot make one query read the whole history);
	// non-positive means OutboxWindowDefault.
	Window int64
	// Types keeps rows of these event types; empty keeps all.
	Types []string
	// Contains keeps rows whose JSON data contains this text (e.g. a job
	// id); "" keeps all. It is a pre-filter: callers check the events.
	Contains string
	// Limit of rows; non-positive means no limit.
	Limit int
}

// OutboxWindowDefault is the default OutboxListPublishedParams.Window.
const OutboxWindowDefault = 10000

// OutboxDeletePublishedParams prunes the history.
type OutboxDeletePublishedParams struct {
	PublishedBefore time.Time
	Max             int
}

// OutboxDeleteOldParams bounds the outbox by age (OutboxDeleteOld).
type OutboxDeleteOldParams struct {
	CreatedBefore time.Time
	Max           int
}

// PublishedEvent is a published outbox row with its place in the history.
type PublishedEvent struct {
	OutboxEvent
	Seq         int64
	PublishedAt time.Time
}

// OutboxListParams lists outbox rows with id > AfterID, oldest first.
type OutboxListParams struct {
	AfterID int64
	Limit   int
}

// OutboxEvent is one outbox row.
type OutboxEvent struct {
	ID        int64
	Type      string // job.EventStateChanged, job.EventProgress
	Data      json.RawMessage
	CreatedAt time.Time
}
