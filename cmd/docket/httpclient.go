package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// ServerDefault is the server the job and worker commands talk to when
// neither --server nor DOCKET_SERVER says otherwise: docket serve's default
// listen address.
const ServerDefault = "http://127.0.0.1:8080"

// requestTimeout bounds every call but the lease long-poll, which gets its
// wait on top.
const requestTimeout = 30 * time.Second

// apiClient calls a docket server's HTTP API.
type apiClient struct {
	base string // no trailing slash
	key  string
	http *http.Client
}

// apiFlags are --server and --api-key, read from DOCKET_SERVER and
// DOCKET_API_KEY by default.
type apiFlags struct {
	server string
	key    string
}

func addAPIFlags(flags interface {
	StringVar(p *string, name, value, usage string)
}) *apiFlags {
	f := &apiFlags{}
	server := os.Getenv("DOCKET_SERVER")
	if server == "" {
		server = ServerDefault
	}
	flags.StringVar(&f.server, "server", server, "docket server URL (env DOCKET_SERVER)")
	// The key's default is read when used, so --help never shows it.
	flags.StringVar(&f.key, "api-key", "", "API key (env DOCKET_API_KEY)")
	return f
}

func (f *apiFlags) client() (*apiClient, error) {
	u, err := url.Parse(f.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--server %q: want a URL like %s", f.server, ServerDefault)
	}
	key := f.key
	if key == "" {
		key = os.Getenv("DOCKET_API_KEY")
	}
	if key == "" {
		return nil, errors.New("no API key: pass --api-key or set DOCKET_API_KEY (make one with docket keys create)")
	}
	return &apiClient{base: strings.TrimRight(f.server, "/"), key: key, http: &http.Client{}}, nil
}

// apiError is a problem answered by the server (RFC 9457).
type apiError struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
	// RetryAfter is the Retry-After header of a 429, if any.
	RetryAfter time.Duration `json:"-"`
}

// Error reads "<status> <title>: <detail> (field: message; …)".
func (e *apiError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", e.Status, e.Title)
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	// Field errors the detail does not already say.
	var parts []string
	for _, fe := range e.Errors {
		if part := fe.Field + ": " + fe.Message; !strings.Contains(e.Detail, part) {
			parts = append(parts, part)
		}
	}
	if len(parts) > 0 {
		b.WriteString(" (" + strings.Join(parts, "; ") + ")")
	}
	return b.String()
}

// temporary reports whether sending the same call again later may work.
func (e *apiError) temporary() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// do sends body (nil for none) as JSON and decodes a 2xx answer into out
// (nil to discard it, *json.RawMessage to keep it as is). Other answers are
// an *apiError.
func (c *apiClient) do(ctx context.Context, method, path string, body, out any, header ...string) error {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(buf)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return problemOf(res, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// problemOf reads a problem answer; an answer that is not one (a proxy's
// HTML page, say) becomes a problem with the status text and a snippet.
func problemOf(res *http.Response, data []byte) *apiError {
	p := &apiError{}
	if err := json.Unmarshal(data, p); err != nil || p.Title == "" {
		snippet := strings.TrimSpace(string(data))
		if len(snippet) > 200 {
			snippet = snippet[:200] + "…"
		}
		p = &apiError{Title: http.StatusText(res.StatusCode), Detail: snippet}
	}
	p.Status = res.StatusCode
	if s := res.Header.Get("Retry-After"); s != "" {
		var secs int
		if _, err := fmt.Sscan(s, &secs); err == nil && secs > 0 {
			p.RetryAfter = time.Duration(secs) * time.Second
		}
	}
	return p
}

// outputFlag adds -o/--output (table or json).
func outputFlag(cmd *cobra.Command) *string {
	return cmd.PersistentFlags().StringP("output", "o", "table", "output format: table or json")
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return fmt.Errorf("--output %q: want table or json", o)
	}
	return nil
}

// writeJSON prints a server answer indented.
func writeJSON(w io.Writer, raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}
