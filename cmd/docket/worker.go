package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/docket-run/docket/remote"
)

// docket worker is a remote worker: it leases jobs from a server over HTTP
// and runs a program per job. The program gets the payload on stdin and
// the job's identity in its environment; it prints the result JSON on
// stdout and says how it went with its exit status.

// exitRetryable is the exit status of an --exec program whose job may be
// retried (EX_TEMPFAIL from sysexits.h). 0 is success; any other status
// fails the job for good.
const exitRetryable = 75

// Limits and timings of the worker.
const (
	resultMaxBytes  = 1 << 20 // stdout beyond this fails the job
	stderrTailBytes = 4 << 10 // the end of stderr becomes the error message
	leaseRetryMax   = 10 * time.Second
	// emptyPollInterval: at most one lease request per interval while
	// none comes back.
	emptyPollInterval = time.Second
	killGraceDefault  = 5 * time.Second
	concurrencyMax    = 1000
	// requestTimeout bounds every call but the lease long-poll, which gets
	// its wait on top.
	requestTimeout = remote.RequestTimeoutDefault
)

// workerConfig is what docket worker was asked to do.
type workerConfig struct {
	Queues          []string
	Argv            []string // the program and its arguments
	Concurrency     int
	LeaseSeconds    int
	WaitSeconds     int
	WorkerID        string
	ShutdownTimeout time.Duration // how long running programs may finish after SIGTERM
	KillGrace       time.Duration // between SIGTERM and SIGKILL of a program
	Logger          *slog.Logger
}

func workerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker --queue Q --exec 'CMD ARGS'",
		Short: "Run a program per job, leasing jobs from a docket server over HTTP",
		Long: `Run a program for each job of the queues, leasing jobs from a docket server
over HTTP (the remote-worker protocol; the key needs role worker or admin).

For each job, CMD runs with the job's payload on stdin and DOCKET_JOB_ID,
DOCKET_JOB_TYPE, DOCKET_QUEUE, DOCKET_ATTEMPT and DOCKET_LEASE_ID in its
environment (job id and attempt let it make its side effects idempotent);
the rest of the worker's environment is passed on, except DOCKET_API_KEY and
DOCKET_ADMIN_KEY. Its stdout, if not empty, must be JSON: the job's result. Its exit status:
  0      the job succeeded
  75     the job failed and may be retried (EX_TEMPFAIL)
  other  the job failed for good (DEAD)
The last 4 KiB of stderr are the error message of a failure.

--exec is split into words like a shell would (quotes and backslashes) but no
shell runs it: write sh -c '…' for pipes or variables.

The lease is renewed every --lease-seconds/3 while CMD runs. If the job is
canceled, or the lease is lost, CMD is stopped (SIGTERM, then SIGKILL).
On SIGTERM or SIGINT the worker takes no new jobs, lets running programs
finish for up to --shutdown-timeout, then stops them and gives their jobs
back (POST /v1/leases/{id}/release): the interrupted attempt is refunded, so
a deploy never kills a job on its last attempt, and the job is due again
at once for another worker.`,
		Example: `  docket worker --queue thumbnails --exec './make-thumbnail --size 128'
  docket worker --queue echo --concurrency 4 --exec 'sh -c "cat; exit 0"'`,
		Args: cobra.NoArgs,
	}
	api := addAPIFlags(cmd.Flags())
	f := cmd.Flags()
	queues := f.StringArray("queue", nil, "queue to take jobs from (repeat for several; required)")
	execLine := f.String("exec", "", "program and arguments to run per job (required)")
	concurrency := f.Int("concurrency", 1, "jobs run at once")
	leaseSeconds := f.Int("lease-seconds", 30, fmt.Sprintf("lease length, renewed every third of it (%d..%d)", remote.LeaseSecondsMin, remote.LeaseSecondsMax))
	waitSeconds := f.Int("wait-seconds", 20, fmt.Sprintf("long-poll this long for a job when none is due (0..%d)", remote.WaitSecondsMax))
	workerID := f.String("worker-id", "", "name recorded as the jobs' holder (default HOST-PID)")
	shutdownTimeout := f.Duration("shutdown-timeout", 30*time.Second, "on SIGTERM, how long running programs may finish")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		argv, err := splitCommandLine(*execLine)
		switch {
		case err != nil:
			return usageErrorf("--exec: %w", err)
		case len(argv) == 0:
			return usageErrorf("--exec is required: the program to run per job")
		case len(*queues) == 0:
			return usageErrorf("--queue is required")
		case *concurrency < 1 || *concurrency > concurrencyMax:
			return usageErrorf("--concurrency %d: want 1..%d", *concurrency, concurrencyMax)
		case *leaseSeconds < remote.LeaseSecondsMin || *leaseSeconds > remote.LeaseSecondsMax:
			return usageErrorf("--lease-seconds %d: want %d..%d", *leaseSeconds, remote.LeaseSecondsMin, remote.LeaseSecondsMax)
		case *waitSeconds < 0 || *waitSeconds > remote.WaitSecondsMax:
			return usageErrorf("--wait-seconds %d: want 0..%d", *waitSeconds, remote.WaitSecondsMax)
		case *shutdownTimeout < 0:
			return usageErrorf("--shutdown-timeout %s: must not be negative", *shutdownTimeout)
		}
		if _, err := exec.LookPath(argv[0]); err != nil {
			return fmt.Errorf("--exec: %w", err)
		}
		id := *workerID
		if id == "" {
			id = defaultWorkerID()
		}
		c, err := api.client()
		if err != nil {
			return err
		}
		w := &remoteWorker{api: c, cfg: workerConfig{
			Queues: *queues, Argv: argv, Concurrency: *concurrency, LeaseSeconds: *leaseSeconds,
			WaitSeconds: *waitSeconds, WorkerID: id, ShutdownTimeout: *shutdownTimeout,
			KillGrace: killGraceDefault,
			Logger:    slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)).With("service", "worker", "worker_id", id),
		}}
		return w.run(cmd.Context())
	}
	return cmd
}

// defaultWorkerID is HOST-PID with characters a name may not have replaced.
func defaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	id := []byte(host + "-" + strconv.Itoa(os.Getpid()))
	for i, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._-:/", c) >= 0
		if !ok {
			id[i] = '-'
		}
	}
	return string(id)
}

type remoteWorker struct {
	api *remote.Client
	cfg workerConfig
}

// run leases and runs jobs until ctx is canceled, then drains: running
// programs get cfg.ShutdownTimeout to finish before they are stopped and
// their jobs released (given back with the attempt refunded). It returns nil after a clean drain, and
// the server's problem when it refuses to lease (a bad key, say): errors
// that may pass (network, 5xx, 429) are retried with backoff instead.
func (w *remoteWorker) run(ctx context.Context) error {
	log := w.cfg.Logger
	log.Info("worker started", "queues", w.cfg.Queues, "exec", w.cfg.Argv, "concurrency", w.cfg.Concurrency)

	// hard is canceled ShutdownTimeout after ctx: running programs are
	// stopped then. Reports use contexts that outlive both.
	hard, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHard()

	slots := make(chan struct{}, w.cfg.Concurrency)
	var wg sync.WaitGroup
	failures := 0
	var fatal error
	for ctx.Err() == nil {
		// Wait for one free slot, then take every other free one.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		n := 1
	more:
		for n < min(w.cfg.Concurrency, remote.LeaseMaxJobs) {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		asked := time.Now()
		leases, err := w.lease(ctx, n)
		for range n - len(leases) {
			<-slots
		}
		for _, l := range leases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				w.runJob(hard, l)
			}()
		}
		if err == nil {
			failures = 0
			if len(leases) == 0 {
				// Nothing came (the long poll ended, or there is none with
				// --wait-seconds 0): do not ask more than once per interval.
				pause(ctx, emptyPollInterval-time.Since(asked))
			}
			continue
		}
		if ctx.Err() != nil {
			break
		}
		if !remote.IsTemporary(err) {
			// A refused key or request will not pass by itself.
			fatal = err
			break
		}
		failures++
		delay := retryDelay(err, failures)
		log.Warn("lease jobs failed; trying again", "error", err, "retry_in", delay)
		pause(ctx, delay)
	}

	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	if running := len(slots); running > 0 {
		log.Info("stopping: waiting for running jobs", "running", running, "timeout", w.cfg.ShutdownTimeout)
		t := time.NewTimer(w.cfg.ShutdownTimeout)
		select {
		case <-drained:
		case <-t.C:
			log.Warn("shutdown timeout: stopping running jobs and giving them back")
			stopHard()
			<-drained
		}
		t.Stop()
	}
	<-drained
	log.Info("worker stopped")
	return fatal
}

// retryDelay is how long to wait after the n-th failure in a row to lease:
// the server's Retry-After when it sent one, else exponential with jitter.
func retryDelay(err error, n int) time.Duration {
	var p *remote.Error
	if errors.As(err, &p) && p.RetryAfter > 0 {
		return p.RetryAfter
	}
	d := min(leaseRetryMax, 250*time.Millisecond<<min(n-1, 10))
	return d/2 + rand.N(d/2+1)
}

// leaseShutdownGrace is how long a lease request in flight when the worker
// is told to stop may still take: a response already on its way (jobs
// leased) is read and its jobs run (and are given back at the shutdown
// timeout) instead of being dropped with the connection, which would
// leave them RUNNING until their leases expire. A long poll with nothing
// to lease is cut then; a lease the server grants to a request already
// cut is given back by the server.
const leaseShutdownGrace = 500 * time.Millisecond

func (w *remoteWorker) lease(ctx context.Context, n int) ([]remote.Lease, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(w.cfg.WaitSeconds)*time.Second+requestTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(leaseShutdownGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-rctx.Done():
		}
	})
	defer stop()
	return w.api.Lease(rctx, &remote.LeaseRequest{
		Queues: w.cfg.Queues, Max: remote.Int(n), WaitSeconds: remote.Int(w.cfg.WaitSeconds),
		LeaseSeconds: remote.Int(w.cfg.LeaseSeconds), WorkerID: w.cfg.WorkerID,
	})
}

// Why a program was stopped before it exited on its own.
type stopReason int

const (
	stopNone     stopReason = iota
	stopShutdown            // the worker is shutting down past its timeout
	stopCanceled            // the job was canceled (heartbeat said so)
	stopLost                // the lease is no longer ours (409)
)

// runJob runs the program for one lease and reports the outcome. hard is
// canceled when the worker must stop the program (shutdown timeout).
func (w *remoteWorker) runJob(hard context.Context, l remote.Lease) {
	log := w.cfg.Logger.With("job_id", l.JobID, "job_type", l.JobType, "attempt", l.Attempt)
	log.Info("job started")
	start := time.Now()

	runCtx, stop := context.WithCancel(hard)
	defer stop()
	var (
		mu     sync.Mutex
		reason stopReason
	)
	stopFor := func(r stopReason) {
		mu.Lock()
		if reason == stopNone {
			reason = r
		}
		mu.Unlock()
		stop()
	}
	// ends is when the lease runs out, by this worker's clock: it was
	// granted before start, and each renewal sent lengthens it.
	ends := &leaseEnd{at: start.Add(time.Duration(w.cfg.LeaseSeconds) * time.Second)}
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		w.heartbeat(runCtx, l, log, stopFor, ends)
	}()

	out, err := w.execute(runCtx, l)
	stop()
	<-beats
	mu.Lock()
	r := reason
	mu.Unlock()
	if r == stopNone && hard.Err() != nil {
		r = stopShutdown
	}

	// The report must reach the server even while the worker shuts down.
	// It is sent again, on errors that may pass, until the lease runs out:
	// a server whose database restarts answers 5xx for a few seconds, and
	// a result given up on would be run again.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(hard), 2*requestTimeout)
	defer cancel()
	until := ends.get()
	log = log.With("duration", time.Since(start).Round(time.Millisecond))
	switch {
	case r == stopLost:
		log.Warn("job abandoned: the lease was lost (expired or rescued); the server has moved on")
	case err == nil: // it finished before it could be stopped
		w.complete(ctx, l, until, log, out)
	case r == stopCanceled:
		w.fail(ctx, l, until, log, "canceled while running", false)
	case r == stopShutdown:
		w.release(ctx, l, until, log, "worker "+w.cfg.WorkerID+" shut down before the program finished")
	default:
		w.fail(ctx, l, until, log, err.message, err.retryable)
	}
}

// execError is a failed run of the program.
type execError struct {
	message   string
	retryable bool
}

// execute runs the program with the payload on stdin and returns its result
// (stdout, checked to be JSON; nil when empty).
func (w *remoteWorker) execute(ctx context.Context, l remote.Lease) (json.RawMessage, *execError) {
	cmd := exec.CommandContext(ctx, w.cfg.Argv[0], w.cfg.Argv[1:]...)
	cmd.Stdin = bytes.NewReader(l.Payload)
	stdout := &cappedBuffer{max: resultMaxBytes}
	stderr := &tailBuffer{max: stderrTailBytes}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(childEnviron(os.Environ()),
		"DOCKET_JOB_ID="+l.JobID.String(),
		"DOCKET_JOB_TYPE="+l.JobType,
		"DOCKET_QUEUE="+l.Queue,
		"DOCKET_ATTEMPT="+strconv.Itoa(l.Attempt),
		"DOCKET_LEASE_ID="+l.LeaseID,
	)
	done := isolate(cmd, w.cfg.KillGrace)
	err := cmd.Run()
	done()
	if errors.Is(err, exec.ErrWaitDelay) && ctx.Err() == nil {
		// The program exited 0, but a process it started (a daemon
		// run with &) still holds its stdout or stderr: the program's
		// answer stands, with what it printed.
		err = nil
	}
	var exitErr *exec.ExitError
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, &execError{message: "stopped", retryable: true} // runJob knows why
	case errors.As(err, &exitErr):
		code := exitErr.ExitCode()
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = exitErr.Error()
		}
		return nil, &execError{message: msg, retryable: code == exitRetryable}
	case err != nil:
		return nil, &execError{message: "run " + w.cfg.Argv[0] + ": " + err.Error(), retryable: true}
	case stdout.overflow:
		return nil, &execError{message: fmt.Sprintf("the program's stdout (the result) is over %d bytes", resultMaxBytes)}
	}
	result := bytes.TrimSpace(stdout.Bytes())
	if len(result) == 0 {
		return nil, nil
	}
	if !json.Valid(result) {
		snippet := string(result[:min(len(result), 200)])
		return nil, &execError{message: "the program's stdout is not JSON (the result must be): " + snippet}
	}
	return result, nil
}

// secretEnv names the variables of the worker's own environment that are
// not passed to the programs it runs: the worker's API key is for the
// worker, and a program has no business holding an admin key.
var secretEnv = []string{"DOCKET_API_KEY", "DOCKET_ADMIN_KEY"}

// childEnviron is environ (KEY=value entries) without the secretEnv
// variables. Names are compared ignoring case, as Windows does.
func childEnviron(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(secretEnv, func(s string) bool { return strings.EqualFold(s, name) }) {
			out = append(out, kv)
		}
	}
	return out
}

// heartbeat renews the lease every LeaseSeconds/3 until ctx ends, and stops
// the job when it was canceled or the lease is lost.
func (w *remoteWorker) heartbeat(ctx context.Context, l remote.Lease, log *slog.Logger, stopFor func(stopReason), ends *leaseEnd) {
	lease := time.Duration(w.cfg.LeaseSeconds) * time.Second
	every := lease / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, every)
		resp, err := w.api.Heartbeat(rctx, l.LeaseID, &remote.HeartbeatRequest{LeaseSeconds: remote.Int(w.cfg.LeaseSeconds)})
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case remote.IsLeaseLost(err):
			stopFor(stopLost)
			return
		case err != nil:
			// The lease may still be ours: keep the program running and
			// try again at the next tick.
			log.Warn("heartbeat failed", "error", err)
		case resp.CancelRequested:
			ends.set(sent.Add(lease))
			log.Info("job canceled: stopping the program")
			stopFor(stopCanceled)
			return
		default:
			// By this worker's clock, from before the renewal was sent:
			// the server's expiresAt is by the server's.
			ends.set(sent.Add(lease))
		}
	}
}

// leaseEnd is when a lease runs out by this worker's clock.
type leaseEnd struct {
	mu sync.Mutex
	at time.Time
}

func (e *leaseEnd) set(at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.at = at
}

func (e *leaseEnd) get() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at
}

func (w *remoteWorker) complete(ctx context.Context, l remote.Lease, until time.Time, log *slog.Logger, result json.RawMessage) {
	var refused error
	if w.report(ctx, until, log, remote.ActionComplete, func(ctx context.Context) error {
		err := w.api.Complete(ctx, l.LeaseID, result)
		if resultRefused(err) {
			refused = err
			return nil
		}
		return err
	}) {
		if refused == nil {
			log.Info("job succeeded")
			return
		}
		// Sending it again would be refused again, and the job would
		// stay RUNNING until its lease expired: it fails, as a result
		// that is not JSON does.
		w.fail(ctx, l, until, log, "the server refused the program's result: "+refused.Error(), false)
	}
}

// resultRefused reports whether err is the server refusing a completion's
// result for good: invalid (400) or too large (413).
func resultRefused(err error) bool {
	var p *remote.Error
	return errors.As(err, &p) && (p.Status == http.StatusBadRequest || p.Status == http.StatusRequestEntityTooLarge)
}

func (w *remoteWorker) fail(ctx context.Context, l remote.Lease, until time.Time, log *slog.Logger, message string, retryable bool) {
	var status string
	if w.report(ctx, until, log, remote.ActionFail, func(ctx context.Context) (err error) {
		status, err = w.api.Fail(ctx, l.LeaseID, message, retryable)
		return err
	}) {
		log.Info("job failed", "status", status, "retryable", retryable, "error", firstLine(message))
	}
}

// release gives the job back after its program was stopped at shutdown:
// the attempt is refunded and the job is due again at once.
func (w *remoteWorker) release(ctx context.Context, l remote.Lease, until time.Time, log *slog.Logger, reason string) {
	var status string
	if w.report(ctx, until, log, remote.ActionRelease, func(ctx context.Context) (err error) {
		status, err = w.api.Release(ctx, l.LeaseID, reason)
		return err
	}) {
		log.Info("job given back: its attempt is refunded", "status", status)
	}
}

// report sends complete, fail or release, trying again on errors that may
// pass until the lease runs out at until (once more at its end), after
// which another attempt may hold the job. It returns whether the server
// took it.
func (w *remoteWorker) report(ctx context.Context, until time.Time, log *slog.Logger, action string, send func(context.Context) error) bool {
	for n := 1; ; n++ {
		err := send(ctx)
		if err == nil {
			return true
		}
		if remote.IsLeaseLost(err) {
			log.Warn("job outcome refused: the lease was lost (expired or rescued)", "action", action, "error", err)
			return false
		}
		left := time.Until(until)
		if !remote.IsTemporary(err) || left <= 0 || ctx.Err() != nil {
			log.Error("could not report the job's outcome; the lease will expire and the job be retried", "action", action, "error", err)
			return false
		}
		pause(ctx, min(retryDelay(err, n), left))
	}
}

// pause waits d, or less if ctx ends.
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// cappedBuffer keeps up to max bytes and notes whether more came; it never
// refuses a write, so the program is not blocked or killed by a full pipe.
type cappedBuffer struct {
	bytes.Buffer
	max      int
	overflow bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room < len(p) {
		b.overflow = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string { return string(b.buf) }

// splitCommandLine splits s into words the way a POSIX shell would for
// quoting: whitespace separates words, '…' is literal, "…" keeps \" \\ \$
// \` escapes, and a backslash outside quotes escapes the next character.
// Nothing is expanded.
func splitCommandLine(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("unterminated ' quote")
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			in = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, errors.New(`unterminated " quote`)
			}
			in = true
		case c == '\\':
			if i+1 == len(s) {
				return nil, errors.New("trailing backslash")
			}
			i++
			if s[i] != '\n' { // backslash-newline joins lines
				cur.WriteByte(s[i])
				in = true
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}
