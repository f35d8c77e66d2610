package webhook

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// The breakers of deleted subscriptions' URLs are evicted: the map no
// longer grows with every URL ever subscribed to.
func TestBreakersOfDeletedWebhooksEvicted(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		const hooks = 20
		b := setup(t, backend)
		rc := newReceiver(t, nil)
		var ws []*store.Webhook
		for i := range hooks {
			ws = append(ws, b.subscribe(t, fmt.Sprintf("%s/%d", rc.srv.URL, i)))
		}
		b.start(t)
		b.insertJobs(t, 1)
		for _, w := range ws {
			b.waitStates(t, w, 1, store.DeliveryDelivered)
		}
		require.Equal(t, hooks, b.svc.breakers.len(), "one breaker per URL delivered to")
		for _, w := range ws[1:] {
			require.NoError(t, b.svc.Delete(b.ctx, w.ID))
		}
		waitFor(t, "the deleted URLs' breakers to go", func() bool { return b.svc.breakers.len() == 1 })
	})
}

// retain keeps one breaker per subscribed URL at most; of those, an idle
// one in its initial state goes (a new one would be the same), a failing
// or open one stays however idle.
func TestBreakersRetain(t *testing.T) {
	t.Parallel()
	cfg := Config{BreakerFailures: 2, BreakerOpen: time.Hour}.WithDefaults()
	b := newBreakers(cfg, slog.New(slog.DiscardHandler))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.now = func() time.Time { return now }
	fail := func(url string) {
		_, _ = b.get(url).Execute(func() (result, error) { return result{}, errors.New("down") })
	}
	ok := func(url string) {
		_, _ = b.get(url).Execute(func() (result, error) { return result{}, nil })
	}
	hook := func(url string) *store.Webhook { return &store.Webhook{URL: url} }
	subscribed := []*store.Webhook{hook("http://h/ok"), hook("http://h/failing"), hook("http://h/open")}

	ok("http://h/ok")
	fail("http://h/failing")
	fail("http://h/open")
	fail("http://h/open")
	ok("http://h/gone")
	require.True(t, b.open("http://h/open"))
	require.Equal(t, 4, b.len())

	b.retain(subscribed)
	require.Equal(t, 3, b.len(), "no subscription uses http://h/gone")

	now = now.Add(b.idle - time.Second)
	b.retain(subscribed)
	require.Equal(t, 3, b.len(), "not idle long enough")

	now = now.Add(time.Second)
	b.retain(subscribed)
	require.Equal(t, 2, b.len(), "the idle closed one with no failure went")
	require.True(t, b.open("http://h/open"), "an open one stays")

	b.retain(subscribed[:1])
	require.Zero(t, b.len(), "unsubscribed, whatever their state")

	// A breaker that stays in use is never idle.
	for range 3 {
		ok("http://h/ok")
		now = now.Add(b.idle / 2)
		b.retain(subscribed)
		require.Equal(t, 1, b.len())
	}
}
