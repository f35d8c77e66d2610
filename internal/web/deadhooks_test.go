package web

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// hooksSetup is a dashboard given a running webhook service (one attempt
// per delivery) whose only subscription's endpoint always fails.
func hooksSetup(t *testing.T, backend testdb.Backend) (*bundle, *docket.Webhooks) {
	t.Helper()
	b := setup(t, backend)
	hooks, err := b.client.NewWebhooks(docket.WebhooksConfig{NodeID: "web-test", PollInterval: 20 * time.Millisecond, MaxAttempts: 1,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, hooks.Start(context.WithoutCancel(t.Context())))
	t.Cleanup(hooks.Stop)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down for maintenance", http.StatusBadGateway)
	}))
	t.Cleanup(down.Close)
	_, err = hooks.Create(context.Background(), docket.WebhookCreateParams{URL: down.URL + "/hook", EventTypes: []string{"job.state_changed"}, Secret: "0123456789abcdef0123"})
	require.NoError(t, err)
	b.handler, err = New(Config{Client: b.client, Now: b.clock.Now, Webhooks: hooks})
	require.NoError(t, err)
	b.server = httptest.NewServer(b.handler)
	t.Cleanup(b.server.Close)
	return b, hooks
}

// deliveries waits until the only webhook has at least n deliveries in
// state (any state when ""), and returns them.
func deliveries(t *testing.T, hooks *docket.Webhooks, state docket.WebhookDeliveryState, n int) []*docket.WebhookDelivery {
	t.Helper()
	ctx := context.Background()
	list, err := hooks.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ds, err := hooks.Deliveries(ctx, list[0].ID, docket.WebhookDeliveriesParams{State: state})
		require.NoError(t, err)
		if len(ds) >= n {
			return ds
		}
		require.True(t, time.Now().Before(deadline), "only %d %s deliveries within 30 s", len(ds), state)
		time.Sleep(20 * time.Millisecond) // polling the deliveries with a deadline
	}
}

// TestDeadDeliveries: admin keys see the webhooks' DEAD deliveries on the
// dead letters page and redeliver the ticked ones; other roles see none
// and get 403; a forged form 403, a malformed value 400, both changing
// nothing.
func TestDeadDeliveries(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b, hooks := hooksSetup(t, backend)
		insert(t, b.client, "email", "mail", `{}`)
		dead := deliveries(t, hooks, docket.WebhookDeliveryDead, 1)[0]
		ref := dead.WebhookID.String() + "/" + dead.ID.String()
		attemptedAt := func() time.Time {
			ds, err := hooks.Deliveries(ctx, dead.WebhookID, docket.WebhookDeliveriesParams{})
			require.NoError(t, err)
			for _, d := range ds {
				if d.ID == dead.ID {
					return d.UpdatedAt
				}
			}
			t.Fatalf("delivery %s is gone", dead.ID)
			return time.Time{}
		}
		before := attemptedAt()

		for _, role := range []docket.Role{docket.RoleViewer, docket.RoleProducer} {
			br := b.signIn(t, role)
			r := br.get(t, "/dead")
			require.Nil(t, find(r.Doc, "table", "dead-deliveries"), role)
			require.Equal(t, http.StatusForbidden, br.post(t, "/dead/deliveries/retry", url.Values{"delivery": {ref}}).Status, role)
		}
		admin := b.signIn(t, docket.RoleAdmin)
		r := admin.get(t, "/dead")
		table := text(find(r.Doc, "table", "dead-deliveries"))
		require.Contains(t, table, dead.EventID)
		require.Contains(t, table, "502")
		require.Contains(t, table, "down for maintenance")
		require.Equal(t, ref, attr(find(find(r.Doc, "table", "dead-deliveries"), "input", ""), "value"))

		require.Equal(t, http.StatusForbidden, admin.post(t, "/dead/deliveries/retry", url.Values{"delivery": {ref}, "csrf": {"forged"}}).Status)
		for _, bad := range []url.Values{{}, {"delivery": {"x/y"}}, {"delivery": {ref, dead.ID.String()}}} {
			r = admin.post(t, "/dead/deliveries/retry", bad)
			require.Equal(t, http.StatusBadRequest, r.Status, bad)
			require.Contains(t, text(find(r.Doc, "ul", "")), "delivery:")
		}
		require.Equal(t, before, attemptedAt(), "a refused form redelivers nothing")

		r = admin.post(t, "/dead/deliveries/retry", url.Values{"delivery": {ref, uuid.NewString() + "/" + uuid.NewString()}})
		require.Equal(t, http.StatusSeeOther, r.Status)
		r = admin.get(t, r.Header.Get("Location"))
		require.Contains(t, text(find(r.Doc, "p", "dead-message")), "1 webhook deliveries are due again")
		// Put back in line, it is attempted again (and dies again: the
		// endpoint still fails).
		deadline := time.Now().Add(30 * time.Second)
		for !attemptedAt().After(before) {
			require.True(t, time.Now().Before(deadline), "the delivery was not redelivered")
			time.Sleep(20 * time.Millisecond) // polling the delivery with a deadline
		}
	})
}
