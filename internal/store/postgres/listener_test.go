package postgres

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// freezeProxy forwards TCP connections to a server until freeze: from then
// on the connections open at that moment silently drop everything in both
// directions, as a half-open connection does (the peer is gone without a
// FIN or RST). Connections opened later are forwarded again.
type freezeProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []*proxiedConn
}

type proxiedConn struct {
	client, server net.Conn
	frozen         atomic.Bool
}

func newFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &freezeProxy{ln: ln, target: target}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			c := &proxiedConn{client: client, server: server}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); c.pipe(server, client) }()
			go func() { defer wg.Done(); c.pipe(client, server) }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.client.Close()
			_ = c.server.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

// pipe copies from src to dst, dropping what it reads once frozen.
func (c *proxiedConn) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !c.frozen.Load() {
				_ = dst.Close()
			}
			return
		}
	}
}

// freeze turns every connection open now half-open.
func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.frozen.Store(true)
	}
}

// TestListenerPingsQuietConnection: a listener connection quiet for the ping
// interval is pinged; a healthy one is kept, a half-open one (no answer) is
// replaced, with the "" wakeup of any reconnect, and wakeups flow again.
func TestListenerPingsQuietConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse(b.url)
	require.NoError(t, err)
	proxy := newFreezeProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	s := openAt(t, u.String())
	s.pingInterval, s.pingTimeout = 100*time.Millisecond, 500*time.Millisecond
	avail, stop := s.Subscribe(store.TopicJobAvailable)
	defer stop()
	// Wakeups are hints: a subscriber's full buffer drops them, and the
	// channel is shared with every parallel test on the server. So each
	// one is sent again until it is seen; what came before is returned.
	notifyAndWait := func(payload string) []string {
		t.Helper()
		var seen []string
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			_, err := b.s.Pool().Exec(b.ctx, `SELECT pg_notify($1, $2)`, channelJobAvailable, payload)
			require.NoError(t, err)
			retry := time.After(500 * time.Millisecond)
		wait:
			for {
				select {
				case got := <-avail:
					if got == payload {
						return seen
					}
					seen = append(seen, got)
				case <-retry:
					break wait
				}
			}
		}
		t.Fatalf("no wakeup %q within 10s; saw %q", payload, seen)
		return nil
	}

	// Quiet but healthy: pinged, kept, still delivering.
	pid := s.listenerPID()
	require.NotZero(t, pid)
	require.Eventually(t, func() bool {
		var query string
		err := b.s.Pool().QueryRow(b.ctx, `SELECT query FROM pg_stat_activity WHERE pid = $1`, int32(pid)).Scan(&query)
		return err == nil && query == "-- ping"
	}, 10*time.Second, 20*time.Millisecond, "the quiet listener connection is never pinged")
	require.NotContains(t, notifyAndWait("healthy"), "", "a healthy listener reconnected")
	require.Equal(t, pid, s.listenerPID())

	// Half-open: the ping goes unanswered, the listener reconnects.
	proxy.freeze()
	waitFor(t, avail, "")
	require.NotEqual(t, pid, s.listenerPID())
	notifyAndWait("after")
}
