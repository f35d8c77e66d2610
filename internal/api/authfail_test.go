package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// countedKeys is the client's key reads, counting the secrets each
// asks the store for.
type countedKeys struct {
	*docket.Client
	mu    sync.Mutex
	reads map[string]int
}

func (c *countedKeys) count(secrets ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range secrets {
		c.reads[s]++
	}
}

func (c *countedKeys) readsOf(secret string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[secret]
}

func (c *countedKeys) AuthenticateAPIKey(ctx context.Context, secret string) (*docket.APIKey, error) {
	c.count(secret)
	return c.Client.AuthenticateAPIKey(ctx, secret)
}

func (c *countedKeys) AuthenticateAPIKeys(ctx context.Context, secrets []string) (map[string]*docket.APIKey, error) {
	c.count(secrets...)
	return c.Client.AuthenticateAPIKeys(ctx, secrets)
}

// authBundle is a server whose key reads are counted, called directly
// (so that each request may come from its own address).
type authBundle struct {
	client *docket.Client
	keys   *countedKeys
	server *Server
}

func authSetup(t *testing.T, backend testdb.Backend, configure func(*Config)) *authBundle {
	t.Helper()
	client, err := docket.NewClient(t.Context(), docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	keys := &countedKeys{Client: client, reads: map[string]int{}}
	cfg := Config{Client: client, Auth: keys}
	if configure != nil {
		configure(&cfg)
	}
	return &authBundle{client: client, keys: keys, server: New(cfg)}
}

// get sends GET /v1/queues with secret from addr.
func (b *authBundle) get(secret, addr string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", "/v1/queues", nil)
	req.RemoteAddr = addr
	req.Header.Set("Authorization", "Bearer "+secret)
	rec := httptest.NewRecorder()
	b.server.ServeHTTP(rec, req)
	return rec
}

// TestUnknownKeysRemembered: the same unknown token sent again and again
// is read from the store once, then refused from memory for
// unknownKeyTTL; a key created meanwhile with that very secret is
// accepted once its refusal is unknownKeyTTL old (no sooner, no later);
// a newly created key works at once.
func TestUnknownKeysRemembered(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := authSetup(t, backend, func(c *Config) { c.AuthFailureLimit = -1 })
		const unknown = "dk_unknown_token_of_nobody_at_all"
		for range 50 {
			require.Equal(t, http.StatusUnauthorized, b.get(unknown, "192.0.2.1:1000").Code)
		}
		require.Equal(t, 1, b.keys.readsOf(unknown), "one read, the rest from memory")

		// The secret becomes a key (imported on another server, say): it
		// is refused from memory until its refusal expires, then read.
		_, err := b.client.ImportAPIKey(t.Context(), "late", docket.RoleViewer, unknown)
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, b.get(unknown, "192.0.2.1:1000").Code)
		require.Equal(t, 1, b.keys.readsOf(unknown))
		b.server.unknown.mu.Lock()
		for h := range b.server.unknown.expires {
			b.server.unknown.expires[h] = time.Now() // unknownKeyTTL has passed
		}
		b.server.unknown.mu.Unlock()
		require.Equal(t, http.StatusOK, b.get(unknown, "192.0.2.1:1000").Code)
		require.Equal(t, 2, b.keys.readsOf(unknown))

		fresh, _, err := b.client.CreateAPIKey(t.Context(), "fresh", docket.RoleViewer)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, b.get(fresh, "192.0.2.1:1000").Code, "a new key works at once")
	})
}

// TestAuthFailureLimit: past its failed authentications, an address's
// requests whose key is not cached are 429 with Retry-After and read
// nothing; a cached key from it goes on working; another address is not
// limited; the unknown tokens it may still try are bounded by the limit,
// not by how many it sends.
func TestAuthFailureLimit(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := authSetup(t, backend, func(c *Config) { c.AuthFailureLimit, c.AuthFailureBurst = 1.0/60, 3 })
		good, _, err := b.client.CreateAPIKey(t.Context(), "good", docket.RoleViewer)
		require.NoError(t, err)
		uncached, _, err := b.client.CreateAPIKey(t.Context(), "uncached", docket.RoleViewer)
		require.NoError(t, err)
		const attacker = "198.51.100.7:4000"
		require.Equal(t, http.StatusOK, b.get(good, attacker).Code)
		for i := range 3 {
			require.Equal(t, http.StatusUnauthorized, b.get("dk_guess_number_"+strconv.Itoa(i)+"_xxxxxxxx", attacker).Code)
		}
		for i := 3; i < 100; i++ {
			rec := b.get("dk_guess_number_"+strconv.Itoa(i)+"_xxxxxxxx", "198.51.100.7:"+strconv.Itoa(5000+i))
			require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
			require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
			wait, err := strconv.Atoi(rec.Header().Get("Retry-After"))
			require.NoError(t, err)
			require.True(t, wait >= 1 && wait <= 60, "Retry-After %d", wait)
			require.Zero(t, b.keys.readsOf("dk_guess_number_"+strconv.Itoa(i)+"_xxxxxxxx"), "refused before any read")
		}
		require.Contains(t, b.get("dk_guess_x_xxxxxxxxxxxx", attacker).Body.String(), "API keys that are not valid from this address")
		require.Equal(t, http.StatusOK, b.get(good, attacker).Code, "a cached key goes on working")
		require.Equal(t, http.StatusTooManyRequests, b.get(uncached, attacker).Code, "a key not cached waits like any other")
		require.Zero(t, b.keys.readsOf(uncached))
		require.Equal(t, http.StatusOK, b.get(uncached, "203.0.113.9:1").Code, "another address is not limited")
		// IPv6: counted by /64.
		for i := range 3 {
			require.Equal(t, http.StatusUnauthorized, b.get("dk_v6_guess_"+strconv.Itoa(i)+"_xxxxxxxxx", "[2001:db8:1:2::"+strconv.Itoa(i+1)+"]:80").Code)
		}
		require.Equal(t, http.StatusTooManyRequests, b.get("dk_v6_guess_9_xxxxxxxxx", "[2001:db8:1:2:ffff::9]:80").Code, "the same /64")
		require.Equal(t, http.StatusUnauthorized, b.get("dk_v6_guess_9_xxxxxxxxx", "[2001:db8:1:3::1]:80").Code, "another /64")
	})
}

// TestAuthFailuresBounded: the addresses counted and the tokens
// remembered stay within their bounds however many arrive.
func TestAuthFailuresBounded(t *testing.T) {
	t.Parallel()
	now := time.Now()
	a := newAuthFailures(1, 5)
	var u unknownKeys
	for i := range authFailureAddrsMax + 500 {
		addr := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		a.fail(addr, now)
		u.add([32]byte{byte(i >> 16), byte(i >> 8), byte(i)}, now)
	}
	require.LessOrEqual(t, len(a.buckets), authFailureAddrsMax)
	require.LessOrEqual(t, len(u.expires), unknownKeysMax)
}

// TestAuthFailureCountsReadsOnly: only a token read and found no valid
// key counts against its address. One stale client retrying a single
// revoked token (read once, then refused from memory) does not put its
// address, and every valid key behind it, over the limit; many
// different unknown tokens still do.
func TestAuthFailureCountsReadsOnly(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := authSetup(t, backend, func(c *Config) { c.AuthFailureLimit, c.AuthFailureBurst = 1.0/3600, 3 })
		uncached, _, err := b.client.CreateAPIKey(t.Context(), "uncached", docket.RoleViewer)
		require.NoError(t, err)
		const nat = "203.0.113.5:4000"
		const stale = "dk_revoked_long_ago_xxxxxxxxxx"
		for range 100 {
			require.Equal(t, http.StatusUnauthorized, b.get(stale, nat).Code)
		}
		require.Equal(t, 1, b.keys.readsOf(stale))
		require.Equal(t, http.StatusOK, b.get(uncached, nat).Code, "one token refused from memory put the address over the limit")

		// The stale token's one read took one of the 3; 2 more unknown tokens take the rest.
		for i := range 2 {
			require.Equal(t, http.StatusUnauthorized, b.get("dk_other_guess_"+strconv.Itoa(i)+"_xxxxxxxx", nat).Code)
		}
		require.Equal(t, http.StatusTooManyRequests, b.get("dk_other_guess_x_xxxxxxxx", nat).Code)
	})
}

// TestAuthFailuresFullKeepsExhausted: with the map of addresses full of
// exhausted buckets, failures from new addresses drop none of them (an
// attacker with many addresses cannot reset its own): they share the
// overflow bucket, which limits them like one address. A bucket refilled
// to full is dropped to make room.
func TestAuthFailuresFullKeepsExhausted(t *testing.T) {
	t.Parallel()
	now := time.Now()
	a := newAuthFailures(1.0/60, 2)
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	for i := range authFailureAddrsMax {
		a.fail(addr(i), now)
		a.fail(addr(i), now)
	}
	for i := range 5 {
		a.fail(addr(authFailureAddrsMax+i), now.Add(time.Duration(i)*2*time.Second))
	}
	later := now.Add(10 * time.Second)
	for i := range authFailureAddrsMax {
		if a.wait(addr(i), later) == 0 {
			t.Fatalf("exhausted address %d reset by failures of new ones", i)
		}
	}
	require.Positive(t, a.wait(addr(authFailureAddrsMax+100), later), "the overflow bucket limits new addresses")
	require.LessOrEqual(t, len(a.buckets), authFailureAddrsMax)

	// An hour on, every bucket is full again: a new address gets its own.
	hour := now.Add(time.Hour)
	a.fail(addr(authFailureAddrsMax+200), hour)
	require.Zero(t, a.wait(addr(authFailureAddrsMax+200), hour))
	require.Len(t, a.buckets, 1)
}
