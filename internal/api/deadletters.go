package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/docket-run/docket"
)

// Limits of the dead-letters API.
const (
	deadLetterLimitDefault = 100
	deadLetterLimitMax     = 1000
)

// DeadLetters is what the dead-letter endpoints use; *docket.Client has
// it. Config.DeadLetters gives it to the server.
type DeadLetters interface {
	DeadLetterList(ctx context.Context, p docket.DeadLetterListParams) ([]*docket.DeadLetter, error)
	DeadLetterRetry(ctx context.Context, consumer, eventID string) (*docket.DeadLetter, error)
}

func (s *Server) deadLetterRoutes() []route {
	return []route{
		{Method: "GET", Path: "/v1/dead-letters", Perm: permAdmin, Query: []string{"consumer", "limit", "cursor"}, Handler: endpoint(s, s.listDeadLetters)},
		{Method: "POST", Path: "/v1/dead-letters/{consumer}/{eventId}/retry", Perm: permAdmin, Handler: endpoint(s, s.retryDeadLetter)},
	}
}

// deadLetterView is a dead letter as the API shows it.
type deadLetterView struct {
	Consumer   string `json:"consumer"`
	EventID    string `json:"eventId"`
	Type       string `json:"type"`
	Deliveries int    `json:"deliveries"`
	LastError  string `json:"lastError"`
	// Event is the envelope as delivered.
	Event     json.RawMessage `json:"event"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
	// RetryRequestedAt: a retry was asked for and the consumer has not
	// taken it up yet.
	RetryRequestedAt *time.Time `json:"retryRequestedAt,omitempty"`
}

func deadLetterViewOf(d *docket.DeadLetter) deadLetterView {
	v := deadLetterView{
		Consumer: d.Consumer, EventID: d.EventID, Type: d.EventType, Deliveries: d.Deliveries,
		LastError: d.LastError, Event: d.Envelope, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
	}
	if !d.RetryRequestedAt.IsZero() {
		t := d.RetryRequestedAt
		v.RetryRequestedAt = &t
	}
	return v
}

type deadLettersResponse struct {
	Items []deadLetterView `json:"items"`
	// NextCursor fetches the next page; null on the last one.
	NextCursor *string `json:"nextCursor"`
}

// deadLetters is the configured store, or a 503 when there is none.
func (s *Server) deadLetters() (DeadLetters, error) {
	if s.cfg.DeadLetters == nil {
		return nil, problem(http.StatusServiceUnavailable, "unavailable", "Service unavailable",
			"dead letters are not available on this server")
	}
	return s.cfg.DeadLetters, nil
}

// listDeadLetters: GET /v1/dead-letters?consumer=&limit=&cursor=, oldest
// first (ties by consumer, then event id). The cursor is the sort key of
// the last dead letter of the previous page: a dead letter's createdAt
// never changes, so one recorded meanwhile shows on a later page and none
// shows twice.
func (s *Server) listDeadLetters(ctx context.Context, r *http.Request, _ *Empty) (int, *deadLettersResponse, error) {
	q, errs := query(r)
	limit := deadLetterLimitDefault
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > deadLetterLimitMax {
			errs = append(errs, FieldError{Field: "limit", Message: "must be an integer from 1 to " + strconv.Itoa(deadLetterLimitMax)})
		}
		limit = n
	}
	var after *docket.DeadLetter
	if q.Has("cursor") {
		var ok bool
		if after, ok = docket.ParseDeadLetterCursor(q.Get("cursor")); !ok {
			errs = append(errs, FieldError{Field: "cursor", Message: "is not a cursor this server returned"})
		}
	}
	if err := queryErrors(errs); err != nil {
		return 0, nil, err
	}
	st, err := s.deadLetters()
	if err != nil {
		return 0, nil, err
	}
	// One more than the page tells whether there is a next page.
	ds, err := st.DeadLetterList(ctx, docket.DeadLetterListParams{Consumer: q.Get("consumer"), Limit: limit + 1, After: after})
	if err != nil {
		return 0, nil, err
	}
	resp := &deadLettersResponse{}
	if len(ds) > limit {
		ds = ds[:limit]
		next := docket.DeadLetterCursor(ds[limit-1])
		resp.NextCursor = &next
	}
	resp.Items = make([]deadLetterView, len(ds))
	for i, d := range ds {
		resp.Items[i] = deadLetterViewOf(d)
	}
	return http.StatusOK, resp, nil
}

// retryDeadLetter: POST /v1/dead-letters/{consumer}/{eventId}/retry. The
// API process may not run the consumer's handler, so it records a retry
// request; the consumer claims it within its RetryPollInterval and handles
// the event again in its inbox transaction (success removes the dead
// letter, failure counts one more delivery). 202 with the dead letter.
func (s *Server) retryDeadLetter(ctx context.Context, r *http.Request, _ *Empty) (int, *deadLetterView, error) {
	st, err := s.deadLetters()
	if err != nil {
		return 0, nil, err
	}
	consumer, eventID := r.PathValue("consumer"), r.PathValue("eventId")
	d, err := st.DeadLetterRetry(ctx, consumer, eventID)
	if errors.Is(err, docket.ErrNotFound) {
		return 0, nil, notFound("consumer " + strconv.Quote(consumer) + " has no dead letter " + strconv.Quote(eventID))
	}
	if err != nil {
		return 0, nil, err
	}
	v := deadLetterViewOf(d)
	return http.StatusAccepted, &v, nil
}
