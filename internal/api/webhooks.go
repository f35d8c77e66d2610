package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// Limits of the webhooks API.
const (
	deliveryLimitDefault = 50
	deliveryLimitMax     = 500
)

func (s *Server) webhookRoutes() []route {
	return []route{
		{Method: "POST", Path: "/v1/webhooks", Perm: permAdmin, Handler: endpoint(s, s.createWebhook)},
		{Method: "GET", Path: "/v1/webhooks", Perm: permAdmin, Handler: endpoint(s, s.listWebhooks)},
		{Method: "GET", Path: "/v1/webhooks/{webhookId}", Perm: permAdmin, Handler: endpoint(s, s.getWebhook)},
		{Method: "DELETE", Path: "/v1/webhooks/{webhookId}", Perm: permAdmin, Handler: endpoint(s, s.deleteWebhook)},
		{Method: "GET", Path: "/v1/webhooks/{webhookId}/deliveries", Perm: permAdmin, Query: []string{"status", "limit"}, Handler: endpoint(s, s.listDeliveries)},
		{Method: "POST", Path: "/v1/webhooks/{webhookId}/deliveries/{deliveryId}/redeliver", Perm: permAdmin, Handler: endpoint(s, s.redeliver)},
	}
}

// webhookRequest is the body of POST /v1/webhooks.
type webhookRequest struct {
	URL        string   `json:"url"`
	EventTypes []string `json:"eventTypes"`
	Secret     string   `json:"secret"`
}

func (req *webhookRequest) params() docket.WebhookCreateParams {
	return docket.WebhookCreateParams{URL: req.URL, EventTypes: req.EventTypes, Secret: req.Secret}
}

// Validate implements Validator; the URL's host is checked by Create.
func (req *webhookRequest) Validate() error {
	p := req.params()
	return p.Validate()
}

// webhookView is a subscription as the API shows it: never its secret.
type webhookView struct {
	ID         uuid.UUID `json:"id"`
	URL        string    `json:"url"`
	EventTypes []string  `json:"eventTypes"`
	CreatedAt  time.Time `json:"createdAt"`
}

func webhookViewOf(w *docket.Webhook) *webhookView {
	return &webhookView{ID: w.ID, URL: w.URL, EventTypes: w.EventTypes, CreatedAt: w.CreatedAt.UTC()}
}

type webhooksResponse struct {
	Items []*webhookView `json:"items"`
}

// deliveryView is one event for one subscription and how sending it went.
type deliveryView struct {
	ID        uuid.UUID `json:"id"`
	EventID   string    `json:"eventId"`
	EventType string    `json:"eventType"`
	// Status: PENDING (due at nextAttemptAt), DELIVERED or DEAD.
	Status         docket.WebhookDeliveryState `json:"status"`
	Attempts       int                         `json:"attempts"`
	LastStatusCode *int                        `json:"lastStatusCode,omitempty"`
	LastError      string                      `json:"lastError,omitempty"`
	NextAttemptAt  *time.Time                  `json:"nextAttemptAt,omitempty"`
	CreatedAt      time.Time                   `json:"createdAt"`
	UpdatedAt      time.Time                   `json:"updatedAt"`
	LastAttemptAt  *time.Time                  `json:"lastAttemptAt,omitempty"`
	FinishedAt     *time.Time                  `json:"finishedAt,omitempty"`
	// Event is the body every attempt POSTs: the event envelope.
	Event json.RawMessage `json:"event"`
}

func deliveryViewOf(d *docket.WebhookDelivery) *deliveryView {
	v := &deliveryView{
		ID: d.ID, EventID: d.EventID, EventType: d.EventType, Status: d.State, Attempts: d.Attempts,
		LastError: d.LastError, CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(), Event: d.Payload,
	}
	timePtr := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	if d.LastStatusCode != 0 {
		code := d.LastStatusCode
		v.LastStatusCode = &code
	}
	if d.State == docket.WebhookDeliveryPending {
		v.NextAttemptAt = timePtr(d.NextAttemptAt)
	}
	v.LastAttemptAt, v.FinishedAt = timePtr(d.LastAttemptAt), timePtr(d.FinishedAt)
	return v
}

type deliveriesResponse struct {
	Items []*deliveryView `json:"items"`
}

// webhooks is the configured service, or a 503 when there is none.
func (s *Server) webhooks() (*docket.Webhooks, error) {
	if s.cfg.Webhooks == nil {
		return nil, problem(http.StatusServiceUnavailable, "unavailable", "Service unavailable",
			"webhooks are not available on this server")
	}
	return s.cfg.Webhooks, nil
}

// webhookProblem names what was not found; other errors map as usual
// (a *docket.ValidationError names the field).
func webhookProblem(err error) error {
	if errors.Is(err, docket.ErrNotFound) {
		return notFound("no such webhook")
	}
	return err
}

func pathUUID(r *http.Request, name string) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue(name))
	if err != nil {
		return uuid.Nil, invalidField(name, "must be a UUID")
	}
	return id, nil
}

// createWebhook: POST /v1/webhooks.
func (s *Server) createWebhook(ctx context.Context, _ *http.Request, req *webhookRequest) (int, *webhookView, error) {
	svc, err := s.webhooks()
	if err != nil {
		return 0, nil, err
	}
	w, err := svc.Create(ctx, req.params())
	if err != nil {
		return 0, nil, webhookProblem(err)
	}
	return http.StatusCreated, webhookViewOf(w), nil
}

// listWebhooks: GET /v1/webhooks, oldest first.
func (s *Server) listWebhooks(ctx context.Context, r *http.Request, _ *Empty) (int, *webhooksResponse, error) {
	svc, err := s.webhooks()
	if err != nil {
		return 0, nil, err
	}
	ws, err := svc.List(ctx)
	if err != nil {
		return 0, nil, err
	}
	out := &webhooksResponse{Items: make([]*webhookView, len(ws))}
	for i, w := range ws {
		out.Items[i] = webhookViewOf(w)
	}
	return http.StatusOK, out, nil
}

// getWebhook: GET /v1/webhooks/{webhookId}.
func (s *Server) getWebhook(ctx context.Context, r *http.Request, _ *Empty) (int, *webhookView, error) {
	svc, err := s.webhooks()
	if err != nil {
		return 0, nil, err
	}
	id, err := pathUUID(r, "webhookId")
	if err != nil {
		return 0, nil, err
	}
	w, err := svc.Get(ctx, id)
	if err != nil {
		return 0, nil, webhookProblem(err)
	}
	return http.StatusOK, webhookViewOf(w), nil
}

// deleteWebhook: DELETE /v1/webhooks/{webhookId}, with its deliveries.
func (s *Server) deleteWebhook(ctx context.Context, r *http.Request, _ *Empty) (int, *Empty, error) {
	svc, err := s.webhooks()
	if err != nil {
		return 0, nil, err
	}
	id, err := pathUUID(r, "webhookId")
	if err != nil {
		return 0, nil, err
	}
	if err := svc.Delete(ctx, id); err != nil {
		return 0, nil, webhookProblem(err)
	}
	return http.StatusNoContent, nil, nil
}

// listDeliveries: GET /v1/webhooks/{webhookId}/deliveries?status=&limit=,
// newest event first.
func (s *Server) listDeliveries(ctx context.Context, r *http.Request, _ *Empty) (int, *deliveriesResponse, error) {
	q, pending := query(r)
	id, err := pathUUID(r, "webhookId")
	errs := []error{queryErrors(pending), err}
	limit := deliveryLimitDefault
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > deliveryLimitMax {
			errs = append(errs, invalidField("limit", "must be an integer from 1 to "+strconv.Itoa(deliveryLimitMax)))
		}
		limit = n
	}
	state := docket.WebhookDeliveryState(q.Get("status"))
	switch state {
	case "", docket.WebhookDeliveryPending, docket.WebhookDeliveryDelivered, docket.WebhookDeliveryDead:
	default:
		errs = append(errs, invalidField("status", "must be PENDING, DELIVERED or DEAD"))
	}
	if err := errors.Join(errs...); err != nil {
		return 0, nil, err
	}
	svc, err := s.webhooks()
	if err != nil {
		return 0, nil, err
	}
	ds, err := svc.Deliveries(ctx, id, docket.WebhookDeliveriesParams{State: state, Limit: limit})
	if err != nil {
		return 0, nil, webhookProblem(err)
	}
	out := &deliveriesResponse{Items: make([]*deliveryView, len(ds))}
	for i, d := range ds {
		out.Items[i] = deliveryViewOf(d)
	}
	return http.StatusOK, out, nil
}

// redeliver: POST /v1/webhooks/{webhookId}/deliveries/{deliveryId}/redeliver
// puts a DELIVERED or DEAD delivery back in line (attempts reset); a
// PENDING one is answered as it is.
func (s *Server) redeliver(ctx context.Context, r *http.Request, _ *Empty) (int, *deliveryView, error) {
	svc, err := s.webhooks()
	if err != nil {
		return 0, nil, err
	}
	id, err := pathUUID(r, "webhookId")
	if err != nil {
		return 0, nil, err
	}
	deliveryID, err := pathUUID(r, "deliveryId")
	if err != nil {
		return 0, nil, err
	}
	d, err := svc.Redeliver(ctx, id, deliveryID)
	if errors.Is(err, docket.ErrNotFound) {
		return 0, nil, notFound("no such delivery of this webhook")
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, deliveryViewOf(d), nil
}
