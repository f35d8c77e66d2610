package remote_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/docket-run/docket/remote"
)

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	type fe = remote.FieldError
	for _, tc := range []struct {
		err  remote.Error
		want string
	}{
		{remote.Error{Status: 404, Title: "Not found", Detail: "no such job"}, "404 Not found: no such job"},
		{remote.Error{Status: 503, Title: "Service unavailable"}, "503 Service unavailable"},
		{remote.Error{Status: 400, Title: "Invalid request", Detail: "the body is invalid", Errors: []fe{{"priority", "must be between 0 and 9"}, {"queue", "is required"}}},
			"400 Invalid request: the body is invalid (priority: must be between 0 and 9; queue: is required)"},
		{remote.Error{Status: 400, Title: "Invalid request", Detail: "priority: must be between 0 and 9", Errors: []fe{{"priority", "must be between 0 and 9"}}},
			"400 Invalid request: priority: must be between 0 and 9"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// TestClientReadsAnswers: problems become *Error with Retry-After; a body
// that is not a problem keeps the status and a snippet; 409 is a lost lease.
func TestClientReadsAnswers(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			t.Errorf("Authorization %q", r.Header.Get("Authorization"))
		}
		switch r.URL.Path {
		case "/v1/leases/j.1/complete":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"type":"x","title":"Lease lost","status":409,"detail":"gone"}`)
		case "/v1/leases":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"type":"x","title":"Too many requests","status":429}`)
		case "/v1/leases/j.1/release":
			fmt.Fprint(w, `{"status":"RETRY"}`)
		default:
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, "<html>bad gateway</html>")
		}
	}))
	defer srv.Close()
	c, err := remote.NewClient(srv.URL+"/", "k", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	err = c.Complete(ctx, "j.1", nil)
	if !remote.IsLeaseLost(err) || remote.IsTemporary(err) {
		t.Fatalf("complete: %v, want a lost lease", err)
	}
	_, err = c.Lease(ctx, &remote.LeaseRequest{Queues: []string{"q"}, LeaseSeconds: remote.Int(30), WorkerID: "w"})
	var p *remote.Error
	if !errors.As(err, &p) || p.RetryAfter != 7*time.Second || !remote.IsTemporary(err) {
		t.Fatalf("lease: %#v, want a temporary 429 with Retry-After 7s", err)
	}
	st, err := c.Release(ctx, "j.1", "")
	if err != nil || st != "RETRY" {
		t.Fatalf("release: %q, %v", st, err)
	}
	err = c.Do(ctx, "GET", "/other", nil, nil)
	if !errors.As(err, &p) || p.Status != 502 || p.Detail != "<html>bad gateway</html>" {
		t.Fatalf("other: %#v", err)
	}
	if _, err := remote.NewClient("ftp://x", "k", nil); err == nil {
		t.Fatal("ftp URL accepted")
	}
}

// An answer longer than AnswerMaxBytes is refused, not read into memory;
// one of exactly the limit is read.
func TestClientBoundsAnswers(t *testing.T) {
	t.Parallel()
	const limit = 1 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := limit
		if r.URL.Path == "/big" {
			n = 64 * limit // more than the client reads
		}
		if r.URL.Query().Get("status") == "500" {
			w.WriteHeader(http.StatusInternalServerError)
		}
		fmt.Fprintf(w, `"%s"`, strings.Repeat("x", n-2))
	}))
	defer srv.Close()
	c, err := remote.NewClient(srv.URL, "k", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	if c.AnswerMaxBytes != remote.AnswerMaxBytesDefault {
		t.Fatalf("AnswerMaxBytes %d, want the default", c.AnswerMaxBytes)
	}
	c.AnswerMaxBytes = limit
	var s string
	if err := c.Do(t.Context(), "GET", "/fits", nil, &s); err != nil || len(s) != limit-2 {
		t.Fatalf("an answer of the limit: %v (%d bytes)", err, len(s))
	}
	for _, path := range []string{"/big", "/big?status=500"} {
		err := c.Do(t.Context(), "GET", path, nil, &s)
		if !errors.Is(err, remote.ErrAnswerTooLarge) {
			t.Fatalf("%s: %v, want ErrAnswerTooLarge", path, err)
		}
	}
}

// TestLeaseWaitOutOfRange: a wait the server refuses reaches it, and its
// 400 comes back; the client does not turn it into a deadline of its own
// (9223372037 s overflowed into a deadline already past: the call failed
// with "context deadline exceeded" before anything was sent).
func TestLeaseWaitOutOfRange(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"type":"x","title":"Invalid request","status":400,"errors":[{"field":"waitSeconds","message":"must be between 0 and 30"}]}`)
	}))
	defer srv.Close()
	c, err := remote.NewClient(srv.URL, "k", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	for _, wait := range []int{-1, 31, 9223372037, -9223372037} {
		_, err := c.Lease(t.Context(), &remote.LeaseRequest{Queues: []string{"q"}, WaitSeconds: remote.Int(wait), LeaseSeconds: remote.Int(30), WorkerID: "w"})
		var e *remote.Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Errors[0].Field != "waitSeconds" {
			t.Errorf("wait %d: got %v, want the server's 400 naming waitSeconds", wait, err)
		}
	}
}

// TestClientErrorsHideLeaseToken: an error of a lease call names the path
// with the lease id's token replaced by xxxxx (workers log these errors;
// the token proves the lease), whether the server is gone or its answer
// does not decode.
func TestClientErrorsHideLeaseToken(t *testing.T) {
	t.Parallel()
	const lease = "0193.2.t0kenSecret"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "not json")
	}))
	c, err := remote.NewClient(srv.URL, "k", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Heartbeat(t.Context(), lease, nil)
	check := func(err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "/v1/leases/0193.2.xxxxx/") || strings.Contains(err.Error(), "t0kenSecret") {
			t.Errorf("error %v: want the lease path without its token", err)
		}
	}
	check(err)
	srv.Close()
	_, err = c.Heartbeat(t.Context(), lease, nil)
	check(err)
	_, err = c.Release(t.Context(), lease, "")
	check(err)
}

func TestRedactLeasePath(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/v1/leases/0193.2.c2VjcmV0/complete": "/v1/leases/0193.2.xxxxx/complete",
		"/v1/leases/0193.2.c2VjcmV0":          "/v1/leases/0193.2.xxxxx",
		"/v1/leases/0193.2.a.b/fail":          "/v1/leases/0193.2.xxxxx/fail",
		"/v1/leases/0193.2/complete":          "/v1/leases/0193.2/complete", // no token to hide
		"/v1/leases":                          "/v1/leases",
		"/v1/jobs/0193.2.x":                   "/v1/jobs/0193.2.x",
	} {
		if got := remote.RedactLeasePath(path); got != want {
			t.Errorf("RedactLeasePath(%q) = %q, want %q", path, got, want)
		}
	}
}
