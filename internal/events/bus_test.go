package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/events"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
	"github.com/docket-run/docket/natsembed"
)

// natsServer is a real NATS server with JetStream, on loopback, started by
// the test; Stop and Start keep its port and storage.
type natsServer struct {
	t    testing.TB
	dir  string
	port int
	srv  *server.Server
}

func startNATS(t testing.TB) *natsServer {
	t.Helper()
	n := &natsServer{t: t, dir: t.TempDir(), port: -1}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

// Start starts the server (again).
func (n *natsServer) Start() {
	n.t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: n.port, JetStream: true, StoreDir: n.dir,
		NoSigs: true, NoLog: true, ServerName: "test",
	})
	require.NoError(n.t, err)
	srv.Start()
	require.True(n.t, srv.ReadyForConnections(30*time.Second), "NATS server did not start")
	n.srv = srv
	n.port = srv.Addr().(*net.TCPAddr).Port
}

// Stop shuts the server down (its storage stays).
func (n *natsServer) Stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

func (n *natsServer) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.port) }

// openBus connects a Bus to url, closed at cleanup.
func openBus(t testing.TB, url string) *events.Bus {
	t.Helper()
	b, err := events.OpenBus(t.Context(), events.BusConfig{URL: url, PublishTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

// streamEvents reads every message of the stream, in stream order.
func streamEvents(t testing.TB, url string) []events.Envelope {
	t.Helper()
	b := openBus(t, url)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := b.JetStream().Stream(ctx, events.StreamName)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	total := int(info.State.Msgs)
	var out []events.Envelope
	if total == 0 {
		return out
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	for len(out) < total {
		batch, err := c.Fetch(total-len(out), jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		for msg := range batch.Messages() {
			var ev events.Envelope
			require.NoError(t, json.Unmarshal(msg.Data(), &ev))
			require.Equal(t, events.NATSSubject(ev.Type), msg.Subject())
			require.Equal(t, ev.ID, msg.Headers().Get(jetstream.MsgIDHeader))
			out = append(out, ev)
		}
		require.NoError(t, batch.Error())
	}
	return out
}

// relayStore opens a migrated store of backend, closed at cleanup.
func relayStore(t testing.TB, backend testdb.Backend) store.Store {
	t.Helper()
	return openStoreURL(t, backend.URL(t))
}

func openStoreURL(t testing.TB, url string) store.Store {
	t.Helper()
	return teststore.Open(t, url)
}

// eventually polls cond every 20 ms until it holds or the deadline passes.
func eventually(t testing.TB, deadline time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", deadline, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBusEmbeddedKeepsEventsAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "nats")
	ctx := t.Context()
	var srv *natsembed.Server
	open := func() *events.Bus {
		var err error
		srv, err = natsembed.Start(dir)
		require.NoError(t, err)
		b, err := events.OpenBus(ctx, events.BusConfig{Embedded: srv})
		require.NoError(t, err)
		return b
	}
	b := open()
	require.NoError(t, b.Health())
	evs := []events.Envelope{
		{ID: "1-0", Type: "job.state_changed", Subject: "jobs/a", Data: json.RawMessage(`{"n":1}`)},
		{ID: "1-1", Type: "job.progress", Subject: "jobs/a", Data: json.RawMessage(`{"n":2}`)},
	}
	require.NoError(t, b.Publish(ctx, evs))
	require.NoError(t, b.Publish(ctx, evs), "publishing again is acknowledged (as duplicates)")
	b.Close()
	srv.Close()

	b = open()
	defer srv.Close()
	defer b.Close()
	_, err := natsembed.Start(dir)
	require.ErrorContains(t, err, "in use by another embedded server", "one server per storage")
	require.NoError(t, b.Publish(ctx, evs[:1]))
	st, err := b.JetStream().Stream(ctx, events.StreamName)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), info.State.Msgs, "each event once, kept across a restart")
	require.Equal(t, []string{"docket.>"}, info.Config.Subjects)
	require.GreaterOrEqual(t, info.Config.Duplicates, 2*time.Minute)
	msg, err := st.GetMsg(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, "docket.job.progress", msg.Subject)
}

func TestBusExternalDownAndBack(t *testing.T) {
	t.Parallel()
	n := startNATS(t)
	n.Stop()
	// Down at start: OpenBus still succeeds and reports it.
	b := openBus(t, n.URL())
	require.ErrorIs(t, b.Health(), events.ErrBusDown)
	ev := []events.Envelope{{ID: "7-0", Type: "job.progress", Data: json.RawMessage(`{}`)}}
	require.ErrorIs(t, b.Publish(t.Context(), ev), events.ErrBusDown)
	n.Start()
	eventually(t, 30*time.Second, "bus reconnects", func() bool { return b.Publish(t.Context(), ev) == nil })
	require.NoError(t, b.Health())
	require.Len(t, streamEvents(t, n.URL()), 1)
}

func TestBusConfig(t *testing.T) {
	t.Parallel()
	_, err := events.OpenBus(t.Context(), events.BusConfig{})
	require.ErrorContains(t, err, "an external NATS or an Embedded server")
	_, err = events.OpenBus(t.Context(), events.BusConfig{URL: "nats://127.0.0.1:1", DuplicateWindow: time.Hour, StreamMaxAge: time.Minute})
	require.ErrorContains(t, err, "exceeds StreamMaxAge")
}

// describe is a short form of events for failure messages.
func describe(evs []events.Envelope) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "%s %s %s\n", ev.ID, ev.Type, ev.Subject)
	}
	return b.String()
}

// TestBusHealthHidesCredentials: Health's error (logged by every /healthz
// while the bus is down, shown on the dashboard) names the servers without
// the user's password or the token of their URLs.
func TestBusHealthHidesCredentials(t *testing.T) {
	t.Parallel()
	b, err := events.OpenBus(t.Context(), events.BusConfig{URL: "nats://alice:s3cret-pw@127.0.0.1:1, nats://t0ken-secret@127.0.0.1:2,nats://127.0.0.1:3"})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	err = b.Health()
	require.ErrorIs(t, err, events.ErrBusDown)
	for _, want := range []string{"alice", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"} {
		require.ErrorContains(t, err, want)
	}
	require.NotContains(t, err.Error(), "s3cret-pw")
	require.NotContains(t, err.Error(), "t0ken-secret")
}
