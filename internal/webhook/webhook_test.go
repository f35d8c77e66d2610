package webhook

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/docket-run/docket/internal/events"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testSecret is the subscriptions' secret.
const testSecret = "s3cret-s3cret-s3cret"

// bundle is one migrated store, a webhook service on it, and a context.
type bundle struct {
	ctx context.Context
	st  store.Store
	url string // the database's
	svc *Service
}

// openStore opens a fresh, migrated store of backend at url.
func openStore(t *testing.T, u string) store.Store {
	t.Helper()
	return teststore.Open(t, u)
}

// testConfig has short timings: tests wait on states, not on the clock.
// The leadership term is the exception: an election attempt has a third
// of it, and a short term let a renewal slowed by the race detector on a
// loaded machine end the term in the middle of a delivery, which was then
// made again (at least once) while the tests count requests. A stopped
// leader resigns, so a long term does not slow the failover test.
func testConfig(st store.Store) Config {
	return Config{
		Store: st, NodeID: "node-" + uuid.NewString()[:8], LeaderTTL: 5 * time.Second,
		PollInterval: 10 * time.Millisecond, Timeout: 2 * time.Second,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		MaxAttempts: 100, BreakerFailures: 1000, BreakerOpen: time.Second,
		Logger: slog.New(slog.DiscardHandler),
	}
}

// setup opens a store and a service (not started) configured by opts.
func setup(t *testing.T, backend testdb.Backend, opts ...func(*Config)) *bundle {
	t.Helper()
	u := backend.URL(t)
	st := openStore(t, u)
	cfg := testConfig(st)
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := New(cfg)
	require.NoError(t, err)
	return &bundle{ctx: context.Background(), st: st, url: u, svc: svc}
}

// start runs the service until the test ends.
func (b *bundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.svc.Start(b.ctx))
	t.Cleanup(b.svc.Stop)
}

func forEachBackend(t *testing.T, fn func(t *testing.T, backend testdb.Backend)) {
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, backend)
		})
	}
}

// subscribe subscribes url to every event with testSecret.
func (b *bundle) subscribe(t *testing.T, url string) *store.Webhook {
	t.Helper()
	w, err := b.svc.Create(b.ctx, CreateParams{URL: url, EventTypes: []string{"*"}, Secret: testSecret})
	require.NoError(t, err)
	return w
}

// insertJobs inserts n jobs in one statement: one outbox row, n events.
func (b *bundle) insertJobs(t *testing.T, n int) {
	t.Helper()
	ps := make([]*store.JobInsertParams, n)
	for i := range ps {
		ps[i] = &store.JobInsertParams{
			ID: uuid.Must(uuid.NewV7()), Type: "email", Queue: "email", Payload: json.RawMessage(`{}`),
			State: job.StateQueued, MaxAttempts: 3,
		}
	}
	_, err := b.st.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: time.Now()})
	require.NoError(t, err)
}

// eventIDs lists the ids of every event in the outbox.
func (b *bundle) eventIDs(t *testing.T) []string {
	t.Helper()
	rows, err := b.st.OutboxList(b.ctx, &store.OutboxListParams{})
	require.NoError(t, err)
	var ids []string
	for _, r := range rows {
		evs, err := events.Expand(r)
		require.NoError(t, err)
		for _, ev := range evs {
			ids = append(ids, ev.ID)
		}
	}
	return ids
}

// deliveries lists every delivery of w.
func (b *bundle) deliveries(t *testing.T, w *store.Webhook) []*store.WebhookDelivery {
	t.Helper()
	ds, err := b.svc.Deliveries(b.ctx, w.ID, "", 0)
	require.NoError(t, err)
	return ds
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStates waits until every delivery of w is in state, and returns them.
func (b *bundle) waitStates(t *testing.T, w *store.Webhook, n int, state store.WebhookDeliveryState) []*store.WebhookDelivery {
	t.Helper()
	var ds []*store.WebhookDelivery
	waitFor(t, "deliveries "+string(state), func() bool {
		ds = b.deliveries(t, w)
		if len(ds) != n {
			return false
		}
		for _, d := range ds {
			if d.State != state {
				return false
			}
		}
		return true
	})
	return ds
}

// received is one request a receiver got.
type received struct {
	At     time.Time
	Path   string
	Query  string // raw
	Header http.Header
	Body   []byte
}

// receiver is a real HTTP endpoint on loopback. fail decides, per request
// (numbered from 1), which status to answer.
type receiver struct {
	srv  *httptest.Server
	body string // a failing answer's body, set before use; default "not now"

	mu   sync.Mutex
	got  []received
	fail func(n int, r *http.Request) int
}

func newReceiver(t *testing.T, fail func(n int, r *http.Request) int) *receiver {
	t.Helper()
	rc := &receiver{fail: fail}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{At: time.Now(), Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		n, fail := len(rc.got), rc.fail
		rc.mu.Unlock()
		status := http.StatusNoContent
		if fail != nil {
			status = fail(n, r)
		}
		w.WriteHeader(status)
		if status >= 300 {
			if rc.body != "" {
				_, _ = io.WriteString(w, rc.body)
			} else {
				_, _ = io.WriteString(w, "not now")
			}
		}
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

func (rc *receiver) setFail(fail func(n int, r *http.Request) int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.fail = fail
}

// staticResolver answers from a map, and can be changed (DNS rebinding).
type staticResolver struct {
	mu    sync.Mutex
	addrs map[string][]netip.Addr
}

func (r *staticResolver) set(host string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.addrs == nil {
		r.addrs = map[string][]netip.Addr{}
	}
	r.addrs[host] = nil
	for _, a := range addrs {
		r.addrs[host] = append(r.addrs[host], netip.MustParseAddr(a))
	}
}

func (r *staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.addrs[host]; ok {
		return a, nil
	}
	return nil, &dnsError{host}
}

type dnsError struct{ host string }

func (e *dnsError) Error() string { return "lookup " + e.host + ": no such host" }
