package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// Webhook deliveries on the dead letters page: for admin keys (as the
// API's webhook endpoints), the DEAD deliveries of every webhook — out of
// attempts — with a redelivery of the ticked ones
// (POST /dead/deliveries/retry, Webhooks.Redeliver: due now, attempts
// reset). Shown when the dashboard has the webhook service
// (Config.Webhooks; docket serve gives its own).

// deadPerWebhook caps the DEAD deliveries the page reads per webhook.
const deadPerWebhook = 20

// deadDelivery is a DEAD delivery with its webhook.
type deadDelivery struct {
	Webhook *docket.Webhook
	*docket.WebhookDelivery
}

// deadDeliveries reads the newest deadPerWebhook DEAD deliveries of each
// webhook; more reports that some webhook has more.
func (h *Handler) deadDeliveries(ctx context.Context) (out []deadDelivery, more bool, err error) {
	hooks, err := h.cfg.Webhooks.List(ctx)
	if err != nil {
		return nil, false, err
	}
	for _, hook := range hooks {
		ds, err := h.cfg.Webhooks.Deliveries(ctx, hook.ID, docket.WebhookDeliveriesParams{State: docket.WebhookDeliveryDead, Limit: deadPerWebhook + 1})
		if errors.Is(err, docket.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, false, err
		}
		if len(ds) > deadPerWebhook {
			ds, more = ds[:deadPerWebhook], true
		}
		for _, d := range ds {
			out = append(out, deadDelivery{Webhook: hook, WebhookDelivery: d})
		}
	}
	return out, more, nil
}

// deliveryRef is a delivery's value in the page's form.
func deliveryRef(d deadDelivery) string { return d.Webhook.ID.String() + "/" + d.ID.String() }

// parseDeliveryRefs reads the ticked deliveries ("<webhook id>/<delivery
// id>"), at most bulkMax; every problem names the field.
func parseDeliveryRefs(form url.Values) ([][2]uuid.UUID, []string) {
	vals := form["delivery"]
	if len(vals) == 0 {
		return nil, []string{"delivery: tick at least one delivery"}
	}
	if len(vals) > bulkMax {
		return nil, []string{"delivery: at most " + strconv.Itoa(bulkMax) + " at once"}
	}
	var out [][2]uuid.UUID
	for _, v := range vals {
		a, b, ok := strings.Cut(v, "/")
		hook, err1 := uuid.Parse(a)
		id, err2 := uuid.Parse(b)
		if !ok || err1 != nil || err2 != nil || len(a) != 36 || len(b) != 36 {
			return nil, []string{"delivery: not a delivery of this page: " + strconv.Quote(v)}
		}
		out = append(out, [2]uuid.UUID{hook, id})
	}
	return out, nil
}

// deadDeliveriesRetry redelivers the ticked deliveries (admin).
func (h *Handler) deadDeliveriesRetry(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Webhooks == nil {
		h.renderError(w, r, http.StatusServiceUnavailable, "Webhooks are not available on this server.")
		return
	}
	refs, errs := parseDeliveryRefs(r.PostForm)
	if errs != nil {
		d, p := deadQuery(url.Values{})
		d.Errors = errs
		h.showDeadStatus(w, r, http.StatusBadRequest, d, p)
		return
	}
	n := 0
	for _, ref := range refs {
		_, err := h.cfg.Webhooks.Redeliver(r.Context(), ref[0], ref[1])
		switch {
		case errors.Is(err, docket.ErrNotFound):
			// deleted meanwhile (pruned, or its webhook deleted)
		case err != nil:
			h.renderFailure(w, r, "Redelivering failed", err)
			return
		default:
			n++
		}
	}
	http.Redirect(w, r, "/dead?redelivered="+strconv.Itoa(n), http.StatusSeeOther)
}
