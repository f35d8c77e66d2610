package loadtest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/remote"
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

// httpWorkers are remote workers on the server's lease protocol (package
// remote's client): each leases up to httpLeaseMax jobs with a long poll
// and completes them one by one.
type httpWorkers struct {
	api  *remote.Client
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
func startHTTPWorkers(ctx context.Context, url, key string, cfg Config, t *tally) (func(context.Context), error) {
	hc := &http.Client{
		Timeout:   time.Duration(httpLeaseWait)*time.Second + cfg.RequestTimeout,
		Transport: &http.Transport{MaxIdleConnsPerHost: 2 * cfg.WorkerConcurrency, DisableCompression: true},
	}
	api, err := remote.NewClient(url, key, hc)
	if err != nil {
		return nil, err
	}
	api.RequestTimeout = cfg.RequestTimeout
	h := &httpWorkers{api: api, http: hc, t: t}
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
	}, nil
}

func (h *httpWorkers) run(ctx context.Context, id string) {
	req := &remote.LeaseRequest{
		Queues: []string{Queue}, Max: remote.Int(httpLeaseMax), WaitSeconds: remote.Int(httpLeaseWait),
		LeaseSeconds: remote.Int(httpLeaseSeconds), WorkerID: id,
	}
	for ctx.Err() == nil {
		leases, err := h.api.Lease(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			h.t.workerError(fmt.Errorf("lease: %w", err))
			pause(ctx, httpErrorPause)
			continue
		}
		for _, l := range leases {
			if err := h.api.Complete(ctx, l.LeaseID, nil); err != nil {
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

// pause waits d or until ctx ends: the back-off after a failed call.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
