// Package loadtest measures the "load held" of one `docket serve` process:
// an open-loop load of submissions at a fixed rate, stepped up, with workers
// working the jobs as they come; the answer is the highest rate held.
//
// # How a step runs
//
// A step asks for R jobs per second: job i is due at start + i/R, and a
// dispatcher sends each at its due time as one POST /v1/jobs (with an
// idempotency key of its own) on a goroutine of its own over keep-alive
// connections, so a slow answer never delays later sends. Up to
// MaxInFlight submissions may await an answer at once; past that the
// dispatcher waits for one. Submit latency is measured from the job's due
// time, not from when it was sent, so a stalled server or a late
// dispatcher shows in the latency instead of silently lowering the load
// (no coordinated omission); the step's MaxSendLagMs says how late the
// dispatcher itself ran. The first Warmup of a step is not measured; the
// next StepDuration is. Before the next step begins, every request of this
// one is answered (or times out).
//
// The workers are either a docket.Worker in this process on the same
// database (WorkersGo; on SQLite a second process on the file, whose
// writes take turns with the server's through SQLite's file lock), or
// HTTP workers on the server's lease protocol (WorkersHTTP).
//
// # Backlog
//
// The backlog is the jobs accepted and not yet finished: submissions
// answered 2xx minus jobs whose terminal state (SUCCESS, DEAD, CANCELED) was
// committed, as counted by the tool — the Go workers count the commits
// reported by docket.Config.OnJobFinished, the HTTP workers the 2xx answers
// to their complete calls. Both counts are of commits, so the figure is the
// QUEUED + RUNNING jobs of the database, give or take the requests in
// flight. It is sampled every SampleInterval, and not read from the
// database, because counting jobs by state scans the whole jobs table (no
// index serves it), which grows by R × duration each step: a count every
// second would load the database under test more and more as the run goes
// on. The database is read once, after the last step has drained, to check
// that it holds every accepted job and that every one is SUCCESS.
//
// # Verdict
//
// A step is held when all of these are true:
//
//   - no submission failed: every request of the measured window was
//     answered 2xx (a non-2xx status or a transport error, including no
//     answer within RequestTimeout, is an error);
//   - p99 submit latency < P99Limit (100 ms), from due time;
//   - the backlog does not grow: the least-squares slope of its samples
//     over the measured window is < SlopeLimitFraction (1 %) of the asked
//     rate, i.e. the workers drain at least 99 % of what is submitted. A
//     backlog that grows at 1 % of R over a 2 min step gains 1.2 s worth
//     of submissions, well above its noise (the jobs that arrive between
//     two fetches of the workers, a poll interval's worth at most), so a
//     shortfall that size is seen; a backlog that stays level, whatever
//     its size, is not growth (its cost shows as latency elsewhere).
//
// The highest rate held is that of the highest held step (0 when none was).
// With StopOnFail the run stops after the first step not held.
package loadtest

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// JobType and Queue of every job the run submits.
const (
	JobType = "load"
	Queue   = "load"
)

// Worker kinds.
const (
	// WorkersGo: in-process Go workers of this program (docket.Worker) on
	// the same database.
	WorkersGo = "go"
	// WorkersHTTP: remote workers of this program on the server's lease
	// protocol (POST /v1/leases long poll, then complete).
	WorkersHTTP = "http"
)

// Defaults of Config.
const (
	StepDurationDefault = 2 * time.Minute
	WarmupDefault       = 10 * time.Second
	// WorkerConcurrencyDefault is the Go worker's; HTTPWorkersDefault
	// workers leasing up to 10 jobs each hold as many at once. (Each
	// waiting lease call tries to acquire on every insert, so many idle
	// HTTP workers cost the server a transaction each per submission.)
	WorkerConcurrencyDefault  = 100
	HTTPWorkersDefault        = 10
	WorkerPollIntervalDefault = 50 * time.Millisecond
	MaxInFlightDefault        = 2000
	RequestTimeoutDefault     = 10 * time.Second
	DrainTimeoutDefault       = time.Minute
	SampleIntervalDefault     = time.Second
	ProgressIntervalDefault   = 5 * time.Second
	StartTimeoutDefault       = time.Minute
)

// RatesDefault are the steps when Config.Rates is empty.
var RatesDefault = []int{100, 200, 500, 1000, 2000, 5000}

// httpLeaseMax is how many jobs an HTTP worker leases per call.
const httpLeaseMax = 10

// Config of a run.
type Config struct {
	// DocketBin is the docket command to run as `docket serve`. Required.
	DocketBin string
	// DatabaseURL of the server and the workers: postgres://… or
	// sqlite:PATH. It must name an empty database (see NewPostgresSchema).
	// Default sqlite:docket.db in Dir.
	DatabaseURL string
	// Dir is the server's working directory, holding its log (serve.log),
	// its NATS storage and the default SQLite file. Default a new
	// temporary directory, removed when the run ends.
	Dir string
	// Rates are the steps, in jobs per second, run in order. Default
	// RatesDefault.
	Rates []int
	// StepDuration is the measured window of each step; default 2 min.
	StepDuration time.Duration
	// Warmup is the unmeasured start of each step; default 10 s.
	Warmup time.Duration
	// StopOnFail ends the run after the first step not held.
	StopOnFail bool
	// Workers is WorkersGo (default) or WorkersHTTP.
	Workers string
	// WorkerConcurrency: jobs the Go worker runs at once (default 100), or
	// HTTP workers, each leasing up to 10 jobs per call (default 10).
	WorkerConcurrency int
	// WorkerPollInterval is the Go worker's fallback poll; default 50 ms.
	// It matters on SQLite, where the server's inserts cannot wake a
	// worker in another process.
	WorkerPollInterval time.Duration
	// MaxInFlight bounds the submissions awaiting an answer; default 2000
	// (at 100 ms each, 20,000 per second). Past it the dispatcher waits,
	// and the wait counts in the latency.
	MaxInFlight int
	// RequestTimeout bounds one submission; default 10 s.
	RequestTimeout time.Duration
	// DrainTimeout bounds the wait for the backlog to empty after the last
	// step; default 1 min.
	DrainTimeout time.Duration
	// SampleInterval of the backlog; default 1 s.
	SampleInterval time.Duration
	// ProgressInterval of the lines written to Log; default 5 s.
	ProgressInterval time.Duration
	// StartTimeout bounds the server's start (it migrates the database);
	// default 1 min.
	StartTimeout time.Duration
	// ServeEnv is more KEY=VALUE environment of the server, e.g.
	// DOCKET_POLL_INTERVAL=100ms. Every DOCKET_* variable of this process
	// is removed from the server's environment first.
	ServeEnv []string
	// Log receives progress lines; default none.
	Log io.Writer
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if len(c.Rates) == 0 {
		c.Rates = slices.Clone(RatesDefault)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.StepDuration, StepDurationDefault)
	def(&c.Warmup, WarmupDefault)
	def(&c.WorkerPollInterval, WorkerPollIntervalDefault)
	def(&c.RequestTimeout, RequestTimeoutDefault)
	def(&c.DrainTimeout, DrainTimeoutDefault)
	def(&c.SampleInterval, SampleIntervalDefault)
	def(&c.ProgressInterval, ProgressIntervalDefault)
	def(&c.StartTimeout, StartTimeoutDefault)
	if c.Workers == "" {
		c.Workers = WorkersGo
	}
	if c.WorkerConcurrency == 0 {
		c.WorkerConcurrency = WorkerConcurrencyDefault
		if c.Workers == WorkersHTTP {
			c.WorkerConcurrency = HTTPWorkersDefault
		}
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = MaxInFlightDefault
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.DocketBin == "":
		return errors.New("the docket binary is required")
	case c.Workers != WorkersGo && c.Workers != WorkersHTTP:
		return fmt.Errorf("workers %q: must be %q or %q", c.Workers, WorkersGo, WorkersHTTP)
	case c.WorkerConcurrency < 1:
		return fmt.Errorf("worker concurrency %d: must be at least 1", c.WorkerConcurrency)
	case c.MaxInFlight < 1:
		return fmt.Errorf("max in flight %d: must be at least 1", c.MaxInFlight)
	case c.StepDuration < time.Second:
		return fmt.Errorf("step duration %v: must be at least 1s", c.StepDuration)
	case c.Warmup < 0:
		return fmt.Errorf("warmup %v: must not be negative", c.Warmup)
	}
	for _, r := range c.Rates {
		if r < 1 {
			return fmt.Errorf("rate %d: must be at least 1 job per second", r)
		}
	}
	return nil
}
