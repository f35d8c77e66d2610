// Package events carries what the store commits to the outside: the outbox
// relay publishes to NATS JetStream, durable consumers record what they
// handled in an inbox, and SSE and webhooks serve the same events.
package events

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// Envelope is one event as every outward surface shows it.
type Envelope struct {
	// ID is "<outbox row id>-<index>": one outbox row describes every job
	// a statement changed, and fans out into one event per job. It is the
	// dedupe key downstream (Nats-Msg-Id, inbox key, X-Docket-Event-Id,
	// SSE id).
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	OccurredAt time.Time       `json:"occurredAt"`
	Subject    string          `json:"subject"` // what it is about, e.g. "jobs/<job id>"
	Data       json.RawMessage `json:"data"`
}

// EventID names the index-th event of outbox row outboxID.
func EventID(outboxID int64, index int) string {
	return strconv.FormatInt(outboxID, 10) + "-" + strconv.Itoa(index)
}

// ParseEventID splits an event id into its outbox row id and index.
func ParseEventID(s string) (outboxID int64, index int, err error) {
	a, b, ok := strings.Cut(s, "-")
	if ok {
		outboxID, err = strconv.ParseInt(a, 10, 64)
		if err == nil {
			index, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || outboxID < 1 || index < 0 {
		return 0, 0, fmt.Errorf("event id %q: must be <outbox id>-<index>", s)
	}
	return outboxID, index, nil
}

// NATSSubject is the JetStream subject of an event type: docket.<type>.
func NATSSubject(eventType string) string { return "docket." + eventType }

// JobSubject is the Envelope.Subject of a job's events.
func JobSubject(id fmt.Stringer) string { return "jobs/" + id.String() }

// RunSubject is the Envelope.Subject of a workflow run's events
// (run.state_changed and step.state_changed).
func RunSubject(id fmt.Stringer) string { return "runs/" + id.String() }

// Expand fans one outbox row out into its events, in order. A
// job.state_changed row gives one event per transition with data
// {jobId, jobType, queue, from, to, attempt}; a job.progress row gives one.
// A run.state_changed or step.state_changed row gives one event per
// transition, with the data of flow.RunTransition or flow.StepTransition
// and the run's subject. Unknown types pass through as one event with the
// row's data.
func Expand(row *store.OutboxEvent) ([]Envelope, error) {
	switch row.Type {
	case job.EventStateChanged:
		var d job.StateChangedData
		if err := json.Unmarshal(row.Data, &d); err != nil {
			return nil, fmt.Errorf("decode outbox row %d: %w", row.ID, err)
		}
		out := make([]Envelope, len(d.Transitions))
		for i, tr := range d.Transitions {
			data, err := json.Marshal(tr)
			if err != nil {
				return nil, err
			}
			out[i] = Envelope{ID: EventID(row.ID, i), Type: row.Type, OccurredAt: row.CreatedAt, Subject: JobSubject(tr.JobID), Data: data}
		}
		return out, nil
	case job.EventProgress:
		var d job.ProgressData
		if err := json.Unmarshal(row.Data, &d); err != nil {
			return nil, fmt.Errorf("decode outbox row %d: %w", row.ID, err)
		}
		return []Envelope{{ID: EventID(row.ID, 0), Type: row.Type, OccurredAt: row.CreatedAt, Subject: JobSubject(d.JobID), Data: row.Data}}, nil
	case flow.EventRunStateChanged:
		var d flow.RunStateChangedData
		if err := json.Unmarshal(row.Data, &d); err != nil {
			return nil, fmt.Errorf("decode outbox row %d: %w", row.ID, err)
		}
		return perTransition(row, d.Transitions, func(tr flow.RunTransition) fmt.Stringer { return tr.RunID })
	case flow.EventStepStateChanged:
		var d flow.StepStateChangedData
		if err := json.Unmarshal(row.Data, &d); err != nil {
			return nil, fmt.Errorf("decode outbox row %d: %w", row.ID, err)
		}
		return perTransition(row, d.Transitions, func(tr flow.StepTransition) fmt.Stringer { return tr.RunID })
	}
	return []Envelope{{ID: EventID(row.ID, 0), Type: row.Type, OccurredAt: row.CreatedAt, Data: row.Data}}, nil
}

// perTransition is one event per transition of a run or step row, about
// the transition's run.
func perTransition[T any](row *store.OutboxEvent, trs []T, runOf func(T) fmt.Stringer) ([]Envelope, error) {
	out := make([]Envelope, len(trs))
	for i, tr := range trs {
		data, err := json.Marshal(tr)
		if err != nil {
			return nil, err
		}
		out[i] = Envelope{ID: EventID(row.ID, i), Type: row.Type, OccurredAt: row.CreatedAt, Subject: RunSubject(runOf(tr)), Data: data}
	}
	return out, nil
}
