//go:build unix

package api

import (
	"bufio"
	"fmt"
	"io"
	"net"
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
	b := eventsSetup(t, testdb.Backends()[0], func(c *Config) { c.EventWriteTimeout = 200 * time.Millisecond })
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
	// 20,000 events of ~330 bytes: more than the sockets' buffers hold
	// (Linux sends at most 4 MiB ahead by default).
	for range 20 {
		batch := make([]docket.InsertParams, 1000)
		for i := range batch {
			batch[i] = docket.InsertParams{Args: sseJob{}}
		}
		_, err := b.client.InsertMany(t.Context(), batch)
		require.NoError(t, err)
	}
	b.waitPublished(t)
	// Only now read: what the buffers hold, then the end of the stream.
	// A stream still open would be drained and then wait for more events
	// (or heartbeats) instead of ending.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	n, err := io.Copy(io.Discard, br)
	require.NoError(t, err, "the stream did not end (%d bytes read)", n)
	require.Less(t, n, int64(20000*330), "the stream was cut before it sent everything")
}
