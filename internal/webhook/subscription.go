package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// EventTypes are the event types a subscription may name (or "*"):
// every type written to the outbox, the crowd's and quality control's
// too (docs/events.md lists them).
var EventTypes = []string{
	job.EventStateChanged, job.EventProgress, flow.EventRunStateChanged, flow.EventStepStateChanged,
	crowd.EventJudgmentReceived, crowd.EventUnitFinalized, crowd.EventAssignmentExpired, crowd.EventPoolUpdated,
	quality.EventTestJudgmentEvaluated, quality.EventJudgmentCheckFailed,
	quality.EventContributorFlagged, quality.EventContributorUnflagged, quality.EventUnitResultChanged,
}

// Limits of a subscription.
const (
	SecretMinLen = 16
	secretMaxLen = 1024
	urlMaxLen    = 2048
)

// ValidationError names the field of a subscription that is wrong.
type ValidationError struct {
	Field   string
	Message string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Message }

// CreateParams describe a new subscription.
type CreateParams struct {
	URL        string
	EventTypes []string
	Secret     string
}

// Validate checks everything but the URL's host (Create checks that):
// every wrong field is named, a *ValidationError each (joined).
func (p *CreateParams) Validate() error {
	var errs []error
	switch {
	case p.URL == "":
		errs = append(errs, &ValidationError{"url", "is required"})
	case len(p.URL) > urlMaxLen:
		errs = append(errs, &ValidationError{"url", fmt.Sprintf("must be at most %d characters", urlMaxLen)})
	default:
		if _, err := parseTarget(p.URL); err != nil {
			errs = append(errs, &ValidationError{"url", err.Error()})
		}
	}
	if len(p.EventTypes) == 0 {
		errs = append(errs, &ValidationError{"eventTypes", `must list at least one event type, or "*" for all`})
	}
	for i, t := range p.EventTypes {
		if t != "*" && !slices.Contains(EventTypes, t) {
			errs = append(errs, &ValidationError{fmt.Sprintf("eventTypes[%d]", i), fmt.Sprintf("%q is not an event type; known: %v or \"*\"", t, EventTypes)})
		}
	}
	switch {
	case len(p.Secret) < SecretMinLen:
		errs = append(errs, &ValidationError{"secret", fmt.Sprintf("must be at least %d characters (it has %d)", SecretMinLen, len(p.Secret))})
	case len(p.Secret) > secretMaxLen:
		errs = append(errs, &ValidationError{"secret", fmt.Sprintf("must be at most %d characters", secretMaxLen)})
	case !store.TextStorable(p.Secret):
		errs = append(errs, &ValidationError{"secret", store.TextMessage})
	}
	if len(errs) == 1 {
		return errs[0] // a *ValidationError, as before several were named
	}
	return errors.Join(errs...)
}

// Create validates and records a subscription. The URL's host must be an
// allowed target now (see guard); a *ValidationError says which field is
// wrong.
func (s *Service) Create(ctx context.Context, p CreateParams) (*store.Webhook, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := s.guard.checkURL(ctx, p.URL); err != nil {
		return nil, &ValidationError{"url", err.Error()}
	}
	types := slices.Compact(slices.Sorted(slices.Values(p.EventTypes)))
	if slices.Contains(types, "*") {
		types = []string{"*"}
	}
	w, err := s.store.WebhookInsert(ctx, &store.WebhookInsertParams{
		ID: uuid.Must(uuid.NewV7()), URL: p.URL, EventTypes: types, Secret: p.Secret, Now: s.cfg.Now(),
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("webhook subscribed", attrWebhook, w.ID.String(), attrEndpoint, RedactURL(w.URL))
	return w, nil
}

// Get returns a subscription; store.ErrNotFound when there is none.
func (s *Service) Get(ctx context.Context, id uuid.UUID) (*store.Webhook, error) {
	return s.store.WebhookGet(ctx, id)
}

// List lists every subscription, oldest first.
func (s *Service) List(ctx context.Context) ([]*store.Webhook, error) {
	return s.store.WebhookList(ctx)
}

// Delete deletes a subscription and its deliveries; store.ErrNotFound when
// there is none.
func (s *Service) Delete(ctx context.Context, id uuid.UUID) error {
	if err := s.store.WebhookDelete(ctx, id); err != nil {
		return err
	}
	s.log.Info("webhook deleted", attrWebhook, id.String())
	return nil
}

// Deliveries lists a subscription's deliveries, newest event first, of one
// state ("" for all); store.ErrNotFound when there is no such subscription.
func (s *Service) Deliveries(ctx context.Context, id uuid.UUID, state store.WebhookDeliveryState, limit int) ([]*store.WebhookDelivery, error) {
	if _, err := s.store.WebhookGet(ctx, id); err != nil {
		return nil, err
	}
	return s.store.WebhookDeliveryList(ctx, &store.WebhookDeliveryListParams{WebhookID: id, State: state, Limit: limit})
}

// Redeliver puts a DELIVERED or DEAD delivery back in line, due now with
// its attempts reset; a PENDING one is returned as it is.
// store.ErrNotFound when the subscription has no such delivery.
func (s *Service) Redeliver(ctx context.Context, id, deliveryID uuid.UUID) (*store.WebhookDelivery, error) {
	d, err := s.store.WebhookDeliveryRedeliver(ctx, &store.WebhookDeliveryRedeliverParams{
		WebhookID: id, ID: deliveryID, Now: s.cfg.Now(),
	})
	if err != nil {
		return nil, err
	}
	s.notify()
	return d, nil
}

// redacted replaces what RedactURL hides.
const redacted = "xxxxx"

// RedactURL is what docket shows of a subscription's URL (in the API, the
// Go API, logs, delivery errors and breaker changes): the scheme, host,
// port and path as given, and every place a credential is put in a URL
// replaced by "xxxxx": the password of its user information, the user
// name when it stands alone (https://TOKEN@host/), the value of every
// query parameter (names are kept: ?token=xxxxx&channel=xxxxx; a
// parameter with no "=" is replaced whole) and the fragment. Deliveries
// use the URL as given. A URL that does not parse (Validate refuses those)
// is shown as "".
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redacted)
		} else if u.User.Username() != "" {
			u.User = url.User(redacted)
		}
	}
	if u.Opaque != "" {
		u.Opaque = redacted
	}
	u.RawQuery = redactQuery(u.RawQuery)
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = redacted, ""
	}
	return u.String()
}

// redactQuery replaces the value of each parameter of a raw query, and a
// parameter without a value whole.
func redactQuery(q string) string {
	if q == "" {
		return ""
	}
	parts := strings.Split(q, "&")
	for i, p := range parts {
		name, value, ok := strings.Cut(p, "=")
		switch {
		case p == "":
		case !ok:
			parts[i] = redacted
		case value != "":
			parts[i] = name + "=" + redacted
		}
	}
	return strings.Join(parts, "&")
}

// redactError is err with the URL a request error names (net/http's
// *url.Error, which hides the password only) shown by RedactURL.
func redactError(err error, raw string) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		shown := *ue
		shown.URL = RedactURL(raw)
		return &shown
	}
	return err
}

// urlInText is what RedactText takes for a URL: a scheme, "://", and
// everything up to a space, a quote, a backslash or an angle bracket (a
// delivery error quotes its URL with %q).
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>\\]+`)

// RedactText is s with every URL in it shown as RedactURL shows it, or as
// "xxxxx" when it does not parse. A delivery's lastError is recorded with
// the URL redacted (redactError), but rows recorded before that have the
// URL as net/http shows it (the password as ***, the query and a lone
// user name as given): whatever shows a stored lastError passes it
// through RedactText. An error recorded redacted is unchanged, RedactURL
// being idempotent.
func RedactText(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlInText.ReplaceAllStringFunc(s, func(u string) string {
		if shown := RedactURL(u); shown != "" {
			return shown
		}
		return redacted
	})
}

// matches reports whether w subscribes to events of type t.
func matches(w *store.Webhook, t string) bool {
	return slices.Contains(w.EventTypes, "*") || slices.Contains(w.EventTypes, t)
}

// IsNotFound reports whether err means there is no such subscription or
// delivery.
func IsNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
