package api

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestDatabaseUnavailable: while PostgreSQL cannot be reached — the
// connection refused, connections cut under their statements and at
// connect, a server that does not answer within connect_timeout —
// insert, list, lease and heartbeat answer 503
// problems/database-unavailable with Retry-After: 5, and so does a key
// not yet cached, whose read fails before any handler; each such request
// is logged once, at warning level, and nothing at error level. A
// validation error meanwhile is the 400 it was. Once the database is back
// the same calls succeed (the lease still held, the key read in the
// outage not taken for unknown), and a statement's own refusal (an
// idempotency key reused) answers as before.
func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	proxy := testdb.NewProxy(t)
	var logs syncBuffer
	b := setup(t, testdb.Backend{Name: "postgres", URL: func(t testing.TB) string {
		return proxy.URL(testdb.PostgresURL(t)) + "&connect_timeout=1"
	}}, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	ctx := t.Context()

	_, err := b.client.Insert(ctx, remoteArgs{Text: "a"}, nil)
	require.NoError(t, err)
	leases := b.lease(t, 1)
	require.Len(t, leases, 1)
	heartbeat := "/v1/leases/" + leases[0].LeaseID + "/heartbeat"
	insert := map[string]any{"jobType": "remote.echo", "payload": map[string]any{"text": "b"}}
	calls := []struct {
		role         docket.Role
		method, path string
		body         any
		ok           int
	}{
		{docket.RoleProducer, "POST", "/v1/jobs", insert, http.StatusAccepted},
		{docket.RoleViewer, "GET", "/v1/jobs", nil, http.StatusOK},
		{docket.RoleWorker, "POST", "/v1/leases", map[string]any{"queues": []string{"other"}, "leaseSeconds": 30, "workerId": "py-1"}, http.StatusOK},
		{docket.RoleWorker, "POST", heartbeat, map[string]any{}, http.StatusOK},
	}
	for _, c := range calls { // each key cached: the outage meets the handlers
		require.Equal(t, c.ok, b.do(t, c.role, c.method, c.path, c.body).Status, c.path)
	}
	// A key per outage, never used before it: its read is the first to fail.
	fresh := make([]string, 3)
	for i := range fresh {
		fresh[i], _, err = b.client.CreateAPIKey(ctx, fmt.Sprint("fresh-", i), docket.RoleViewer)
		require.NoError(t, err)
	}

	for i, outage := range []struct {
		name  string
		begin func()
	}{
		{"connection refused", proxy.Down},
		{"connections cut", proxy.Cut},
		{"no answer within connect_timeout", proxy.Mute},
	} {
		outage.begin()
		warned := strings.Count(logs.String(), "the database is unavailable")
		// Invalid input is refused before the database is asked (the
		// key was read less than authCacheTTL ago).
		b.do(t, docket.RoleProducer, "POST", "/v1/jobs", map[string]any{"jobType": ""}).Problem(t, http.StatusBadRequest)
		for _, c := range calls {
			r := b.do(t, c.role, c.method, c.path, c.body)
			p := r.Problem(t, http.StatusServiceUnavailable)
			require.Equal(t, problemBase+"database-unavailable", p.Type, "%s: %s %s", outage.name, c.method, c.path)
			require.Equal(t, "5", r.Header.Get("Retry-After"), outage.name)
		}
		r := b.do(t, "", "GET", "/v1/jobs", nil, "Authorization", "Bearer "+fresh[i])
		require.Equal(t, problemBase+"database-unavailable", r.Problem(t, http.StatusServiceUnavailable).Type, "%s: a key not cached", outage.name)
		require.Equal(t, "5", r.Header.Get("Retry-After"))

		log := logs.String()
		require.Equal(t, warned+len(calls)+1, strings.Count(log, "the database is unavailable"), "%s: one warning per request\n%s", outage.name, log)
		require.Contains(t, log, "level=WARN msg=\"request failed: the database is unavailable\"")
		require.NotContains(t, log, "level=ERROR", outage.name)

		proxy.Up()
		// Back, each call succeeds once sent again as a client would on
		// a 503: the pool may still hold a connection the outage ended
		// that no call has tried since (pgxpool pings only those idle
		// for over a second), which one call meets before the pool
		// connects again.
		back := func(role docket.Role, method, path string, body any, want int, headers ...string) {
			t.Helper()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				r := b.do(t, role, method, path, body, headers...)
				if r.Status == want {
					return
				}
				require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s, then back: %s %s: %s", outage.name, method, path, r.Body)
				require.True(t, time.Now().Before(deadline), "%s: the database is back, %s %s is not", outage.name, method, path)
			}
		}
		for _, c := range calls {
			back(c.role, c.method, c.path, c.body, c.ok)
		}
		back("", "GET", "/v1/jobs", nil, http.StatusOK, "Authorization", "Bearer "+fresh[i]) // the key read in the outage
	}

	// A statement's own refusal is what it was.
	keyed := map[string]any{"jobType": "remote.echo", "payload": map[string]any{"text": "c"}, "idempotencyKey": "k"}
	require.Equal(t, http.StatusAccepted, b.do(t, docket.RoleProducer, "POST", "/v1/jobs", keyed).Status)
	keyed["payload"] = map[string]any{"text": "d"}
	b.do(t, docket.RoleProducer, "POST", "/v1/jobs", keyed).Problem(t, http.StatusUnprocessableEntity)
	b.do(t, docket.RoleViewer, "GET", "/v1/jobs/"+uuid.NewString(), nil).Problem(t, http.StatusNotFound)
	require.NotContains(t, logs.String(), "level=ERROR")
}

// sqlStateError is an error as pgx reports one of PostgreSQL's.
type sqlStateError string

func (e sqlStateError) Error() string    { return "ERROR: something (SQLSTATE " + string(e) + ")" }
func (e sqlStateError) SQLState() string { return string(e) }

// problemFor answers 503 database-unavailable for a database not reached
// or a connection lost, and leaves a statement's own error alone.
func TestProblemForUnavailable(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "connection refused"}}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, err := range []error{refused, reset, sqlStateError("57P01"), sqlStateError("57P03"), sqlStateError("08006")} {
		p := problemFor(fmt.Errorf("list jobs: %w", err))
		require.Equal(t, http.StatusServiceUnavailable, p.Status, "%v", err)
		require.Equal(t, problemBase+"database-unavailable", p.Type)
		require.Equal(t, 5, p.RetryAfter)
	}
	for _, err := range []error{sqlStateError("23505"), sqlStateError("42601"), sqlStateError("57014"), sqlStateError("08P01")} {
		require.Equal(t, http.StatusInternalServerError, problemFor(fmt.Errorf("insert: %w", err)).Status, "%v", err)
	}
	require.Equal(t, problemBase+"contention", problemFor(docket.ErrContention).Type)
}

// TestBatchPartialUnavailable: a runs batch whose later chunk lost the
// database says that the chunk being written may have been started.
func TestBatchPartialUnavailable(t *testing.T) {
	t.Parallel()
	runs := make([]batchRun, 2500)
	p := batchPartial(fmt.Errorf("start runs: %w", sqlStateError("57P01")), 1000, runs)
	require.Equal(t, http.StatusServiceUnavailable, p.Status)
	require.Equal(t, problemBase+"database-unavailable", p.Type)
	require.Equal(t, 5, p.RetryAfter)
	require.Contains(t, p.Detail, "runs 0 to 999 were started; runs from 1000 on may not have been")
	require.Contains(t, p.Detail, "runs 1000 to 1999 were being written")
	require.Contains(t, p.Detail, "send runs from 1000 on again after Retry-After (5 s)")
	require.Contains(t, p.Detail, "would start runs 0 to 999 again", "runs without keys")
}
