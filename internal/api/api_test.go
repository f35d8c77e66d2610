package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle is one API server on a real database with a key per role.
type bundle struct {
	client *docket.Client
	server *httptest.Server
	keys   map[docket.Role]string // role -> secret
}

type option func(*Config)

func setup(t testing.TB, backend testdb.Backend, opts ...option) *bundle {
	t.Helper()
	ctx := context.Background()
	client, err := docket.NewClient(ctx, docket.Config{
		DatabaseURL: backend.URL(t), AutoMigrate: true,
		RetryBackoffBase: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	cfg := Config{Client: client}
	for _, o := range opts {
		o(&cfg)
	}
	srv := httptest.NewServer(New(cfg))
	t.Cleanup(srv.Close)
	b := &bundle{client: client, server: srv, keys: map[docket.Role]string{}}
	for _, role := range docket.Roles {
		secret, _, err := client.CreateAPIKey(ctx, "test-"+string(role), role)
		require.NoError(t, err)
		b.keys[role] = secret
	}
	return b
}

// response is a decoded answer.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v (failing the test on error) and returns v.
func (r *response) JSON(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.Body, v), string(r.Body))
}

// Problem decodes a problem body and checks its content type and status.
func (r *response) Problem(t *testing.T, status int) *Problem {
	t.Helper()
	require.Equal(t, status, r.Status, string(r.Body))
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	var p Problem
	r.JSON(t, &p)
	require.Equal(t, status, p.Status)
	require.NotEmpty(t, p.Type)
	require.NotEmpty(t, p.Title)
	return &p
}

// do sends a request as role ("" for no key). body may be nil, a string
// (sent as is) or any value (sent as JSON).
func (b *bundle) do(t *testing.T, role docket.Role, method, path string, body any, headers ...string) *response {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(v)
	default:
		buf, err := json.Marshal(v)
		require.NoError(t, err)
		rd = bytes.NewBuffer(buf)
	}
	req, err := http.NewRequest(method, b.server.URL+path, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if role != "" {
		req.Header.Set("Authorization", "Bearer "+b.keys[role])
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return &response{Status: res.StatusCode, Header: res.Header, Body: data}
}

func forEachBackend(t *testing.T, fn func(t *testing.T, backend testdb.Backend)) {
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, backend)
		})
	}
}

func TestHealthAndErrors(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		r := b.do(t, "", "GET", "/healthz", nil)
		require.Equal(t, http.StatusOK, r.Status)
		var h healthResponse
		r.JSON(t, &h)
		require.Equal(t, "ok", h.Status)
		require.Equal(t, backend.Name, h.Backend)

		b.do(t, docket.RoleAdmin, "GET", "/nope", nil).Problem(t, http.StatusNotFound)
		b.do(t, "", "DELETE", "/healthz", nil).Problem(t, http.StatusMethodNotAllowed)
	})
}

// TestParametersNotText: a path or query value that is not UTF-8, or
// holds NUL, is a 400 naming the parameter on every backend (PostgreSQL
// refused it: a 500), and the key is checked first.
func TestParametersNotText(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		for _, c := range []struct {
			method, path string
			fields       []string
		}{
			{"GET", "/v1/jobs?queue=%ff", []string{"queue"}},
			{"GET", "/v1/jobs?jobType=a%00&queue=b&queue=%ff", []string{"jobType", "queue"}},
			{"GET", "/v1/runs?workflow=%00", []string{"workflow"}},
			{"GET", "/v1/dead-letters?consumer=%00", []string{"consumer"}},
			{"GET", "/v1/workflows/%00", []string{"name"}},
			{"POST", "/v1/dead-letters/%00/1-%ff/retry", []string{"consumer", "eventId"}},
		} {
			p := b.do(t, docket.RoleAdmin, c.method, c.path, nil).Problem(t, http.StatusBadRequest)
			var fields []string
			for _, fe := range p.Errors {
				fields = append(fields, fe.Field)
			}
			require.Equal(t, c.fields, fields, c.path)
			b.do(t, "", c.method, c.path, nil).Problem(t, http.StatusUnauthorized)
		}
		// A query string that does not parse is refused whole: Go's
		// r.URL.Query dropped what it could not read, and the filter with it.
		many := strings.Repeat("jobType=a&", 10001)
		for _, q := range []string{"status=%zz", "status=DEAD;x", "queue=q%", many} {
			p := b.do(t, docket.RoleAdmin, "GET", "/v1/jobs?"+q, nil).Problem(t, http.StatusBadRequest)
			require.Contains(t, p.Detail, "the query string is malformed", q[:min(len(q), 20)])
		}
		b.do(t, docket.RoleProducer, "POST", "/v1/workflows/w/runs:batch?keyColumn=%zz", "a\n1\n", "Content-Type", "text/csv").Problem(t, http.StatusBadRequest)
	})
}

// problemFields are the fields a problem names, in order.
func problemFields(p *Problem) []string {
	var fields []string
	for _, fe := range p.Errors {
		fields = append(fields, fe.Field)
	}
	return fields
}
