package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

// This file opens the store (an exception to the public boundary,
// docs/dependencies.md): no public API writes a lastError unredacted.

// TestWebhookOldLastErrorRedacted: a delivery whose lastError was recorded
// before delivery errors were redacted (written here straight to the
// store, as net/http words a refused connection: the password as ***, the
// query token and a lone user name as given) is shown redacted by the API
// and the Go API (which the dashboard reads), the rest of the message
// kept.
func TestWebhookOldLastErrorRedacted(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		u := backend.URL(t)
		st := teststore.Open(t, u)
		var hooks *docket.Webhooks
		fixed := testdb.Backend{Name: backend.Name, URL: func(testing.TB) string { return u }}
		b := setup(t, fixed, func(c *Config) {
			// Not started: nothing but the test records an attempt.
			svc, err := c.Client.NewWebhooks(docket.WebhooksConfig{NodeID: "api-test", Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			c.Webhooks, hooks = svc, svc
		})
		r := b.do(t, docket.RoleAdmin, "POST", "/v1/webhooks",
			map[string]any{"url": "http://127.0.0.1:9/in?token=s3cret-token", "eventTypes": []string{"*"}, "secret": hookSecret})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		var hook webhookView
		r.JSON(t, &hook)
		require.Equal(t, http.StatusAccepted, b.do(t, docket.RoleProducer, "POST", "/v1/jobs", map[string]any{"jobType": "email"}).Status)

		now := time.Now()
		pending, err := st.WebhookOutboxListPending(ctx, &store.WebhookOutboxListPendingParams{Limit: 1})
		require.NoError(t, err)
		require.Len(t, pending, 1)
		_, err = st.WebhookFanOut(ctx, &store.WebhookFanOutParams{OutboxIDs: []int64{pending[0].ID}, Now: now,
			Deliveries: []*store.WebhookDeliveryInsertParams{{ID: uuid.Must(uuid.NewV7()), WebhookID: hook.ID,
				EventID: "old-1", EventType: "job.state_changed", OutboxID: pending[0].ID, Payload: json.RawMessage(`{}`)}}})
		require.NoError(t, err)
		claimed, err := st.WebhookDeliveryClaim(ctx, &store.WebhookDeliveryClaimParams{Now: now, Max: 1, PerWebhook: 1, LeaseUntil: now.Add(time.Minute)})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		const old = `Post "http://hooks:***@127.0.0.1:9/in?token=s3cret-token": dial tcp 127.0.0.1:9: connect: connection refused; retried Post "http://s3cret-user@127.0.0.1:9/in?token=s3cret-token&x"`
		ok, err := st.WebhookDeliveryFinish(ctx, &store.WebhookDeliveryFinishParams{ID: claimed[0].ID, Attempt: claimed[0].Attempts,
			State: store.DeliveryDead, Error: old, Now: now})
		require.NoError(t, err)
		require.True(t, ok)
		const shown = `Post "http://hooks:xxxxx@127.0.0.1:9/in?token=xxxxx": dial tcp 127.0.0.1:9: connect: connection refused; retried Post "http://xxxxx@127.0.0.1:9/in?token=xxxxx&xxxxx"`

		var list deliveriesResponse
		r = b.do(t, docket.RoleAdmin, "GET", "/v1/webhooks/"+hook.ID.String()+"/deliveries", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.NotContains(t, string(r.Body), "s3cret")
		r.JSON(t, &list)
		require.Len(t, list.Items, 1)
		require.Equal(t, shown, list.Items[0].LastError)
		ds, err := hooks.Deliveries(ctx, hook.ID, docket.WebhookDeliveriesParams{State: docket.WebhookDeliveryDead})
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, shown, ds[0].LastError)
	})
}
