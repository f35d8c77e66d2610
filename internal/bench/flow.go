package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Workflow modes.
const (
	// ModeWorkflow starts Runs runs of each shape, then works them to the
	// end: runs/s, steps/s, and the step-to-step latency under that load.
	ModeWorkflow = "workflow"
	// ModeWorkflowLatency starts Rate runs/s of each shape, one by one
	// (open loop), for Duration: the step-to-step latency at a fixed rate.
	ModeWorkflowLatency = "workflow-latency"
)

// Defaults of FlowConfig.
const (
	RunsDefault       = 10_000
	RunRateDefault    = 100
	RunBatchDefault   = 1000
	runSettleDuration = 500 * time.Millisecond
)

// Shape is a benchmark workflow: its steps, in topological order, each a
// no-op job, and each step's parents.
type Shape struct {
	Name    string
	Steps   []string
	Parents map[string][]string
}

// The shapes of the workflow modes: a 4-step chain and a diamond (one
// step, two in parallel, one joining them).
var (
	ShapeChain = Shape{Name: "chain", Steps: []string{"s1", "s2", "s3", "s4"},
		Parents: map[string][]string{"s2": {"s1"}, "s3": {"s2"}, "s4": {"s3"}}}
	ShapeDiamond = Shape{Name: "diamond", Steps: []string{"top", "left", "right", "join"},
		Parents: map[string][]string{"left": {"top"}, "right": {"top"}, "join": {"left", "right"}}}
	Shapes = []Shape{ShapeChain, ShapeDiamond}
)

// FlowSystem is a workflow engine under test.
type FlowSystem interface {
	Name() string
	Backend() string
	// Unfinished counts the jobs and runs not yet finished: a database
	// that has some is refused (ErrNotFresh).
	Unfinished(ctx context.Context) (int, error)
	// Setup stores the workflows of the shapes.
	Setup(ctx context.Context, shapes []Shape) error
	// StartRuns starts n runs of shape in one transaction and returns
	// their ids.
	StartRuns(ctx context.Context, shape Shape, n int) ([]string, error)
	// StartWorkers starts working the step jobs of every shape; their
	// handlers report to h, with the key StepJobs gives. StopWorkers stops
	// gracefully.
	StartWorkers(ctx context.Context, h *Hooks) error
	StopWorkers(ctx context.Context) error
	// RunsOpen reports whether a run is not finished (committed).
	RunsOpen(ctx context.Context) (bool, error)
	// CountSucceeded counts the runs of shape that SUCCEEDED (of this
	// benchmark or an earlier one on the database).
	CountSucceeded(ctx context.Context, shape Shape) (int, error)
	// StepJobs lists the step jobs of shape's runs (the harness keeps
	// those of the runs it started).
	StepJobs(ctx context.Context, shape Shape) ([]StepJob, error)
}

// StepJob is one step job of a run, as the database recorded it.
type StepJob struct {
	Run      string    // the run's id
	Step     string    // the step's name
	Key      string    // the key its handler gave Hooks.Started
	Finished time.Time // the job's finished_at: its completion
}

// FlowConfig is one workflow benchmark.
type FlowConfig struct {
	Mode     string
	Shapes   []Shape       // default both
	Runs     int           // workflow: runs of each shape
	RunBatch int           // workflow: runs per StartRuns call
	Rate     int           // workflow-latency: runs started per second
	Duration time.Duration // workflow-latency: how long
	Interval time.Duration
	JSON     bool
	Out, Log io.Writer
}

// WithDefaults fills zero fields.
func (c FlowConfig) WithDefaults() FlowConfig {
	if c.Mode == "" {
		c.Mode = ModeWorkflow
	}
	if len(c.Shapes) == 0 {
		c.Shapes = Shapes
	}
	if c.Runs <= 0 {
		c.Runs = RunsDefault
	}
	if c.RunBatch <= 0 {
		c.RunBatch = RunBatchDefault
	}
	if c.Rate <= 0 {
		c.Rate = RunRateDefault
	}
	if c.Duration <= 0 {
		c.Duration = DurationDefault
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

// FlowResult is the outcome for one shape.
type FlowResult struct {
	System  string `json:"system"`
	Backend string `json:"backend"`
	Mode    string `json:"mode"`
	Shape   string `json:"shape"`
	Runs    int    `json:"runs"` // runs that SUCCEEDED
	Steps   int    `json:"steps"`
	// StartSeconds and StartRunsPerSec: starting the runs (workflow:
	// before the workers start; workflow-latency: the open loop).
	StartSeconds    float64 `json:"startSeconds"`
	StartRunsPerSec float64 `json:"startRunsPerSec"`
	// WorkSeconds: from the workers' start (workflow) or the first run's
	// start (workflow-latency) to the commit of the last run's end.
	WorkSeconds float64 `json:"workSeconds"`
	RunsPerSec  float64 `json:"runsPerSec"`
	StepsPerSec float64 `json:"stepsPerSec"`
	// StepLatency: from a parent step job's completion (its finished_at;
	// for a join, the last parent's) to its child's handler start.
	StepLatency Latency `json:"stepLatency"`
}

// RunFlows runs the workflow benchmark on sys, one shape after the other,
// and writes the results to cfg.Out.
func RunFlows(ctx context.Context, sys FlowSystem, cfg FlowConfig) ([]*FlowResult, error) {
	cfg = cfg.WithDefaults()
	if cfg.Mode != ModeWorkflow && cfg.Mode != ModeWorkflowLatency {
		return nil, fmt.Errorf("unknown workflow mode %q (%s, %s)", cfg.Mode, ModeWorkflow, ModeWorkflowLatency)
	}
	n, err := sys.Unfinished(ctx)
	if err != nil {
		return nil, fmt.Errorf("count unfinished jobs and runs: %w", err)
	}
	if n > 0 {
		return nil, fmt.Errorf("the database holds %d unfinished jobs and runs: %w", n, ErrNotFresh)
	}
	if err := sys.Setup(ctx, cfg.Shapes); err != nil {
		return nil, fmt.Errorf("store the workflows: %w", err)
	}
	var out []*FlowResult
	for _, shape := range cfg.Shapes {
		f := &flowRunner{sys: sys, cfg: cfg, shape: shape, started: map[string]bool{}, res: &FlowResult{
			System: sys.Name(), Backend: sys.Backend(), Mode: cfg.Mode, Shape: shape.Name,
		}}
		if err := f.run(ctx); err != nil {
			return nil, fmt.Errorf("shape %s: %w", shape.Name, err)
		}
		out = append(out, f.res)
	}
	if err := reportFlows(cfg, out); err != nil {
		return nil, err
	}
	return out, nil
}

type flowRunner struct {
	sys   FlowSystem
	cfg   FlowConfig
	shape Shape
	res   *FlowResult

	mu      sync.Mutex
	started map[string]bool // the runs started by this benchmark
}

func (f *flowRunner) startRuns(ctx context.Context, n int) error {
	ids, err := f.sys.StartRuns(ctx, f.shape, n)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.started[id] = true
	}
	return nil
}

func (f *flowRunner) logf(format string, args ...any) {
	fmt.Fprintf(f.cfg.Log, "%s %s %s %s: "+format+"\n",
		append([]any{f.sys.Name(), f.sys.Backend(), f.cfg.Mode, f.shape.Name}, args...)...)
}

func (f *flowRunner) run(ctx context.Context) error {
	hooks := newHooks(true)
	var (
		runs  int
		start time.Time
	)
	base, err := f.sys.CountSucceeded(ctx, f.shape)
	if err != nil {
		return fmt.Errorf("count succeeded runs: %w", err)
	}
	switch f.cfg.Mode {
	case ModeWorkflow:
		runs = f.cfg.Runs
		f.logf("starting %d runs", runs)
		t0 := time.Now()
		for left := runs; left > 0; {
			b := min(left, f.cfg.RunBatch)
			if err := f.startRuns(ctx, b); err != nil {
				return fmt.Errorf("start %d runs: %w", b, err)
			}
			left -= b
		}
		f.res.StartSeconds = time.Since(t0).Seconds()
		f.logf("started %d runs in %.2fs", runs, f.res.StartSeconds)
		start = time.Now()
		if err := f.sys.StartWorkers(ctx, hooks); err != nil {
			return fmt.Errorf("start workers: %w", err)
		}
		defer f.stop(ctx)
	case ModeWorkflowLatency:
		if err := f.sys.StartWorkers(ctx, hooks); err != nil {
			return fmt.Errorf("start workers: %w", err)
		}
		defer f.stop(ctx)
		select { // let the workers settle (listener connected, first poll done)
		case <-time.After(runSettleDuration):
		case <-ctx.Done():
			return ctx.Err()
		}
		runs = max(1, int(float64(f.cfg.Rate)*f.cfg.Duration.Seconds()))
		start = time.Now()
		if err := f.openLoop(ctx, runs, hooks); err != nil {
			return err
		}
		f.res.StartSeconds = time.Since(start).Seconds()
	}
	f.res.StartRunsPerSec = float64(runs) / f.res.StartSeconds
	steps := runs * len(f.shape.Steps)
	hooks.expect(int64(steps))

	// Wait for every handler, sampling, then for the last run's end to be
	// committed.
	tick := time.NewTicker(f.cfg.Interval)
	defer tick.Stop()
wait:
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-hooks.all:
			break wait
		case <-tick.C:
			f.logf("t=%5.1fs steps started=%d/%d", time.Since(start).Seconds(), hooks.returned.Load(), steps)
		}
	}
	for {
		open, err := f.sys.RunsOpen(ctx)
		if err != nil {
			return fmt.Errorf("look for open runs: %w", err)
		}
		if !open {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	after, err := f.sys.CountSucceeded(ctx, f.shape)
	if err != nil {
		return fmt.Errorf("count succeeded runs: %w", err)
	}
	if done := after - base; done != runs || len(f.started) != runs {
		return fmt.Errorf("%d of %d runs SUCCEEDED (%d started)", done, runs, len(f.started))
	}
	done := runs
	f.res.Runs, f.res.Steps = done, steps
	f.res.WorkSeconds = elapsed.Seconds()
	f.res.RunsPerSec = float64(done) / elapsed.Seconds()
	f.res.StepsPerSec = float64(steps) / elapsed.Seconds()
	all, err := f.sys.StepJobs(ctx, f.shape)
	if err != nil {
		return fmt.Errorf("list step jobs: %w", err)
	}
	var jobs []StepJob
	for _, j := range all {
		if f.started[j.Run] {
			jobs = append(jobs, j)
		}
	}
	if len(jobs) != steps {
		return fmt.Errorf("%d step jobs for %d runs of %d steps", len(jobs), runs, len(f.shape.Steps))
	}
	hooks.mu.Lock()
	lat, err := StepLatencies(f.shape, jobs, hooks.starts)
	hooks.mu.Unlock()
	if err != nil {
		return err
	}
	f.res.StepLatency = Percentiles(lat)
	f.logf("%d runs in %.2fs: %.0f runs/s, %.0f steps/s, step-to-step p50 %.2f ms p99 %.2f ms",
		done, f.res.WorkSeconds, f.res.RunsPerSec, f.res.StepsPerSec, f.res.StepLatency.P50, f.res.StepLatency.P99)
	return nil
}

// openLoop starts runs at Rate, each on its own, whatever the others do.
func (f *flowRunner) openLoop(ctx context.Context, runs int, hooks *Hooks) error {
	period := time.Second / time.Duration(f.cfg.Rate)
	start := time.Now()
	next := start.Add(f.cfg.Interval)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i := range runs {
		if d := time.Until(start.Add(time.Duration(i) * period)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				wg.Wait()
				return ctx.Err()
			}
		}
		wg.Go(func() {
			if err := f.startRuns(ctx, 1); err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
			}
		})
		if time.Now().After(next) {
			next = next.Add(f.cfg.Interval)
			f.logf("t=%5.1fs runs started=%d/%d steps started=%d", time.Since(start).Seconds(), i+1, runs, hooks.returned.Load())
		}
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("start a run: %w", firstErr)
	}
	return nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func (f *flowRunner) stop(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := f.sys.StopWorkers(sctx); err != nil {
		f.logf("stop workers: %v", err)
	}
}

// StepLatencies returns, in milliseconds, for each step job with parents,
// the time from its parents' completion (the last parent's finished_at)
// to its handler's start (starts, by StepJob.Key). A job whose handler or
// parent is missing is an error: the run did not go as the shape says.
func StepLatencies(shape Shape, jobs []StepJob, starts map[string]time.Time) ([]float64, error) {
	type stepOf struct{ run, step string }
	byStep := make(map[stepOf]StepJob, len(jobs))
	for _, j := range jobs {
		byStep[stepOf{j.Run, j.Step}] = j
	}
	var out []float64
	for _, j := range jobs {
		parents := shape.Parents[j.Step]
		if len(parents) == 0 {
			continue
		}
		var ready time.Time
		for _, p := range parents {
			pj, ok := byStep[stepOf{j.Run, p}]
			if !ok || pj.Finished.IsZero() {
				return nil, fmt.Errorf("run %s: step %s has no finished job of its parent %s", j.Run, j.Step, p)
			}
			if pj.Finished.After(ready) {
				ready = pj.Finished
			}
		}
		s, ok := starts[j.Key]
		if !ok {
			return nil, fmt.Errorf("run %s: the handler of step %s (job %s) never started", j.Run, j.Step, j.Key)
		}
		out = append(out, max(0, float64(s.Sub(ready))/float64(time.Millisecond)))
	}
	slices.Sort(out)
	return out, nil
}

// reportFlows writes the results: key=value lines per shape, or one JSON
// array.
func reportFlows(cfg FlowConfig, res []*FlowResult) error {
	if cfg.JSON {
		enc := json.NewEncoder(cfg.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fmt.Errorf("write result: %w", err)
		}
		return nil
	}
	var err error
	for _, r := range res {
		line := func(key string, v float64, prec int) {
			if err == nil {
				_, err = fmt.Fprintf(cfg.Out, "%s_%s_%s=%.*f\n", r.System, r.Shape, key, prec, v)
			}
		}
		line("start_runs_per_sec", r.StartRunsPerSec, 0)
		line("runs_per_sec", r.RunsPerSec, 0)
		line("steps_per_sec", r.StepsPerSec, 0)
		line("step_latency_p50_ms", r.StepLatency.P50, 2)
		line("step_latency_p90_ms", r.StepLatency.P90, 2)
		line("step_latency_p99_ms", r.StepLatency.P99, 2)
		line("step_latency_max_ms", r.StepLatency.Max, 2)
	}
	if err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}
