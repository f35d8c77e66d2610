package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// benchConn is one simulated contributor's HTTP/1.1 connection to the
// server: requests written whole from a buffer, answers read with
// net/http's own parser (http.ReadResponse: lengths, chunks, headers).
// It replaces http.Client in the crowd benchmark's loop because the
// benchmark's contributors share the machine with the server they
// measure: http.Transport hands every request to a connection's write
// and read goroutines and back, which cost the load generator about as
// much CPU as a simple request costs the server. One request at a time
// per connection, as a contributor works; the connection is dialed again
// after an error or an answer that closes it.
type benchConn struct {
	addr   string      // host:port
	host   string      // the Host header
	tls    *tls.Config // nil for http
	header []byte      // the headers every request carries (Host, Authorization, Content-Type)

	conn net.Conn
	br   *bufio.Reader
	req  []byte // the request being written
	body bytes.Buffer
}

// newBenchConn prepares (without dialing) a connection to base, an http
// or https URL, whose requests carry the bearer key.
func newBenchConn(base, key string) (*benchConn, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	c := &benchConn{host: u.Host, addr: u.Host}
	switch u.Scheme {
	case "http":
		if u.Port() == "" {
			c.addr = net.JoinHostPort(u.Hostname(), "80")
		}
	case "https":
		if u.Port() == "" {
			c.addr = net.JoinHostPort(u.Hostname(), "443")
		}
		c.tls = &tls.Config{ServerName: u.Hostname()}
	default:
		return nil, fmt.Errorf("server URL %q: want http or https", base)
	}
	c.header = []byte("Host: " + c.host + "\r\nAuthorization: Bearer " + key + "\r\nContent-Type: application/json\r\n")
	return c, nil
}

// close closes the connection, if one is open.
func (c *benchConn) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

// post sends body to path and returns the answer's status and body (valid
// until the next call). Like http.Client with a POST, it does not send a
// request again on a new connection when the old one failed: a take
// might have been made.
func (c *benchConn) post(ctx context.Context, path string, body []byte) (int, []byte, error) {
	if err := context.Cause(ctx); err != nil {
		return 0, nil, err // the benchmark stops: another contributor failed, or ^C
	}
	if c.conn == nil {
		d := net.Dialer{Timeout: 10 * time.Second}
		var err error
		if c.tls != nil {
			c.conn, err = (&tls.Dialer{NetDialer: &d, Config: c.tls}).DialContext(ctx, "tcp", c.addr)
		} else {
			c.conn, err = d.DialContext(ctx, "tcp", c.addr)
		}
		if err != nil {
			return 0, nil, err
		}
		c.br = bufio.NewReaderSize(c.conn, 8<<10)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.conn.SetDeadline(dl)
	} else {
		_ = c.conn.SetDeadline(time.Now().Add(time.Minute))
	}
	// a context that ends cuts the request in flight
	conn := c.conn
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	c.req = append(c.req[:0], "POST "...)
	c.req = append(c.req, path...)
	c.req = append(c.req, " HTTP/1.1\r\n"...)
	c.req = append(c.req, c.header...)
	c.req = append(c.req, "Content-Length: "...)
	c.req = strconv.AppendInt(c.req, int64(len(body)), 10)
	c.req = append(c.req, "\r\n\r\n"...)
	c.req = append(c.req, body...)
	if _, err := c.conn.Write(c.req); err != nil {
		return 0, nil, c.fail(ctx, err)
	}
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, nil, c.fail(ctx, err)
	}
	c.body.Reset()
	_, err = c.body.ReadFrom(res.Body)
	_ = res.Body.Close()
	if err == nil && res.Close {
		c.close()
	}
	if err != nil {
		return 0, nil, c.fail(ctx, err)
	}
	return res.StatusCode, c.body.Bytes(), nil
}

// fail closes the connection after err; when ctx ended, which cut the
// request (its deadline set to now), the error is ctx's cause first.
func (c *benchConn) fail(ctx context.Context, err error) error {
	c.close()
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("%w (%w)", cause, err)
	}
	return err
}
