package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/jsonappend"
)

// A job.state_changed outbox row holds the transitions of a batch in one
// of two forms, which decode alike (UnmarshalJSON):
//
//	{"transitions":[{"jobId":…,"jobType":…,"queue":…,"from":…,"to":…,"attempt":…},…]}
//	{"groups":[{"jobType":…,"queue":…,"from":…,"to":…,"attempt":…,"jobIds":[…]},…]}
//
// The first is what PostgreSQL's statements built in SQL until round six
// of issue 16 (json_agg of a record per job), and rows of it stay in
// existing outboxes; every writer now makes the second. Go writes it
// (MarshalJSON, StateChangedEncoder) with a run of consecutive transitions
// that share everything but the job id as one group, so the row of a bulk
// insert or an acquisition, all of one type and queue, is about a third of
// the size — a third of the bytes the database receives, checks as JSON
// and compresses in the transaction that makes it. Groups keep the
// transitions' order, which event ids depend on. PostgreSQL's statements
// build it in SQL (outboxStateChanged in the postgres store) with one group
// per type, queue, states and attempt, in no particular order, as their
// long form's transitions were.

// MarshalJSON encodes d in the grouped form, without reflection: a
// state_changed row of a large batch is encoded in the transaction that
// makes it, on the hot path of every backend.
func (d StateChangedData) MarshalJSON() ([]byte, error) {
	return d.AppendJSON(nil), nil
}

// AppendJSON appends the grouped encoding of d to b, growing b once, up
// front, to the size the encoding will about have (growing a large batch's
// buffer by doubling copied it several times over).
func (d StateChangedData) AppendJSON(b []byte) []byte {
	e := StateChangedEncoder{b: slices.Grow(b, d.sizeHint())}
	for i := range d.Transitions {
		e.Add(&d.Transitions[i])
	}
	return e.JSON()
}

// UnmarshalJSON decodes either form, or an object with both (the
// transitions first, then the groups').
func (d *StateChangedData) UnmarshalJSON(b []byte) error {
	var w struct {
		Transitions []Transition      `json:"transitions"`
		Groups      []transitionGroup `json:"groups"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Transitions == nil && w.Groups == nil &&
		!bytes.Contains(b, []byte(`"transitions"`)) && !bytes.Contains(b, []byte(`"groups"`)) {
		// Neither form: a row of some other writer, which must not pass
		// for an event of no transitions (and be published as nothing).
		return errors.New(`job.state_changed data has neither "transitions" nor "groups"`)
	}
	ts := w.Transitions
	if n := len(ts) + groupedLen(w.Groups); n > len(ts) {
		ts = slices.Grow(ts, n-len(ts))
		for _, g := range w.Groups {
			for _, id := range g.JobIDs {
				ts = append(ts, Transition{JobID: id, JobType: g.JobType, Queue: g.Queue, From: g.From, To: g.To, Attempt: g.Attempt})
			}
		}
	}
	d.Transitions = ts
	return nil
}

// transitionGroup is consecutive transitions that differ only in the job.
type transitionGroup struct {
	JobType string      `json:"jobType"`
	Queue   string      `json:"queue"`
	From    State       `json:"from"`
	To      State       `json:"to"`
	Attempt int         `json:"attempt"`
	JobIDs  []uuid.UUID `json:"jobIds"`
}

func groupedLen(gs []transitionGroup) int {
	n := 0
	for _, g := range gs {
		n += len(g.JobIDs)
	}
	return n
}

// StateChangedEncoder encodes a StateChangedData a transition at a time,
// for a caller that makes the transitions as it goes: JSON returns what
// AppendJSON of the transitions added would. The zero value is ready.
type StateChangedEncoder struct {
	b    []byte
	n    int
	last Transition // the open group's, when n > 0
}

// Grow makes room for about n more transitions like t in one group (its
// strings needing no escaping), so that the encoding grows its buffer once.
func (e *StateChangedEncoder) Grow(n int, t *Transition) {
	e.b = slices.Grow(e.b, len(`{"groups":[]}`)+groupSize(t)+n*idSize)
}

// Add appends t: to the open group when it shares the group's type,
// queue, states and attempt, else as the first of a new group.
func (e *StateChangedEncoder) Add(t *Transition) {
	b := e.b
	switch {
	case e.n > 0 && sameGroup(&e.last, t):
		b = append(b, `,"`...)
		b = jsonappend.UUID(b, t.JobID)
		e.b = append(b, '"')
		e.n++
		return
	case e.n == 0:
		b = append(b, `{"groups":[`...)
	default:
		b = append(b, "]},"...)
	}
	e.n++
	e.last = *t
	b = append(b, `{"jobType":`...)
	b = appendJSONString(b, t.JobType)
	b = append(b, `,"queue":`...)
	b = appendJSONString(b, t.Queue)
	b = append(b, `,"from":`...)
	b = appendJSONString(b, string(t.From))
	b = append(b, `,"to":`...)
	b = appendJSONString(b, string(t.To))
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(t.Attempt), 10)
	b = append(b, `,"jobIds":["`...)
	b = jsonappend.UUID(b, t.JobID)
	e.b = append(b, '"')
}

// JSON ends the encoding and returns it; the encoder is done with.
func (e *StateChangedEncoder) JSON() []byte {
	if e.n == 0 {
		return append(e.b, `{"groups":[]}`...)
	}
	return append(e.b, "]}]}"...)
}

func sameGroup(a, b *Transition) bool {
	return a.JobType == b.JobType && a.Queue == b.Queue && a.From == b.From && a.To == b.To && a.Attempt == b.Attempt
}

// idSize is the length of a job id in a group: a comma and a quoted UUID.
const idSize = 1 + 36 + 2

// groupSize is about the length of a group of one, t, and its comma: at
// least it, and at most a byte more, for strings that need no escaping and
// attempts below 100.
func groupSize(t *Transition) int {
	return len(`{"jobType":"","queue":"","from":"","to":"","attempt":99,"jobIds":[""]},`) +
		36 + len(t.JobType) + len(t.Queue) + len(t.From) + len(t.To)
}

// sizeHint is about the length of d's encoding: at least it, and at most
// a byte more per group and one, for strings that need no escaping and
// attempts below 100.
func (d StateChangedData) sizeHint() int {
	n := len(`{"groups":[]}`)
	for i := range d.Transitions {
		t := &d.Transitions[i]
		if i > 0 && sameGroup(&d.Transitions[i-1], t) {
			n += idSize
		} else {
			n += groupSize(t)
		}
	}
	return n
}

// appendJSONString appends s as a JSON string the way encoding/json writes
// it: printable ASCII other than the quote, the backslash and the HTML
// characters as it is, anything else through encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
