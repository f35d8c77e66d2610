package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBenchConn: a contributor's connection posts with the key, reads
// answers of a known length and chunked ones on one connection, and a
// context that ends cuts a request the server holds.
func TestBenchConn(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Authorization") != "Bearer k1" { // (the handler's goroutine: no require)
			http.Error(w, "want the key k1", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/length":
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(append([]byte("got "), body...))
		case "/chunked":
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(strings.Repeat("x", 10_000))) // past net/http's buffer: chunked
			w.(http.Flusher).Flush()
			_, _ = w.Write([]byte("end"))
		case "/hold":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	defer close(release)

	c, err := newBenchConn(srv.URL, "k1")
	require.NoError(t, err)
	defer c.close()
	ctx := t.Context()
	status, data, err := c.post(ctx, "/length", []byte(`{"a":1}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, `got {"a":1}`, string(data))
	status, data, err = c.post(ctx, "/chunked", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, status)
	require.Equal(t, strings.Repeat("x", 10_000)+"end", string(data))
	status, _, err = c.post(ctx, "/length", []byte(`b`))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, int32(1), conns.Load(), "one connection for every request")

	cut, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, _, err = c.post(cut, "/hold", nil)
	require.ErrorIs(t, err, context.Canceled)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "cut while held, not refused")
	require.Less(t, time.Since(start), 10*time.Second, "cut when its context ended")
	_, _, err = c.post(cut, "/length", nil)
	require.ErrorIs(t, err, context.Canceled, "no request after the context ended")
}
