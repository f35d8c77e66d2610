// Package bench measures a job queue with the workload shapes users know:
// burn (work down a pre-inserted backlog), continuous (insert and work at
// once over a standing backlog) and latency (open-loop inserts, time from
// commit to handler start).
//
// The harness knows nothing of docket: a System adapts a queue to it, so
// `docket bench` and the River comparison program in bench/river measure
// with the same code. Completions are counted as committed, never as
// handler returns, so batching cannot inflate a figure: from the queue's
// own after-commit notification where the System reports it
// (CommitReporter), checked against the database at the end, or else by
// reading the database (System.CountCompleted) every Interval; handler
// returns only tell the harness when to look.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Modes.
const (
	ModeBurn       = "burn"
	ModeContinuous = "continuous"
	ModeLatency    = "latency"
)

// Defaults of Config.
const (
	JobsDefault        = 100_000
	DurationDefault    = 30 * time.Second
	RateDefault        = 1000
	InsertBatchDefault = 5000
	// InsertConcurrencyDefault: one client bulk-inserting, batch after
	// batch.
	InsertConcurrencyDefault = 1
	IntervalDefault          = 2 * time.Second
	// BacklogMin is the least number of available jobs continuous mode
	// keeps, topping up every TopUpInterval.
	BacklogMin    = 75_000
	TopUpInterval = 250 * time.Millisecond
)

// System is a job queue under test. Its jobs are no-ops of one type in one
// queue; handlers report to the Hooks given to StartWorkers.
type System interface {
	// Name prefixes the output lines ("docket", "river").
	Name() string
	// Backend names the database ("postgres", "sqlite").
	Backend() string
	// Insert inserts n jobs in one transaction (one call of the queue's
	// bulk insert).
	Insert(ctx context.Context, n int) error
	// InsertOne inserts one job and returns the key its handler will
	// report to Hooks.Started.
	InsertOne(ctx context.Context) (string, error)
	// StartWorkers starts working the jobs; StopWorkers stops gracefully.
	StartWorkers(ctx context.Context, h *Hooks) error
	StopWorkers(ctx context.Context) error
	// CountCompleted counts jobs whose successful completion is committed.
	CountCompleted(ctx context.Context) (int, error)
	// CountUnfinished counts jobs not yet in a final state.
	CountUnfinished(ctx context.Context) (int, error)
}

// CommitReporter is a System whose workers report every successful
// completion to Hooks.Committed once its commit has returned (docket's
// Config.OnJobFinished, River's subscription to completed jobs). The runner
// then counts completions from the reports while the workers run, instead
// of counting the jobs table every Interval, and checks the reports against
// CountCompleted once at the end: a count reads the whole table, which in a
// 200,000-job burn cost the server 4–8 µs a job, the same order as
// acquiring it (docs/benchmarks.md, "Round eight"). The floor program
// counts once at the end too.
type CommitReporter interface {
	System
	// ReportsCommits reports whether StartWorkers reports commits.
	ReportsCommits() bool
}

// Hooks are called by a System's handlers.
type Hooks struct {
	returned atomic.Int64
	all      chan struct{} // closed when returned reaches target
	target   atomic.Int64
	once     sync.Once

	committed    atomic.Int64
	allCommitted chan struct{} // closed when committed reaches target
	commitOnce   sync.Once

	track  bool
	mu     sync.Mutex
	starts map[string]time.Time
}

func newHooks(track bool) *Hooks {
	h := &Hooks{all: make(chan struct{}), allCommitted: make(chan struct{}), track: track}
	h.target.Store(math.MaxInt64)
	if track {
		h.starts = map[string]time.Time{}
	}
	return h
}

// Tracking reports whether the harness wants Started calls (latency mode);
// handlers skip building keys otherwise.
func (h *Hooks) Tracking() bool { return h.track }

// Started records that the handler of the job with key began.
func (h *Hooks) Started(key string) {
	if !h.track {
		return
	}
	now := time.Now()
	h.mu.Lock()
	h.starts[key] = now
	h.mu.Unlock()
}

// Returned records that a handler returned.
func (h *Hooks) Returned() {
	if h.returned.Add(1) >= h.target.Load() {
		h.once.Do(func() { close(h.all) })
	}
}

// Committed records n successful completions whose commit has returned
// (a CommitReporter's workers call it).
func (h *Hooks) Committed(n int) {
	if h.committed.Add(int64(n)) >= h.target.Load() {
		h.commitOnce.Do(func() { close(h.allCommitted) })
	}
}

// expect sets the number of jobs after whose returns (and reported
// commits) all and allCommitted close.
func (h *Hooks) expect(n int64) {
	h.target.Store(n)
	if h.returned.Load() >= n {
		h.once.Do(func() { close(h.all) })
	}
	if h.committed.Load() >= n {
		h.commitOnce.Do(func() { close(h.allCommitted) })
	}
}

// Config is one benchmark run.
type Config struct {
	Mode        string
	Jobs        int           // burn: jobs to insert, then work
	Duration    time.Duration // continuous, latency
	Rate        int           // latency: inserts per second
	InsertBatch int           // jobs per Insert call
	// InsertConcurrency: Insert calls in flight at once when inserting a
	// backlog (burn, continuous top-ups).
	InsertConcurrency int
	Interval          time.Duration // progress line and sample period
	// CountInDatabase counts completions with CountCompleted every
	// Interval even when the System is a CommitReporter (the harness's
	// only method before reports; each count reads the whole table).
	CountInDatabase bool
	JSON            bool      // one JSON object on Out instead of lines
	Out             io.Writer // results
	Log             io.Writer // progress
}

// CountsReports reports whether a run of c counts completions from a
// CommitReporter's reports: burn and continuous, unless CountInDatabase.
// Latency mode counts its few completions in the database, once. A System
// installs its reports only then, so that neither side pays for reports
// the harness does not read.
func (c Config) CountsReports() bool {
	return (c.Mode == ModeBurn || c.Mode == ModeContinuous) && !c.CountInDatabase
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeBurn
	}
	if c.Jobs <= 0 {
		c.Jobs = JobsDefault
	}
	if c.Duration <= 0 {
		c.Duration = DurationDefault
	}
	if c.Rate <= 0 {
		c.Rate = RateDefault
	}
	if c.InsertBatch <= 0 {
		c.InsertBatch = InsertBatchDefault
	}
	if c.InsertConcurrency <= 0 {
		c.InsertConcurrency = InsertConcurrencyDefault
	}
	if c.Interval <= 0 {
		c.Interval = IntervalDefault
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Sample is the committed completion count at one instant of the run.
type Sample struct {
	Seconds    float64 `json:"seconds"`   // since the workers started
	Completed  int     `json:"completed"` // committed completions so far
	JobsPerSec float64 `json:"jobsPerSec"`
}

// Latency percentiles in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50Ms"`
	P90   float64 `json:"p90Ms"`
	P99   float64 `json:"p99Ms"`
	Max   float64 `json:"maxMs"`
}

// Result of one run.
type Result struct {
	System           string   `json:"system"`
	Backend          string   `json:"backend"`
	Mode             string   `json:"mode"`
	Inserted         int      `json:"inserted"`
	InsertSeconds    float64  `json:"insertSeconds"`
	InsertJobsPerSec float64  `json:"insertJobsPerSec"`
	Completed        int      `json:"completed"`
	WorkSeconds      float64  `json:"workSeconds"`
	JobsPerSec       float64  `json:"jobsPerSec"`
	Latency          *Latency `json:"latency,omitempty"`
	// Counted is how completions were counted while the workers ran:
	// CountedFromReports or CountedInDatabase.
	Counted string   `json:"counted"`
	Samples []Sample `json:"samples"`
}

// Result.Counted values.
const (
	CountedFromReports = "reports"  // the System's commit reports, checked against the database at the end
	CountedInDatabase  = "database" // CountCompleted every Interval
)

// ErrNotFresh: the database holds unfinished jobs, which would be worked
// with the benchmark's and skew it.
var ErrNotFresh = errors.New("benchmark on a fresh database")

// Run runs one benchmark on sys and writes its result to cfg.Out.
func Run(ctx context.Context, sys System, cfg Config) (*Result, error) {
	cfg = cfg.WithDefaults()
	n, err := sys.CountUnfinished(ctx)
	if err != nil {
		return nil, fmt.Errorf("count unfinished jobs: %w", err)
	}
	if n > 0 {
		return nil, fmt.Errorf("the database holds %d unfinished jobs: %w", n, ErrNotFresh)
	}
	r := &runner{sys: sys, cfg: cfg, res: &Result{System: sys.Name(), Backend: sys.Backend(), Mode: cfg.Mode, Counted: CountedInDatabase}}
	if cr, ok := sys.(CommitReporter); ok && cr.ReportsCommits() && cfg.CountsReports() {
		r.reports = true
		r.res.Counted = CountedFromReports
	}
	if r.base, err = sys.CountCompleted(ctx); err != nil {
		return nil, fmt.Errorf("count completed jobs: %w", err)
	}
	switch cfg.Mode {
	case ModeBurn:
		err = r.burn(ctx)
	case ModeContinuous:
		err = r.continuous(ctx)
	case ModeLatency:
		err = r.latency(ctx)
	default:
		err = fmt.Errorf("unknown mode %q (burn, continuous, latency)", cfg.Mode)
	}
	if err != nil {
		return nil, err
	}
	if err := r.report(); err != nil {
		return nil, err
	}
	return r.res, nil
}

type runner struct {
	sys     System
	cfg     Config
	res     *Result
	base    int  // completed before the run
	reports bool // count from the System's commit reports (CommitReporter)
	stopped bool // the workers were stopped
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "%s %s %s: "+format+"\n",
		append([]any{r.sys.Name(), r.sys.Backend(), r.cfg.Mode}, args...)...)
}

// completed counts committed completions of this run.
func (r *runner) completed(ctx context.Context) (int, error) {
	n, err := r.sys.CountCompleted(ctx)
	if err != nil {
		return 0, fmt.Errorf("count completed jobs: %w", err)
	}
	return n - r.base, nil
}

// completedNow counts committed completions of this run: the reports of a
// CommitReporter, or the database.
func (r *runner) completedNow(ctx context.Context, hooks *Hooks) (int, error) {
	if r.reports {
		return int(hooks.committed.Load()), nil
	}
	return r.completed(ctx)
}

// insert inserts n jobs in batches of InsertBatch, InsertConcurrency
// batches at a time.
func (r *runner) insert(ctx context.Context, n int) error {
	batches := make(chan int)
	errs := make(chan error, r.cfg.InsertConcurrency)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range r.cfg.InsertConcurrency {
		wg.Go(func() {
			for b := range batches {
				if err := r.sys.Insert(ctx, b); err != nil {
					errs <- fmt.Errorf("insert %d jobs: %w", b, err)
					cancel()
					return
				}
			}
		})
	}
feed:
	for n > 0 {
		b := min(n, r.cfg.InsertBatch)
		select {
		case batches <- b:
			n -= b
		case <-ctx.Done():
			break feed
		}
	}
	close(batches)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

// sample appends a sample at elapsed and prints a progress line.
func (r *runner) sample(elapsed time.Duration, done, total int) {
	s := Sample{Seconds: elapsed.Seconds(), Completed: done}
	if k := len(r.res.Samples); k > 0 {
		prev := r.res.Samples[k-1]
		if dt := s.Seconds - prev.Seconds; dt > 0 {
			s.JobsPerSec = float64(done-prev.Completed) / dt
		}
	} else if s.Seconds > 0 {
		s.JobsPerSec = float64(done) / s.Seconds
	}
	r.res.Samples = append(r.res.Samples, s)
	of := ""
	if total > 0 {
		of = fmt.Sprintf("/%d", total)
	}
	avg := 0.0
	if s.Seconds > 0 {
		avg = float64(done) / s.Seconds
	}
	r.logf("t=%5.1fs completed=%d%s  %.0f jobs/s (average %.0f)", s.Seconds, done, of, s.JobsPerSec, avg)
}

// burn inserts Jobs, then works them to zero.
func (r *runner) burn(ctx context.Context) error {
	n := r.cfg.Jobs
	r.logf("inserting %d jobs", n)
	t0 := time.Now()
	if err := r.insert(ctx, n); err != nil {
		return err
	}
	r.res.Inserted = n
	r.res.InsertSeconds = time.Since(t0).Seconds()
	r.res.InsertJobsPerSec = float64(n) / r.res.InsertSeconds
	r.logf("inserted %d jobs in %.2fs: %.0f jobs/s", n, r.res.InsertSeconds, r.res.InsertJobsPerSec)

	hooks := newHooks(false)
	hooks.expect(int64(n))
	start := time.Now()
	if err := r.sys.StartWorkers(ctx, hooks); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	defer r.stop(ctx)
	r.sample(0, 0, n)
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	if r.reports {
		return r.burnReported(ctx, hooks, start, tick.C)
	}
	// Sample every Interval until every handler returned, then look as
	// often as a count allows until the last completion is committed.
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			done, err := r.completed(ctx)
			if err != nil {
				return err
			}
			r.sample(time.Since(start), done, n)
			if done >= n {
				r.burnDone(done)
				return nil
			}
			continue
		case <-hooks.all:
		}
		break
	}
	for {
		done, err := r.completed(ctx)
		if err != nil {
			return err
		}
		if done >= n {
			elapsed := time.Since(start)
			r.sample(elapsed, done, n)
			r.burnDone(done)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// commitReportWait is how long after the last handler's return the runner
// waits for the reports of the remaining commits before it gives up (a
// variable for the tests).
var commitReportWait = 30 * time.Second

// burnReported is burn's wait for a CommitReporter: it samples the reports
// every tick and ends at the report that makes the count whole, then checks
// the reports against the database (checkReports).
func (r *runner) burnReported(ctx context.Context, hooks *Hooks, start time.Time, tick <-chan time.Time) error {
	n := r.cfg.Jobs
	all := hooks.all             // read once: nil after it closed
	var stalled <-chan time.Time // armed once every handler returned
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			r.sample(time.Since(start), int(hooks.committed.Load()), n)
			continue
		case <-all:
			all, stalled = nil, time.After(commitReportWait)
			continue
		case <-stalled:
			return fmt.Errorf("every handler returned, but only %d of %d commits were reported %v later",
				hooks.committed.Load(), n, commitReportWait)
		case <-hooks.allCommitted:
		}
		break
	}
	r.sample(time.Since(start), int(hooks.committed.Load()), n)
	r.burnDone(int(hooks.committed.Load()))
	return r.checkReports(ctx, hooks)
}

// checkReports stops the workers, then fails unless the database holds
// as many committed completions of this run as the System reported.
func (r *runner) checkReports(ctx context.Context, hooks *Hooks) error {
	// Stopped, the workers commit and report nothing more: every report
	// is in, and an honest System's database holds exactly as many
	// completions. More reports would have inflated the figure; fewer
	// (events lost on the way) would have deflated it.
	r.stop(ctx)
	reported := int(hooks.committed.Load())
	done, err := r.completed(ctx)
	if err != nil {
		return err
	}
	if done != reported {
		return fmt.Errorf("%d completions were reported committed, but the database holds %d", reported, done)
	}
	return nil
}

// burnDone records the result from the last sample, the first that saw
// every completion committed.
func (r *runner) burnDone(done int) {
	last := r.res.Samples[len(r.res.Samples)-1]
	r.res.Completed = done
	r.res.WorkSeconds = last.Seconds
	r.res.JobsPerSec = float64(done) / last.Seconds
}

// stop stops the workers, once (checkReports stops them before the
// deferred call).
func (r *runner) stop(ctx context.Context) {
	if r.stopped {
		return
	}
	r.stopped = true
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.sys.StopWorkers(sctx); err != nil {
		r.logf("stop workers: %v", err)
	}
}

// continuous works for Duration while keeping at least BacklogMin jobs
// available.
func (r *runner) continuous(ctx context.Context) error {
	hooks := newHooks(false)
	// Fill to the standing level first (not timed).
	level := BacklogMin + BacklogMin/3
	r.logf("filling the backlog to %d jobs", level)
	if err := r.insert(ctx, level); err != nil {
		return err
	}
	inserted := level

	start := time.Now()
	if err := r.sys.StartWorkers(ctx, hooks); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	defer r.stop(ctx)
	r.sample(0, 0, 0)

	// Top up: every TopUpInterval, bring what is available (inserted but
	// not yet handled: never more than what is really available) back to
	// BacklogMin plus twice what was used in the last interval.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		topWG         sync.WaitGroup
		topErr        error
		insertedInRun atomic.Int64
		lowest        atomic.Int64
	)
	lowest.Store(int64(level))
	topWG.Add(1)
	go func() {
		defer topWG.Done()
		t := time.NewTicker(TopUpInterval)
		defer t.Stop()
		lastHandled := int64(0)
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
			handled := hooks.returned.Load()
			avail := int64(inserted) - handled
			if avail < lowest.Load() {
				lowest.Store(avail)
			}
			want := int64(BacklogMin) + 2*(handled-lastHandled) - avail
			lastHandled = handled
			if want <= 0 {
				continue
			}
			if err := r.insert(runCtx, int(want)); err != nil {
				if runCtx.Err() == nil {
					topErr = err
					cancel()
				}
				return
			}
			inserted += int(want)
			insertedInRun.Add(want)
		}
	}()

	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	deadline := time.NewTimer(r.cfg.Duration)
	defer deadline.Stop()
	var done int
	var elapsed time.Duration
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-tick.C:
			d, err := r.completedNow(ctx, hooks)
			if err != nil {
				cancel()
				topWG.Wait()
				return err
			}
			r.sample(time.Since(start), d, 0)
		case <-deadline.C:
			d, err := r.completedNow(ctx, hooks)
			if err != nil {
				cancel()
				topWG.Wait()
				return err
			}
			elapsed = time.Since(start)
			done = d
			r.sample(elapsed, d, 0)
			break loop
		}
	}
	cancel()
	topWG.Wait()
	if topErr != nil {
		return topErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.reports {
		if err := r.checkReports(ctx, hooks); err != nil {
			return err
		}
	}
	r.res.Inserted = int(insertedInRun.Load())
	r.res.InsertSeconds = elapsed.Seconds()
	r.res.InsertJobsPerSec = float64(r.res.Inserted) / elapsed.Seconds()
	r.res.Completed = done
	r.res.WorkSeconds = elapsed.Seconds()
	r.res.JobsPerSec = float64(done) / elapsed.Seconds()
	r.logf("lowest available backlog seen: %d jobs", lowest.Load())
	return nil
}

// latency inserts Rate jobs per second, open loop, for Duration, and
// measures from each insert's commit (the insert call returned) to its
// handler's start.
func (r *runner) latency(ctx context.Context) error {
	hooks := newHooks(true)
	if err := r.sys.StartWorkers(ctx, hooks); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	defer r.stop(ctx)
	// Let the workers settle (listener connected, first empty poll done).
	select {
	case <-time.After(500 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}

	var (
		mu        sync.Mutex
		committed = map[string]time.Time{}
		firstErr  error
		wg        sync.WaitGroup
	)
	total := int(float64(r.cfg.Rate) * r.cfg.Duration.Seconds())
	period := time.Second / time.Duration(r.cfg.Rate)
	start := time.Now()
	r.sample(0, 0, total)
	nextSample := start.Add(r.cfg.Interval)
	for i := range total {
		at := start.Add(time.Duration(i) * period)
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				wg.Wait()
				return ctx.Err()
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, err := r.sys.InsertOne(ctx)
			t := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			committed[key] = t
		}()
		if time.Now().After(nextSample) {
			nextSample = nextSample.Add(r.cfg.Interval)
			r.sample(time.Since(start), int(hooks.returned.Load()), total)
		}
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("insert: %w", firstErr)
	}
	insertSeconds := time.Since(start).Seconds()
	hooks.expect(int64(total))
	select {
	case <-hooks.all:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("only %d of %d jobs started within 30 s of the last insert", hooks.returned.Load(), total)
	case <-ctx.Done():
		return ctx.Err()
	}
	// Committed completions, as in the other modes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		done, err := r.completed(ctx)
		if err != nil {
			return err
		}
		if done >= total || time.Now().After(deadline) {
			r.sample(time.Since(start), done, total)
			r.res.Completed = done
			break
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	hooks.mu.Lock()
	lat := make([]float64, 0, total)
	for key, c := range committed {
		s, ok := hooks.starts[key]
		if !ok {
			hooks.mu.Unlock()
			return fmt.Errorf("job %s was inserted but its handler never started", key)
		}
		lat = append(lat, max(0, float64(s.Sub(c))/float64(time.Millisecond)))
	}
	hooks.mu.Unlock()
	r.res.Inserted = total
	r.res.InsertSeconds = insertSeconds
	r.res.InsertJobsPerSec = float64(total) / insertSeconds
	r.res.WorkSeconds = r.res.Samples[len(r.res.Samples)-1].Seconds
	r.res.JobsPerSec = float64(r.res.Completed) / r.res.WorkSeconds
	l := Percentiles(lat)
	r.res.Latency = &l
	return nil
}

// Percentiles of ms, by nearest rank (the smallest value with at least p of
// the values at or below it); ms is sorted in place.
func Percentiles(ms []float64) Latency {
	if len(ms) == 0 {
		return Latency{}
	}
	slices.Sort(ms)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ms)))) - 1
		return ms[max(0, min(i, len(ms)-1))]
	}
	return Latency{Count: len(ms), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ms[len(ms)-1]}
}

// report writes the result: key=value lines, or one JSON object.
func (r *runner) report() error {
	res := r.res
	if r.cfg.JSON {
		enc := json.NewEncoder(r.cfg.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fmt.Errorf("write result: %w", err)
		}
		return nil
	}
	p := res.System
	var err error
	line := func(key string, v float64, prec int) {
		if err == nil {
			_, err = fmt.Fprintf(r.cfg.Out, "%s_%s=%.*f\n", p, key, prec, v)
		}
	}
	line("insert_jobs_per_sec", res.InsertJobsPerSec, 0)
	line("jobs_per_sec", res.JobsPerSec, 0)
	if l := res.Latency; l != nil {
		line("latency_p50_ms", l.P50, 2)
		line("latency_p90_ms", l.P90, 2)
		line("latency_p99_ms", l.P99, 2)
		line("latency_max_ms", l.Max, 2)
	}
	if err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}
