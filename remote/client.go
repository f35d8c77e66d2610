package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// RequestTimeoutDefault bounds a call whose context has no deadline; a
// lease request gets its wait on top.
const RequestTimeoutDefault = 30 * time.Second

// AnswerMaxBytesDefault bounds the body of an answer the client reads:
// 128 MiB, room for a lease answer of LeaseMaxJobs jobs whose payloads are
// each as large as a server's default request limit (1 MiB), many times
// over. A larger answer is an error, not read into memory.
const AnswerMaxBytesDefault = 128 << 20

// ErrAnswerTooLarge: the server's answer exceeded the client's
// AnswerMaxBytes.
var ErrAnswerTooLarge = errors.New("answer too large")

// Client calls a docket server's HTTP API with an API key. It is safe for
// concurrent use.
type Client struct {
	base string // no trailing slash
	key  string
	http *http.Client
	// RequestTimeout bounds each call whose context has no deadline;
	// default RequestTimeoutDefault.
	RequestTimeout time.Duration
	// AnswerMaxBytes bounds the body of each answer read; a larger one
	// fails the call with ErrAnswerTooLarge. Default AnswerMaxBytesDefault.
	AnswerMaxBytes int64
}

// NewClient makes a client of the server at baseURL (http:// or https://)
// sending apiKey as its bearer token, over hc (nil: a new http.Client).
func NewClient(baseURL, apiKey string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want http://host:port or https://host", baseURL)
	}
	if apiKey == "" {
		return nil, errors.New("no API key")
	}
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), key: apiKey, http: hc,
		RequestTimeout: RequestTimeoutDefault, AnswerMaxBytes: AnswerMaxBytesDefault}, nil
}

// Lease takes up to req.Max jobs (see LeaseRequest). The context's deadline,
// when it has none, is the request timeout plus the wait (a wait outside
// 0..WaitSecondsMax adds nothing: the server refuses it, naming it).
func (c *Client) Lease(ctx context.Context, req *LeaseRequest) ([]Lease, error) {
	if _, ok := ctx.Deadline(); !ok && req.WaitSeconds != nil {
		wait := time.Duration(0)
		if n := *req.WaitSeconds; n > 0 && n <= WaitSecondsMax {
			wait = time.Duration(n) * time.Second
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout()+wait)
		defer cancel()
	}
	var resp LeaseResponse
	if err := c.Do(ctx, http.MethodPost, PathLeases, req, &resp); err != nil {
		return nil, err
	}
	return resp.Leases, nil
}

// Heartbeat renews a lease (and records progress when req.Progress is
// set). req may be nil: renew for the server's default.
func (c *Client) Heartbeat(ctx context.Context, leaseID string, req *HeartbeatRequest) (*HeartbeatResponse, error) {
	if req == nil {
		req = &HeartbeatRequest{}
	}
	var resp HeartbeatResponse
	if err := c.Do(ctx, http.MethodPost, leasePath(leaseID, ActionHeartbeat), req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Complete records that the job succeeded, with result (nil for none).
func (c *Client) Complete(ctx context.Context, leaseID string, result json.RawMessage) error {
	return c.Do(ctx, http.MethodPost, leasePath(leaseID, ActionComplete), &CompleteRequest{Result: result}, nil)
}

// Fail records a failed attempt and returns the job's state after it
// (RETRY, DEAD or CANCELED).
func (c *Client) Fail(ctx context.Context, leaseID, message string, retryable bool) (string, error) {
	var resp StatusResponse
	err := c.Do(ctx, http.MethodPost, leasePath(leaseID, ActionFail), &FailRequest{Error: message, Retryable: &retryable}, &resp)
	return resp.Status, err
}

// Release hands the job back unfinished: the attempt is refunded and the
// job is due again at once. It returns the job's state after it (RETRY, or
// CANCELED when a cancel was requested). Past ReleaseRefundsMax refunded
// interruptions of the job, the release counts as a failed attempt (RETRY
// after backoff, or DEAD).
func (c *Client) Release(ctx context.Context, leaseID, reason string) (string, error) {
	var resp StatusResponse
	err := c.Do(ctx, http.MethodPost, leasePath(leaseID, ActionRelease), &ReleaseRequest{Reason: reason}, &resp)
	return resp.Status, err
}

func leasePath(leaseID, action string) string {
	return PathLeases + "/" + url.PathEscape(leaseID) + "/" + action
}

// Do sends body (nil for none) as JSON to path (e.g. "/v1/jobs") and
// decodes a 2xx answer into out (nil to discard it, *json.RawMessage to
// keep it as is). Any other answer is an *Error. An answer longer than
// AnswerMaxBytes is ErrAnswerTooLarge, whatever its status.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	_, err := c.DoStatus(ctx, method, path, body, out)
	return err
}

// DoStatus is Do that also returns the status of a 2xx answer, for the
// calls whose status says something (201 Created against 200 OK).
func (c *Client) DoStatus(ctx context.Context, method, path string, body, out any) (int, error) {
	if body == nil {
		return c.DoRaw(ctx, method, path, "", nil, out)
	}
	buf, err := json.Marshal(body)
	if err != nil {
		return 0, fmt.Errorf("encode request: %w", err)
	}
	return c.DoRaw(ctx, method, path, "application/json", buf, out)
}

// DoRaw is DoStatus with a body sent as is, of type contentType (a body
// nil: none), e.g. the JSON lines or CSV of a runs batch.
func (c *Client) DoRaw(ctx context.Context, method, path, contentType string, body []byte, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout())
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	// A lease id's token is not repeated in errors (they are logged).
	shown := RedactLeasePath(path)
	res, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && shown != path {
			ue.URL = c.base + shown
		}
		return 0, fmt.Errorf("%s %s: %w", method, shown, err)
	}
	defer res.Body.Close()
	limit := c.answerMax()
	data, err := io.ReadAll(io.LimitReader(res.Body, limit+1))
	if err != nil {
		return 0, fmt.Errorf("%s %s: read answer: %w", method, shown, err)
	}
	if int64(len(data)) > limit {
		return res.StatusCode, fmt.Errorf("%s %s: %w: status %d, more than %d bytes", method, shown, ErrAnswerTooLarge, res.StatusCode, limit)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return res.StatusCode, problemOf(res, data)
	}
	if out == nil {
		return res.StatusCode, nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return res.StatusCode, fmt.Errorf("%s %s: decode answer: %w", method, shown, err)
	}
	return res.StatusCode, nil
}

func (c *Client) answerMax() int64 {
	if c.AnswerMaxBytes <= 0 {
		return AnswerMaxBytesDefault
	}
	return c.AnswerMaxBytes
}

func (c *Client) timeout() time.Duration {
	if c.RequestTimeout <= 0 {
		return RequestTimeoutDefault
	}
	return c.RequestTimeout
}

// BaseURL is the server's URL, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }
