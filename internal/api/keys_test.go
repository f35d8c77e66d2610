package api

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestKeyReadsTogether: keys missing from the cache while a read is in
// flight wait for it and are then read in one query, each answered its
// own key (unknown and revoked ones: not found), and cached for
// authCacheTTL from that read's start; a waiting request stops with its
// own context; a key revoked is refused once its cached answer is older
// than authCacheTTL; a key missing alone is read at once.
func TestKeyReadsTogether(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := t.Context()
		client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		s := New(Config{Client: client})
		var (
			secrets []string
			ids     = map[string]*docket.APIKey{}
		)
		for i := range 20 {
			secret, k, err := client.CreateAPIKey(ctx, fmt.Sprint("k", i), docket.RoleViewer)
			require.NoError(t, err)
			secrets = append(secrets, secret)
			ids[secret] = k
		}
		revoked := secrets[19]
		require.NoError(t, client.RevokeAPIKey(ctx, ids[revoked].ID))
		reads := func() int {
			s.keyReads.mu.Lock()
			defer s.keyReads.mu.Unlock()
			return s.keyReads.reads
		}

		// A read in flight (the test's own): every miss waits.
		s.keyReads.mu.Lock()
		s.keyReads.reading = true
		s.keyReads.mu.Unlock()
		asked := append(append([]string{}, secrets...), "dk_unknown_secret_of_no_key", secrets[3])
		got := make([]*docket.APIKey, len(asked))
		errs := make([]error, len(asked))
		var wg sync.WaitGroup
		for i, secret := range asked {
			wg.Go(func() { got[i], errs[i] = s.authenticate(ctx, secret, netip.Addr{}) })
		}
		// A request whose context ends while it waits stops with it.
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err = s.authenticate(cctx, secrets[0], netip.Addr{})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Eventually(t, func() bool {
			s.keyReads.mu.Lock()
			defer s.keyReads.mu.Unlock()
			return s.keyReads.next != nil && len(s.keyReads.next.secrets) == len(secrets)+1
		}, time.Minute, time.Millisecond, "every missing key waits, once each")
		before := time.Now()
		// The read in flight ends; the next one is held in its query until
		// mid, so that an answer cached from the read's end (later than
		// mid), not its start, is told apart.
		gate := &gatedKeys{many: client, entered: make(chan struct{}), release: make(chan struct{})}
		s.nextKeyRead(gate)
		<-gate.entered
		mid := time.Now()
		close(gate.release)
		wg.Wait()
		require.Equal(t, 1, reads(), "one read for all")
		for i, secret := range asked {
			if secret == revoked || i == len(secrets) {
				require.ErrorIs(t, errs[i], docket.ErrNotFound, "key %d", i)
				continue
			}
			require.NoError(t, errs[i], "key %d", i)
			require.Equal(t, ids[secret].ID, got[i].ID, "key %d: its own", i)
		}
		s.authMu.Lock()
		e, ok := s.authCache[secrets[5]]
		_, revokedCached := s.authCache[revoked]
		s.authMu.Unlock()
		require.True(t, ok)
		require.False(t, revokedCached)
		require.False(t, e.expires.Before(before.Add(authCacheTTL)), "kept from the read's start")
		require.True(t, e.expires.Before(mid.Add(authCacheTTL)), "kept from the read's start, not its end")
		s.keyReads.mu.Lock()
		require.False(t, s.keyReads.reading, "no read left in flight")
		s.keyReads.mu.Unlock()

		// Cached: no read. Revoked, the key works until its answer is
		// authCacheTTL old, then not. (The answer made fresh first: the
		// test must not depend on the above taking less than authCacheTTL.)
		s.authMu.Lock()
		s.authCache[secrets[5]] = authEntry{key: e.key, expires: time.Now().Add(authCacheTTL)}
		s.authMu.Unlock()
		k, err := s.authenticate(ctx, secrets[5], netip.Addr{})
		require.NoError(t, err)
		require.Equal(t, ids[secrets[5]].ID, k.ID)
		require.Equal(t, 1, reads())
		require.NoError(t, client.RevokeAPIKey(ctx, ids[secrets[5]].ID))
		_, err = s.authenticate(ctx, secrets[5], netip.Addr{})
		require.NoError(t, err, "within authCacheTTL")
		s.authMu.Lock()
		s.authCache[secrets[5]] = authEntry{key: e.key, expires: time.Now()}
		s.authMu.Unlock()
		_, err = s.authenticate(ctx, secrets[5], netip.Addr{})
		require.ErrorIs(t, err, docket.ErrNotFound)
		require.Equal(t, 2, reads(), "missing alone: read at once")
	})
}

// gatedKeys reads keys through many once release is closed, after
// closing entered (at its first read).
type gatedKeys struct {
	many             manyAuthenticator
	entered, release chan struct{}
	once             sync.Once
}

func (g *gatedKeys) AuthenticateAPIKeys(ctx context.Context, secrets []string) (map[string]*docket.APIKey, error) {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.many.AuthenticateAPIKeys(ctx, secrets)
}

// panickyKeys is the client's key reads, but a read of many keys panics
// while panics is set.
type panickyKeys struct {
	*docket.Client
	panics atomic.Bool
}

func (p *panickyKeys) AuthenticateAPIKeys(ctx context.Context, secrets []string) (map[string]*docket.APIKey, error) {
	if p.panics.Load() {
		panic("a read of keys went wrong")
	}
	return p.Client.AuthenticateAPIKeys(ctx, secrets)
}

// TestKeyReadPanicsAndLongSecrets: a read of keys that panics answers its
// waiters with an error and leaves no read in flight (the next miss is
// read); a secret longer than keyReadMaxSecret is read by its own
// request, never with others.
func TestKeyReadPanicsAndLongSecrets(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: testdb.SQLiteURL(t), AutoMigrate: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	auth := &panickyKeys{Client: client}
	s := New(Config{Client: client, Auth: auth})
	secret, k, err := client.CreateAPIKey(ctx, "short", docket.RoleViewer)
	require.NoError(t, err)
	reads := func() int {
		s.keyReads.mu.Lock()
		defer s.keyReads.mu.Unlock()
		return s.keyReads.reads
	}

	auth.panics.Store(true)
	_, err = s.authenticate(ctx, secret, netip.Addr{})
	require.ErrorContains(t, err, "panic: a read of keys went wrong")
	s.keyReads.mu.Lock()
	require.False(t, s.keyReads.reading, "no read left in flight")
	s.keyReads.mu.Unlock()
	auth.panics.Store(false)
	got, err := s.authenticate(ctx, secret, netip.Addr{})
	require.NoError(t, err, "the next miss is read")
	require.Equal(t, k.ID, got.ID)
	require.Equal(t, 2, reads())

	long := "dk_" + strings.Repeat("x", keyReadMaxSecret)
	auth.panics.Store(true) // a read of many would panic: it is not one
	_, err = s.authenticate(ctx, long, netip.Addr{})
	require.ErrorIs(t, err, docket.ErrNotFound)
	require.Equal(t, 2, reads(), "read alone")
}
