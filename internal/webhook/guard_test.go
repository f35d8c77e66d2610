package webhook

import (
	"context"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

func TestGuardRules(t *testing.T) {
	t.Parallel()
	res := &staticResolver{}
	res.set("localhost", "127.0.0.1", "::1")
	res.set("hooks.example.com", "203.0.113.7")
	res.set("a.partner.test", "198.51.100.1")
	res.set("inside.corp", "10.1.2.3")
	res.set("mixed.test", "127.0.0.1", "10.9.9.9")
	g, err := newGuard([]string{"hooks.example.com", "*.partner.test", "10.1.0.0/16", "192.0.2.5", " "}, false, res)
	require.NoError(t, err)
	ctx := context.Background()
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8080/x", true},
		{"http://127.9.9.9/", true},
		{"http://[::1]:9000/", true},
		{"http://[::ffff:127.0.0.1]/", true},
		{"http://localhost:3000/hook", true},
		{"https://hooks.example.com/in", true},    // allowed by name
		{"https://HOOKS.example.com./in", true},   // names are case-insensitive
		{"https://a.partner.test/in", true},       // wildcard
		{"https://partner.test/in", false},        // the wildcard is for subdomains
		{"http://10.1.200.1/", true},              // CIDR
		{"http://inside.corp/", true},             // resolves into the CIDR
		{"http://192.0.2.5/", true},               // single IP
		{"http://192.0.2.6/", false},              //
		{"http://10.2.0.1/", false},               // outside the CIDR
		{"http://169.254.169.254/latest/", false}, // cloud metadata
		{"http://0.0.0.0:8080/", false},
		{"http://mixed.test/", false}, // every address must pass
		{"http://nowhere.test/", false},
		{"https://example.org/", false},
	} {
		err := g.checkURL(ctx, tc.url)
		if tc.ok {
			require.NoError(t, err, tc.url)
		} else {
			require.ErrorIs(t, err, ErrHostNotAllowed, tc.url)
		}
	}
	for _, bad := range []string{"ftp://127.0.0.1/", "127.0.0.1:80", "/relative", "http:///nohost", "http://[::1", "http://127.0.0.1:99999/", "http://127.0.0.1:0/"} {
		err := g.checkURL(ctx, bad)
		require.Error(t, err, bad)
		require.NotErrorIs(t, err, ErrHostNotAllowed, bad)
	}

	anyHost, err := newGuard(nil, true, res)
	require.NoError(t, err)
	require.NoError(t, anyHost.checkURL(ctx, "https://example.org/"))
	require.NoError(t, anyHost.checkURL(ctx, "http://10.2.0.1/"))

	for _, bad := range []string{"10.0.0.0/33", "bad host", "*", "a:b"} {
		_, err := newGuard([]string{bad}, false, res)
		require.Error(t, err, bad)
	}
}

// The dialer's Control refuses a peer address that is not allowed, before
// connecting, whatever resolved it.
func TestGuardControl(t *testing.T) {
	t.Parallel()
	g, err := newGuard([]string{"10.0.0.0/8"}, false, &staticResolver{})
	require.NoError(t, err)
	require.NoError(t, g.control("tcp", "127.0.0.1:80", nil))
	require.NoError(t, g.control("tcp6", "[::1]:80", nil))
	require.NoError(t, g.control("tcp", "10.3.2.1:443", nil))
	require.ErrorIs(t, g.control("tcp", "192.168.1.1:80", nil), ErrHostNotAllowed)
	require.ErrorIs(t, g.control("tcp6", "[::ffff:192.168.1.1]:80", nil), ErrHostNotAllowed)
	require.ErrorIs(t, g.control("tcp6", "[fe80::1]:80", nil), ErrHostNotAllowed)
}

// A URL whose host is neither loopback nor allowed is refused when
// subscribing, naming the url field.
func TestSubscribeRefusesDisallowedHost(t *testing.T) {
	t.Parallel()
	res := &staticResolver{}
	res.set("evil.test", "10.0.0.1")
	res.set("partner.test", "203.0.113.9")
	b := setup(t, testdb.Backends()[0], func(c *Config) {
		c.Resolver = res
		c.AllowHosts = []string{"partner.test"}
	})
	for _, u := range []string{"http://10.0.0.1/hook", "http://evil.test/hook", "https://unknown.test/"} {
		_, err := b.svc.Create(b.ctx, CreateParams{URL: u, EventTypes: []string{"*"}, Secret: testSecret})
		var verr *ValidationError
		require.ErrorAs(t, err, &verr, u)
		require.Equal(t, "url", verr.Field)
		require.Contains(t, verr.Message, "is not allowed", u)
	}
	_, err := b.svc.Create(b.ctx, CreateParams{URL: "https://partner.test/in", EventTypes: []string{"*"}, Secret: testSecret})
	require.NoError(t, err, "a host allowed by name")
	list, err := b.svc.List(b.ctx)
	require.NoError(t, err)
	require.Len(t, list, 1, "nothing was written for the refused ones")
}

func TestCreateValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ok := CreateParams{URL: "http://127.0.0.1:9/x", EventTypes: []string{"job.state_changed"}, Secret: testSecret}
	for _, tc := range []struct {
		field  string
		modify func(p *CreateParams)
	}{
		{"url", func(p *CreateParams) { p.URL = "" }},
		{"url", func(p *CreateParams) { p.URL = "ftp://127.0.0.1/" }},
		{"url", func(p *CreateParams) { p.URL = "http://127.0.0.1/" + strings.Repeat("a", 3000) }},
		{"eventTypes", func(p *CreateParams) { p.EventTypes = nil }},
		{"eventTypes[1]", func(p *CreateParams) { p.EventTypes = []string{"job.progress", "job.nope"} }},
		{"secret", func(p *CreateParams) { p.Secret = "short" }},
		{"secret", func(p *CreateParams) { p.Secret = strings.Repeat("x", 2000) }},
	} {
		p := ok
		tc.modify(&p)
		_, err := b.svc.Create(b.ctx, p)
		var verr *ValidationError
		require.ErrorAs(t, err, &verr)
		require.Equal(t, tc.field, verr.Field, verr.Message)
	}
	w, err := b.svc.Create(b.ctx, CreateParams{URL: ok.URL, EventTypes: []string{"job.progress", "*", "job.progress"}, Secret: testSecret})
	require.NoError(t, err)
	require.Equal(t, []string{"*"}, w.EventTypes)
	w, err = b.svc.Create(b.ctx, CreateParams{URL: ok.URL, EventTypes: []string{"job.state_changed", "job.progress", "job.progress"}, Secret: testSecret})
	require.NoError(t, err)
	require.Equal(t, []string{"job.progress", "job.state_changed"}, w.EventTypes)
}

// A host name that resolved to loopback when subscribing but resolves to a
// disallowed address when delivering (DNS rebinding) is refused at
// delivery: no connection is made, and the delivery records why.
func TestDeliveryRefusesRebindedHost(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		res := &staticResolver{}
		res.set("rebind.test", "127.0.0.1")
		b := setup(t, backend, func(c *Config) {
			c.Resolver = res
			c.MaxAttempts = 2
		})
		rc := newReceiver(t, nil)
		u, err := url.Parse(rc.srv.URL)
		require.NoError(t, err)
		w := b.subscribe(t, "http://rebind.test:"+u.Port()+"/hook")

		res.set("rebind.test", "192.0.2.1")
		b.start(t)
		b.insertJobs(t, 1)
		d := b.waitStates(t, w, 1, store.DeliveryDead)[0]
		require.Contains(t, d.LastError, "address 192.0.2.1 is not allowed")
		require.Zero(t, d.LastStatusCode)
		require.Empty(t, rc.requests())

		// Back to loopback: a redelivery goes through.
		res.set("rebind.test", "127.0.0.1")
		_, err = b.svc.Redeliver(b.ctx, w.ID, d.ID)
		require.NoError(t, err)
		b.waitStates(t, w, 1, store.DeliveryDelivered)
		require.Len(t, rc.requests(), 1)
		require.Equal(t, "/hook", rc.requests()[0].Path)
	})
}

func TestGuardDialsOnlyAllowedAddresses(t *testing.T) {
	t.Parallel()
	res := &staticResolver{}
	res.set("two.test", "192.0.2.1", "127.0.0.1")
	g, err := newGuard(nil, false, res)
	require.NoError(t, err)
	rc := newReceiver(t, nil)
	u, err := url.Parse(rc.srv.URL)
	require.NoError(t, err)
	// The first address is refused by Control; the loopback one connects.
	conn, err := g.dialContext(context.Background(), "tcp", "two.test:"+u.Port())
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	require.True(t, netip.MustParseAddrPort(conn.RemoteAddr().String()).Addr().IsLoopback())

	res.set("two.test", "192.0.2.1")
	_, err = g.dialContext(context.Background(), "tcp", "two.test:"+u.Port())
	require.ErrorIs(t, err, ErrHostNotAllowed)
	_, err = g.dialContext(context.Background(), "tcp", "192.0.2.1:"+u.Port())
	require.ErrorIs(t, err, ErrHostNotAllowed)
}

// A leadership term of a few nanoseconds made the elector's interval (a
// third of it) zero, and time.NewTicker panic once the service started:
// New refuses it.
func TestConfigLeaderTTLMin(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Store: nopStore{}, NodeID: "n", LeaderTTL: 2 * time.Nanosecond})
	require.ErrorContains(t, err, "LeaderTTL 2ns is below the minimum 100ms")
	_, err = New(Config{Store: nopStore{}, NodeID: "n", LeaderTTL: 100 * time.Millisecond})
	require.NoError(t, err)
}

// The breaker counts consecutive failures in 32 bits: BreakerFailures
// 1<<32 wrapped to 0 and opened the breaker at the first failure. New
// refuses it.
func TestConfigBreakerFailuresMax(t *testing.T) {
	t.Parallel()
	if strconv.IntSize < 64 {
		t.Skip("an int cannot hold 1<<32")
	}
	over := int64(1) << 32
	_, err := New(Config{Store: nopStore{}, NodeID: "n", BreakerFailures: int(over)})
	require.ErrorContains(t, err, "BreakerFailures 4294967296 is over 4294967295")
	_, err = New(Config{Store: nopStore{}, NodeID: "n", BreakerFailures: int(over - 1)})
	require.NoError(t, err)
}

// nopStore is a Store that is never called.
type nopStore struct{ Store }
