package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docket-run/docket"
)

// tally is what the run counts as it goes; the backlog is derived from it.
type tally struct {
	// accepted: submissions answered 2xx, warm-ups included.
	accepted atomic.Int64
	// finished: jobs whose terminal state was committed.
	finished atomic.Int64
	// workerErrors: failed lease or complete calls of the HTTP workers.
	workerErrors atomic.Int64

	mu             sync.Mutex
	firstWorkerErr string
}

// backlog is the jobs accepted and not finished (see the package comment).
func (t *tally) backlog() int {
	return max(0, int(t.accepted.Load()-t.finished.Load()))
}

// onJobFinished counts the Go workers' commits of terminal states.
func (t *tally) onJobFinished(e docket.JobFinishedEvent) {
	if e.State.Terminal() {
		t.finished.Add(1)
	}
}

func (t *tally) workerError(err error) {
	if t.workerErrors.Add(1) == 1 {
		t.mu.Lock()
		t.firstWorkerErr = err.Error()
		t.mu.Unlock()
	}
}

// loadArgs is the Go workers' view of a job.
type loadArgs struct {
	N int `json:"n"`
}

func (loadArgs) JobType() string { return JobType }

// startGoWorkers runs a docket.Worker on client with a no-op handler; the
// client's OnJobFinished counts its completions. The returned function
// stops it.
func startGoWorkers(ctx context.Context, client *docket.Client, cfg Config) (func(context.Context), error) {
	w := docket.NewWorker(client, docket.WorkerConfig{
		NodeID:       "load-go-worker",
		Queues:       map[string]int{Queue: cfg.WorkerConcurrency},
		PollInterval: cfg.WorkerPollInterval,
	})
	docket.AddHandler(w, func(context.Context, *docket.Job[loadArgs]) error { return nil })
	if err := w.Start(ctx); err != nil {
		return nil, fmt.Errorf("start the Go workers: %w", err)
	}
	return w.Stop, nil
}

// httpWorkers are remote workers on the server's lease protocol: each
// leases up to httpLeaseMax jobs with a long poll and completes them one
// by one.
type httpWorkers struct {
	url  string
	key  string
	http *http.Client
	t    *tally
}

// HTTP worker timings: the long poll of a lease call (a worker stops
// within it), the lease itself, and the pause after a failed call.
const (
	httpLeaseWait    = 5 // seconds
	httpLeaseSeconds = 60
	httpErrorPause   = 100 * time.Millisecond
)

// startHTTPWorkers starts cfg.WorkerConcurrency HTTP workers on the
// server at url. The returned function stops them and waits.
func startHTTPWorkers(ctx context.Context, url, key string, cfg Config, t *tally) func(context.Context) {
	h := &httpWorkers{
		url: url, key: key, t: t,
		http: &http.Client{
			Timeout:   time.Duration(httpLeaseWait)*time.Second + cfg.RequestTimeout,
			Transport: &http.Transport{MaxIdleConnsPerHost: 2 * cfg.WorkerConcurrency, DisableCompression: true},
		},
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range cfg.WorkerConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.run(ctx, fmt.Sprintf("load-http-worker-%d", i+1))
		}()
	}
	return func(context.Context) {
		cancel()
		wg.Wait()
		h.http.CloseIdleConnections()
	}
}

type leaseAnswer struct {
	Leases []struct {
		LeaseID string `json:"leaseId"`
	} `json:"leases"`
}

func (h *httpWorkers) run(ctx context.Context, id string) {
	// Strings and ints: encoding cannot fail.
	body, _ := json.Marshal(map[string]any{"queues": []string{Queue}, "max": httpLeaseMax,
		"waitSeconds": httpLeaseWait, "leaseSeconds": httpLeaseSeconds, "workerId": id})
	for ctx.Err() == nil {
		var got leaseAnswer
		if err := h.call(ctx, "/v1/leases", body, &got); err != nil {
			if ctx.Err() != nil {
				return
			}
			h.t.workerError(fmt.Errorf("lease: %w", err))
			pause(ctx, httpErrorPause)
			continue
		}
		for _, l := range got.Leases {
			if err := h.call(ctx, "/v1/leases/"+l.LeaseID+"/complete", nil, nil); err != nil {
				if ctx.Err() != nil {
					return
				}
				h.t.workerError(fmt.Errorf("complete: %w", err))
				continue
			}
			h.t.finished.Add(1)
		}
	}
}

// call POSTs body to path and decodes a 2xx answer into out (when not
// nil); any other status is an error.
func (h *httpWorkers) call(ctx context.Context, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+h.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := h.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s: status %d: %s", path, res.StatusCode, bytes.TrimSpace(data))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// pause waits d or until ctx ends: the back-off after a failed call.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
