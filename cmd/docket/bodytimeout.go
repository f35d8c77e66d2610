package main

import (
	"io"
	"net/http"
	"time"
)

// bodyReadTimeoutDefault is how long a request body may take to arrive.
const bodyReadTimeoutDefault = time.Minute

// limitBodyRead gives each request that has a body d to deliver all of it:
// the connection's read deadline is set when the handler starts and
// cleared once the body is read to its end, so a client that
// sends half a body and stalls is cut off after d, where only the header
// was bounded (ReadHeaderTimeout). http.Server.ReadTimeout would bound the
// body too, but its deadline stays on the connection while the handler
// runs: the server's background read then fails and cancels the request,
// which would end a long-poll lease (waitSeconds) or an SSE stream. A
// request without a body gets no deadline. d <= 0: no bound.
func limitBodyRead(next http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		// An error means the writer cannot set deadlines (not a net/http
		// connection); the request is served unbounded then.
		if rc.SetReadDeadline(time.Now().Add(d)) == nil {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody clears the connection's read deadline at the end of the
// body, so that the handler may then run (and stream) for as long as it
// needs.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	cleared bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	// Only the end of the body clears it: after a failed read (the
	// deadline passed) the server still reads what is left of the body
	// before it would reuse the connection, and that read must fail too,
	// which closes the connection.
	if err == io.EOF && !b.cleared {
		b.cleared = true
		// An error here leaves the bound in place, which is what we had.
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
