package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bodyBound is the short bound of these tests.
const bodyBound = 200 * time.Millisecond

// TestBodyReadTimeoutCutsAStalledBody: a client that sends half a body
// and stalls is cut off after the bound (only the header was bounded, so
// it held the connection, and a handler, forever).
func TestBodyReadTimeoutCutsAStalledBody(t *testing.T) {
	t.Parallel()
	readErr := make(chan error, 1)
	srv := httptest.NewServer(limitBodyRead(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		if err != nil {
			http.Error(w, "body", http.StatusBadRequest)
		}
	}), bodyBound))
	t.Cleanup(srv.Close)

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = fmt.Fprintf(conn, "POST /v1/jobs HTTP/1.1\r\nHost: docket\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"type\":")
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(start.Add(10*bodyBound)))
	_, err = io.ReadAll(conn) // until the server closes the connection
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server still held the connection after 10 bounds")
	require.GreaterOrEqual(t, time.Since(start), bodyBound-20*time.Millisecond)
	select {
	case err := <-readErr:
		require.Error(t, err, "the handler's read failed")
	case <-time.After(10 * bodyBound):
		t.Fatal("the handler's read did not return")
	}
}

// TestBodyReadTimeoutSparesLongRequests: the bound is on the body only; a
// long-poll whose body is in, and an SSE stream without a body, run past
// it with their context alive.
func TestBodyReadTimeoutSparesLongRequests(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(limitBodyRead(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "got %s\n", body)
		w.(http.Flusher).Flush()
		select {
		case <-time.After(5 * bodyBound): // a long-poll's wait, a stream's quiet spell
		case <-r.Context().Done():
			return
		}
		fmt.Fprintln(w, "done")
	}), bodyBound))
	t.Cleanup(srv.Close)

	for _, tc := range []struct{ name, method, body string }{
		{"LongPoll", "POST", `{"waitSeconds":30}`},
		{"Stream", "GET", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL, body)
			require.NoError(t, err)
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			lines := bufio.NewScanner(resp.Body)
			require.True(t, lines.Scan())
			require.Equal(t, "got "+tc.body, lines.Text())
			require.True(t, lines.Scan(), "the response ended before the wait did: %v", lines.Err())
			require.Equal(t, "done", lines.Text())
		})
	}
}
