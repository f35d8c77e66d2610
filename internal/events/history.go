package events

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/store"
)

// HistoryStore is what History needs of the store.
type HistoryStore interface {
	OutboxGetPublished(ctx context.Context, id int64) (*store.PublishedEvent, error)
	OutboxListPublished(ctx context.Context, p *store.OutboxListPublishedParams) ([]*store.PublishedEvent, int64, error)
	OutboxLastSeq(ctx context.Context) (int64, error)
	Subscribe(topic store.Topic) (<-chan string, func())
}

// History reads published events in publish order: the order the relay
// published them, which every reader sees the same, without gaps (see
// store.OutboxStore). SSE serves it; being in the database, it serves every
// process alike.
type History struct {
	store HistoryStore
}

// NewHistory reads the history of st.
func NewHistory(st HistoryStore) *History { return &History{store: st} }

// Cursor is a place in the history: just after event Index of the row
// numbered Seq (Index = math.MaxInt: after the whole row). The zero Cursor
// is the start.
type Cursor struct {
	Seq   int64
	RowID int64
	Index int
}

// Filter selects events. Zero fields select everything.
type Filter struct {
	Types []string
	JobID uuid.UUID
	RunID uuid.UUID // the events of one workflow run
}

func (f *Filter) match(ev *Envelope) bool {
	if len(f.Types) > 0 && !slices.Contains(f.Types, ev.Type) {
		return false
	}
	if f.RunID != uuid.Nil && ev.Subject != RunSubject(f.RunID) {
		return false
	}
	return f.JobID == uuid.Nil || ev.Subject == JobSubject(f.JobID)
}

// ErrNotInHistory: an event id is not (or no longer) in the history.
var ErrNotInHistory = errors.New("event is not in the history")

// Tail is the cursor after everything published so far.
func (h *History) Tail(ctx context.Context) (Cursor, error) {
	seq, err := h.store.OutboxLastSeq(ctx)
	if err != nil {
		return Cursor{}, err
	}
	return Cursor{Seq: seq, Index: math.MaxInt}, nil
}

// After is the cursor just after event id. An id that does not parse is an
// error from ParseEventID; one that is not published or was pruned wraps
// ErrNotInHistory.
func (h *History) After(ctx context.Context, id string) (Cursor, error) {
	rowID, index, err := ParseEventID(id)
	if err != nil {
		return Cursor{}, err
	}
	row, err := h.store.OutboxGetPublished(ctx, rowID)
	if errors.Is(err, store.ErrNotFound) {
		return Cursor{}, fmt.Errorf("event %s: %w", id, ErrNotInHistory)
	}
	if err != nil {
		return Cursor{}, err
	}
	return Cursor{Seq: row.Seq, RowID: row.ID, Index: index}, nil
}

// Read returns the events after cur that f selects, reading at most about
// limit rows, and the cursor after them. No events and an unchanged cursor
// mean the reader is at the end: wait for Wake.
func (h *History) Read(ctx context.Context, cur Cursor, f Filter, limit int) ([]Envelope, Cursor, error) {
	var out []Envelope
	if cur.Index != math.MaxInt && cur.RowID != 0 {
		// The rest of a row read part way.
		row, err := h.store.OutboxGetPublished(ctx, cur.RowID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, cur, err
		}
		if err == nil {
			out = appendEvents(out, &row.OutboxEvent, &f, cur.Index)
		}
		cur.Index = math.MaxInt
	}
	p := &store.OutboxListPublishedParams{AfterSeq: cur.Seq, Types: f.Types, Limit: limit}
	if f.JobID != uuid.Nil {
		p.Contains = f.JobID.String()
	}
	if f.RunID != uuid.Nil {
		p.Contains = f.RunID.String()
	}
	rows, through, err := h.store.OutboxListPublished(ctx, p)
	if err != nil {
		return out, cur, err
	}
	for _, row := range rows {
		out = appendEvents(out, &row.OutboxEvent, &f, -1)
		cur = Cursor{Seq: row.Seq, RowID: row.ID, Index: math.MaxInt}
	}
	if through > cur.Seq {
		cur = Cursor{Seq: through, Index: math.MaxInt}
	}
	return out, cur, nil
}

// appendEvents appends row's events after index that f selects.
func appendEvents(out []Envelope, row *store.OutboxEvent, f *Filter, after int) []Envelope {
	evs, _ := expandOrRaw(row) // as the relay published it
	for i := range evs {
		if i > after && f.match(&evs[i]) {
			out = append(out, evs[i])
		}
	}
	return out
}

// Wake delivers a value when rows may have been published (in this
// process, or in any with PostgreSQL); readers also poll.
func (h *History) Wake() (<-chan string, func()) {
	return h.store.Subscribe(store.TopicOutboxPublished)
}
