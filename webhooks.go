package docket

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/webhook"
)

// Webhooks delivers committed events to HTTP endpoints: subscriptions,
// signed POSTs with retries, backoff, a dead state, redelivery and a
// circuit breaker per endpoint (docs/events.md, "Webhooks"). Its
// dispatcher and delivery worker run in one process at a time: the holder
// of the webhooks leadership, elected among the processes running
// Webhooks. Subscriptions can be managed from any process.
type Webhooks struct {
	svc *webhook.Service
}

// WebhooksConfig configures Webhooks; zero fields take the documented
// defaults.
type WebhooksConfig struct {
	// NodeID is this process's name in the webhooks leadership, unique
	// among the processes running webhooks; required (docket serve gives
	// its worker's, Worker.NodeID).
	NodeID string
	// LeaderTTL is the leadership term; default 15 s, at least 100 ms.
	LeaderTTL time.Duration
	// PollInterval: how often the leader looks for new events and due
	// deliveries; default 1 s.
	PollInterval time.Duration
	// Timeout of one delivery request; default 10 s.
	Timeout time.Duration
	// BackoffBase and BackoffMax: after a failed attempt n the next is due
	// after a delay uniform in [c/2, c], c = min(base × 2^(n-1), max).
	// Defaults 5 s and 1 h.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// MaxAttempts: a delivery that failed this many times is DEAD; default
	// 15.
	MaxAttempts int
	// BreakerFailures consecutive failures to one endpoint open its circuit
	// breaker for BreakerOpen: an attempt due meanwhile is counted as
	// failed without a request. Then one is tried; if it succeeds, the
	// deliveries that waited are sent at once, in event order. Defaults 5
	// and 30 s.
	BreakerFailures int
	BreakerOpen     time.Duration
	// AllowHosts are the targets allowed besides loopback: host names,
	// "*.domain" wildcards, IP addresses and CIDRs (CheckWebhookAllowHosts
	// checks a list). Default none.
	AllowHosts []string
	// AllowAny lifts the target limit (turns the SSRF guard off); default
	// false.
	AllowAny bool
	// Retention: DELIVERED and DEAD deliveries are deleted this long after
	// they finished; default 7 days.
	Retention time.Duration
	// Concurrency: how many endpoints are delivered to at once; default 16.
	Concurrency int
	// Logger and Now; default the client's.
	Logger *slog.Logger
	Now    func() time.Time
	// Resolver looks up host names, when subscribing and when dialing;
	// default net.DefaultResolver.
	Resolver WebhookResolver
	// OnBreakerChange, when set, is told of every breaker state change
	// ("closed", "open", "half-open") of an endpoint (its URL as shown:
	// password, lone user name, query values and fragment as "xxxxx").
	// Default none.
	OnBreakerChange func(endpoint, from, to string)
}

// WebhookResolver looks up the addresses of a host (*net.Resolver is one).
type WebhookResolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ WebhookResolver = (*net.Resolver)(nil)

// NewWebhooks makes the webhook service of c's database, with c's logger
// and clock unless cfg has its own. Start runs its delivery (while it
// leads); its subscription methods work without it.
func (c *Client) NewWebhooks(cfg WebhooksConfig) (*Webhooks, error) {
	if cfg.Logger == nil {
		cfg.Logger = c.cfg.Logger
	}
	if cfg.Now == nil {
		cfg.Now = c.cfg.Now
	}
	wc := webhook.Config{
		Store: c.store, NodeID: cfg.NodeID, LeaderTTL: cfg.LeaderTTL, PollInterval: cfg.PollInterval,
		Timeout: cfg.Timeout, BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax,
		MaxAttempts: cfg.MaxAttempts, BreakerFailures: cfg.BreakerFailures, BreakerOpen: cfg.BreakerOpen,
		AllowHosts: cfg.AllowHosts, AllowAny: cfg.AllowAny, Retention: cfg.Retention,
		Concurrency: cfg.Concurrency, Logger: cfg.Logger, Now: cfg.Now, OnBreakerChange: cfg.OnBreakerChange,
	}
	if cfg.Resolver != nil {
		wc.Resolver = cfg.Resolver
	}
	svc, err := webhook.New(wc)
	if err != nil {
		return nil, err
	}
	return &Webhooks{svc: svc}, nil
}

// CheckWebhookAllowHosts reports the first entry of an AllowHosts list
// that is not a host name, "*.domain", IP address or CIDR.
func CheckWebhookAllowHosts(hosts []string) error { return webhook.CheckAllowHosts(hosts) }

// VerifyWebhook checks a delivery from docket, for receivers written in
// Go: signature is the X-Docket-Signature header, timestamp the
// X-Docket-Timestamp header and body the raw request body.
func VerifyWebhook(secret, signature, timestamp string, body []byte) error {
	return webhook.Verify(secret, signature, timestamp, body)
}

// Start takes part in the webhooks leadership; while this process leads,
// it fans new events out to the subscriptions and delivers them.
func (w *Webhooks) Start(ctx context.Context) error { return w.svc.Start(ctx) }

// Stop stops delivering and gives up the leadership; safe to call twice.
func (w *Webhooks) Stop() { w.svc.Stop() }

// Leading reports whether this process holds the webhooks leadership.
func (w *Webhooks) Leading() bool { return w.svc.Leading() }

// Webhook is a subscription. Its secret is never read back, nor a
// password in its URL.
type Webhook struct {
	ID uuid.UUID
	// URL is where events are POSTed, with its password, a user name
	// alone, every query value and the fragment shown as "xxxxx"
	// (deliveries use it as given).
	URL        string
	EventTypes []string // event types, or "*" for all
	CreatedAt  time.Time
}

// WebhookEventTypes are the event types a subscription may name (or "*").
func WebhookEventTypes() []string { return append([]string(nil), webhook.EventTypes...) }

// WebhookCreateParams describe a new subscription.
type WebhookCreateParams struct {
	URL        string
	EventTypes []string // at least one of WebhookEventTypes, or "*"
	Secret     string   // the HMAC key of the signatures, 16..1024 characters
}

// Validate checks everything but whether the URL's host is an allowed
// target (Create checks that): a *ValidationError names each wrong field
// (several are joined).
func (p *WebhookCreateParams) Validate() error {
	cp := webhook.CreateParams{URL: p.URL, EventTypes: p.EventTypes, Secret: p.Secret}
	return webhookError(cp.Validate())
}

// Create validates and records a subscription; a *ValidationError names
// the wrong field.
func (w *Webhooks) Create(ctx context.Context, p WebhookCreateParams) (*Webhook, error) {
	h, err := w.svc.Create(ctx, webhook.CreateParams{URL: p.URL, EventTypes: p.EventTypes, Secret: p.Secret})
	if err != nil {
		return nil, webhookError(err)
	}
	return webhookOf(h), nil
}

// Get returns a subscription; ErrNotFound when there is none.
func (w *Webhooks) Get(ctx context.Context, id uuid.UUID) (*Webhook, error) {
	h, err := w.svc.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return webhookOf(h), nil
}

// List lists every subscription, oldest first.
func (w *Webhooks) List(ctx context.Context) ([]*Webhook, error) {
	hs, err := w.svc.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Webhook, len(hs))
	for i, h := range hs {
		out[i] = webhookOf(h)
	}
	return out, nil
}

// Delete deletes a subscription and its deliveries; ErrNotFound when there
// is none.
func (w *Webhooks) Delete(ctx context.Context, id uuid.UUID) error { return w.svc.Delete(ctx, id) }

// WebhookDeliveryState is where a delivery is.
type WebhookDeliveryState string

// Delivery states.
const (
	WebhookDeliveryPending   WebhookDeliveryState = WebhookDeliveryState(store.DeliveryPending)   // due at NextAttemptAt
	WebhookDeliveryDelivered WebhookDeliveryState = WebhookDeliveryState(store.DeliveryDelivered) // a 2xx answered
	WebhookDeliveryDead      WebhookDeliveryState = WebhookDeliveryState(store.DeliveryDead)      // out of attempts
)

// WebhookDelivery is one event for one subscription and the story of
// sending it.
type WebhookDelivery struct {
	ID        uuid.UUID
	WebhookID uuid.UUID
	EventID   string
	EventType string
	// Payload is the body every attempt POSTs: the event envelope.
	Payload        json.RawMessage
	State          WebhookDeliveryState
	Attempts       int
	LastStatusCode int    // 0: no HTTP answer (yet)
	LastError      string // "" after a success
	NextAttemptAt  time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	LastAttemptAt  time.Time // zero before the first attempt
	FinishedAt     time.Time // when it became DELIVERED or DEAD
}

// WebhookDeliveriesParams filter Deliveries.
type WebhookDeliveriesParams struct {
	State WebhookDeliveryState // "" for every state
	Limit int                  // 0 = no limit
}

// Deliveries lists a subscription's deliveries, newest event first;
// ErrNotFound when there is no such subscription.
func (w *Webhooks) Deliveries(ctx context.Context, id uuid.UUID, p WebhookDeliveriesParams) ([]*WebhookDelivery, error) {
	ds, err := w.svc.Deliveries(ctx, id, store.WebhookDeliveryState(p.State), p.Limit)
	if err != nil {
		return nil, err
	}
	out := make([]*WebhookDelivery, len(ds))
	for i, d := range ds {
		out[i] = deliveryOf(d)
	}
	return out, nil
}

// Redeliver puts a DELIVERED or DEAD delivery back in line, due now with
// its attempts reset; a PENDING one is returned as it is. ErrNotFound when
// the subscription has no such delivery.
func (w *Webhooks) Redeliver(ctx context.Context, id, deliveryID uuid.UUID) (*WebhookDelivery, error) {
	d, err := w.svc.Redeliver(ctx, id, deliveryID)
	if err != nil {
		return nil, err
	}
	return deliveryOf(d), nil
}

func webhookOf(h *store.Webhook) *Webhook {
	return &Webhook{ID: h.ID, URL: webhook.RedactURL(h.URL), EventTypes: h.EventTypes, CreatedAt: h.CreatedAt}
}

// deliveryOf is the Go API's view of a delivery: every read of one (the
// HTTP API and the dashboard too) goes through it, so a lastError stored
// before URLs were redacted in it is redacted here.
func deliveryOf(d *store.WebhookDelivery) *WebhookDelivery {
	return &WebhookDelivery{
		ID: d.ID, WebhookID: d.WebhookID, EventID: d.EventID, EventType: d.EventType, Payload: d.Payload,
		State: WebhookDeliveryState(d.State), Attempts: d.Attempts, LastStatusCode: d.LastStatusCode,
		LastError: webhook.RedactText(d.LastError), NextAttemptAt: d.NextAttemptAt, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
		LastAttemptAt: d.LastAttemptAt, FinishedAt: d.FinishedAt,
	}
}

// webhookError turns the service's validation errors, one or joined, into
// ValidationError.
func webhookError(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = webhookError(e)
		}
		return errors.Join(out...)
	}
	var verr *webhook.ValidationError
	if errors.As(err, &verr) {
		return &ValidationError{Field: verr.Field, Message: verr.Message}
	}
	return err
}
