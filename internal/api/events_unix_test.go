//go:build unix

package api

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// A client that stops reading does not hold its stream (nor the server's
// shutdown) forever: a write it does not take within EventWriteTimeout
// ends the stream, and the client resumes with Last-Event-ID.
func TestSSEClientThatDoesNotReadIsCut(t *testing.T) {
	t.Parallel()
	// One stream per key: a second one is accepted once the first ended,
	// which is how the test sees the cut without reading.
	b := eventsSetup(t, testdb.Backends()[0], func(c *Config) {
		c.EventWriteTimeout = 200 * time.Millisecond
		c.MaxStreamsPerKey = 1
	})
	// A small receive buffer, set before connecting so that the window
	// the client offers is small from the start.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.DialContext(t.Context(), "tcp", b.server.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET /v1/events HTTP/1.1\r\nHost: docket\r\nAuthorization: Bearer %s\r\n\r\n", b.keys[docket.RoleViewer])
	require.NoError(t, err)
	// The stream is open (its tail taken) once its first line came.
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if line == "retry: 1000\n" {
			break
		}
	}
	// Batches of 1,000 events of ~330 bytes until the stream is cut:
	// how much the sockets' buffers hold ahead of a reader that does not
	// read varies (Linux's autotuning, the machine's settings), so the
	// test does not guess it; a stream that is never cut fails at 100
	// batches (33 MB).
	open := func() bool {
		req, err := http.NewRequestWithContext(t.Context(), "GET", b.server.URL+"/v1/events", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+b.keys[docket.RoleViewer])
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, resp.StatusCode)
		return resp.StatusCode == http.StatusTooManyRequests
	}
	batches := 0
	for ; batches < 100 && open(); batches++ {
		batch := make([]docket.InsertParams, 1000)
		for i := range batch {
			batch[i] = docket.InsertParams{Args: sseJob{}}
		}
		_, err := b.client.InsertMany(t.Context(), batch)
		require.NoError(t, err)
		b.waitPublished(t)
		// The stream has the write timeout to fail its write.
		time.Sleep(300 * time.Millisecond)
	}
	require.Less(t, batches, 100, "the stream of a client that does not read was never cut")
	// Now read: what the buffers hold, then the end of the stream.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	n, err := io.Copy(io.Discard, br)
	require.NoError(t, err, "the stream did not end (%d bytes read)", n)
	require.Less(t, n, int64(batches*1000*330), "the stream was cut before it sent everything")
}
