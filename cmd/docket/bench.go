package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/bench"
)

// benchWorkersDefault is the handler slots of `docket bench`: no-op jobs
// need many slots to keep the database busy.
const benchWorkersDefault = 5000

// benchBatchDefault is the most jobs one acquisition takes: with thousands
// of slots, large batches keep the statements per job low.
const benchBatchDefault = 2000

func benchCommand() *cobra.Command {
	var (
		cfg     bench.Config
		workers int
		batch   int
		flush   int
		output  string
		profile string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput and latency with no-op jobs and workflow runs",
		Long: `Measure docket with no-op jobs on a fresh database.

  --mode burn --jobs N          insert N jobs (insert jobs/s), then work them
                                to zero (jobs/s = N / time from worker start
                                to the last committed completion)
  --mode continuous --duration D
                                work for D while keeping at least 75,000 jobs
                                available (topped up every 250 ms)
  --mode latency --rate R --duration D
                                insert R jobs/s one by one (open loop) and
                                report the time from each insert's commit to
                                its handler's start
  --mode workflow --runs N      start N runs of a 4-step chain, then work them
                                to the end; then the same with a diamond
                                (1 step, 2 in parallel, 1 join); every step a
                                no-op job. Reports runs/s and steps/s (from
                                worker start to the last run's committed end)
                                and the step-to-step latency (from a parent
                                job's completion, its finished_at, to the
                                child's handler start) p50/p99
  --mode crowd --units N --contributors C --strategy S
                                one hot pool of N units × 3 judgments (set
                                up on the database), C contributors with a
                                key each; serves it in this process (docket
                                serve with --take-strategy S; or --server URL
                                of a running one), and C concurrent simulated
                                contributors work it over HTTP (take, submit)
                                until nothing is left. Reports judgments/s and
                                assign and submit latency p50/p99, then checks
                                the tables: no slot assigned twice, no
                                contributor twice on a unit, every unit
                                FINALIZED with exactly 3 judgments, counters
                                exact; a violation fails the command.
                                --think D: each contributor pauses between a
                                submit and its next take, exponentially
                                distributed with mean D (seeded per
                                contributor: reproducible); reports the
                                offered rate, contributors / (D + the mean
                                take + submit time). Measure the throughput
                                with --think 0 (the default: a closed loop,
                                where the latency is only the contributors
                                over the throughput, Little's law); measure
                                the latency at an offered load below
                                capacity, e.g. --think 200ms with 500
                                contributors (~2,000 judgments/s). With
                                think time each contributor's first take
                                waits one pause too (arrivals spread out as
                                in the steady state, not all at once).
                                --trace F: one CSV line per take and
                                submit (take's start in Unix µs, assign
                                ms, submit ms), to see when slow ones came
  --mode workflow-latency --rate R --duration D
                                start R runs/s of each shape one by one (open
                                loop; default 100 runs/s) and report the same
                                figures: the step-to-step latency at a fixed
                                rate

A database with unfinished jobs (a continuous run leaves some) is refused;
--reset empties docket's tables first (the migrations are reverted and
applied again: every job, key and webhook there is lost), so back-to-back
runs on one database are one command each.

Completions are counted as committed, not as handler returns: in burn and
continuous modes from the client's OnJobFinished, which runs after each
commit, checked against the database at the end (the run fails if the
database holds a different number); --count-in-database counts the jobs table every
--interval instead, which costs the server a scan of the table each time.
Progress goes to stderr every --interval; the result to stdout as
docket_insert_jobs_per_sec=… and docket_jobs_per_sec=… lines (and latency
percentiles), or as JSON with -o json.`,
		Args: cobra.NoArgs,
	}
	url := databaseURLFlag(cmd, "sqlite:docket-bench.db")
	f := cmd.Flags()
	f.StringVar(&cfg.Mode, "mode", bench.ModeBurn, "burn, continuous, latency, workflow, workflow-latency or crowd")
	var crowd crowdBenchConfig
	f.IntVar(&crowd.Units, "units", crowdBenchUnitsDefault, "crowd: units of the pool (each judged 3 times)")
	f.IntVar(&crowd.Contributors, "contributors", crowdBenchContributorsDefault, "crowd: concurrent simulated contributors")
	f.StringVar(&crowd.Strategy, "strategy", string(docket.TakeStrategyDefault), "crowd: take strategy of the server started here: ordered, random or candidates")
	f.DurationVar(&crowd.Think, "think", 0, "crowd: each contributor's mean pause between a submit and its next take (exponential; 0: none, a closed loop)")
	var trace string
	f.StringVar(&trace, "trace", "", "crowd: write one CSV line per take and submit to this file (start_unix_us,assign_ms,submit_ms)")
	f.StringVar(&crowd.Server, "server", "", "crowd: URL of a running docket serve on the same database, instead of starting one (its --take-strategy applies)")
	var (
		runs     int
		runBatch int
		shape    string
	)
	f.IntVar(&runs, "runs", bench.RunsDefault, "workflow: runs of each shape")
	f.IntVar(&runBatch, "run-batch", bench.RunBatchDefault, "workflow: runs per RunStartMany call")
	f.StringVar(&shape, "shape", "", "workflow modes: chain or diamond (default both)")
	f.IntVar(&cfg.Jobs, "jobs", bench.JobsDefault, "burn: jobs to insert and work")
	f.DurationVar(&cfg.Duration, "duration", bench.DurationDefault, "continuous, latency: how long to run")
	// 0 when not given: each mode has its own default, which the usage
	// states (the flag's own default would name one for both).
	f.IntVar(&cfg.Rate, "rate", 0, fmt.Sprintf("latency: jobs inserted per second; workflow-latency: runs started per second (default %d for latency, %d for workflow-latency)",
		bench.RateDefault, bench.RunRateDefault))
	f.IntVar(&cfg.InsertBatch, "insert-batch", bench.InsertBatchDefault, "jobs per InsertMany call")
	f.IntVar(&cfg.InsertConcurrency, "insert-concurrency", bench.InsertConcurrencyDefault, "InsertMany calls in flight at once")
	f.DurationVar(&cfg.Interval, "interval", bench.IntervalDefault, "progress and sample period")
	f.BoolVar(&cfg.CountInDatabase, "count-in-database", false, "count completions in the database every --interval, not from the client's commit reports")
	f.IntVar(&workers, "workers", benchWorkersDefault, "handlers running at once")
	f.IntVar(&batch, "batch", benchBatchDefault, "most jobs acquired per query")
	f.IntVar(&flush, "complete-batch", 0, "most completions written per statement (0: the worker default)")
	f.StringVarP(&output, "output", "o", "text", "text or json")
	f.StringVar(&profile, "cpuprofile", "", "write a CPU profile of the run (go tool pprof) to this file")
	reset := f.Bool("reset", false, "empty docket's tables first (drops every job, key and webhook of this database)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		// Bad values are refused before the database is touched: the
		// harness would take a zero or negative one for its default.
		var bad []error
		switch cfg.Mode {
		case bench.ModeBurn, bench.ModeContinuous, bench.ModeLatency, bench.ModeWorkflow, bench.ModeWorkflowLatency, "crowd":
		default:
			bad = append(bad, usageErrorf("--mode %q: want burn, continuous, latency, workflow, workflow-latency or crowd", cfg.Mode))
		}
		for _, n := range []struct {
			flag string
			v    int
		}{
			{"jobs", cfg.Jobs}, {"insert-batch", cfg.InsertBatch},
			{"insert-concurrency", cfg.InsertConcurrency}, {"workers", workers}, {"batch", batch},
			{"runs", runs}, {"run-batch", runBatch}, {"units", crowd.Units}, {"contributors", crowd.Contributors},
		} {
			if n.v < 1 {
				bad = append(bad, usageErrorf("--%s %d: must be at least 1", n.flag, n.v))
			}
		}
		if f.Changed("rate") && cfg.Rate < 1 {
			bad = append(bad, usageErrorf("--rate %d: must be at least 1", cfg.Rate))
		}
		if flush < 0 {
			bad = append(bad, usageErrorf("--complete-batch %d: must not be negative (0: the worker default)", flush))
		}
		for _, d := range []struct {
			flag string
			v    time.Duration
		}{{"duration", cfg.Duration}, {"interval", cfg.Interval}} {
			if d.v <= 0 {
				bad = append(bad, usageErrorf("--%s %s: must be positive", d.flag, d.v))
			}
		}
		if crowd.Think < 0 {
			bad = append(bad, usageErrorf("--think %s: must not be negative", crowd.Think))
		}
		if len(bad) > 0 {
			return asUsage(errors.Join(bad...))
		}
		var shapes []bench.Shape
		switch shape {
		case "":
		case bench.ShapeChain.Name:
			shapes = []bench.Shape{bench.ShapeChain}
		case bench.ShapeDiamond.Name:
			shapes = []bench.Shape{bench.ShapeDiamond}
		default:
			return usageErrorf("--shape %q: want chain or diamond", shape)
		}
		switch output {
		case "text":
		case "json":
			cfg.JSON = true
		default:
			return usageErrorf("--output %q: want text or json", output)
		}
		ctx := cmd.Context()
		// Burn and continuous count completions from the client's commit
		// reports; the other modes, and --count-in-database, leave
		// OnJobFinished unset, as before.
		var commits *benchCommits // nil: the harness counts in the database
		ccfg := docket.Config{DatabaseURL: *url, AutoMigrate: true}
		if cfg.CountsReports() {
			commits = &benchCommits{}
			ccfg.OnJobFinished = commits.finished
		}
		client, err := openClientConfig(ctx, ccfg, slog.LevelWarn)
		if err != nil {
			return err
		}
		defer client.Close()
		if *reset {
			if err := resetDatabase(ctx, client); err != nil {
				return err
			}
		}
		cfg.Out, cfg.Log = cmd.OutOrStdout(), cmd.ErrOrStderr()
		if profile != "" {
			f, err := os.Create(profile)
			if err != nil {
				return fmt.Errorf("create cpu profile: %w", err)
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return fmt.Errorf("start cpu profile: %w", err)
			}
			defer pprof.StopCPUProfile()
		}
		if cfg.Mode == "crowd" {
			crowd.DatabaseURL, crowd.JSON, crowd.Out, crowd.Log = *url, cfg.JSON, cfg.Out, cfg.Log
			if trace != "" {
				tf, err := os.Create(trace)
				if err != nil {
					return fmt.Errorf("--trace: %w", err)
				}
				tw := bufio.NewWriter(tf)
				crowd.Trace = tw
				if _, err := tw.WriteString("start_unix_us,assign_ms,submit_ms\n"); err != nil {
					_ = tf.Close()
					return fmt.Errorf("--trace: %w", err)
				}
				_, err = runCrowdBench(ctx, client, crowd)
				if ferr := errors.Join(tw.Flush(), tf.Close()); err == nil && ferr != nil {
					err = fmt.Errorf("--trace: %w", ferr)
				}
				return err
			}
			_, err = runCrowdBench(ctx, client, crowd)
			return err
		}
		if cfg.Mode == bench.ModeWorkflow || cfg.Mode == bench.ModeWorkflowLatency {
			fc := bench.FlowConfig{
				Mode: cfg.Mode, Runs: runs, RunBatch: runBatch, Rate: cfg.Rate, Duration: cfg.Duration,
				Interval: cfg.Interval, JSON: cfg.JSON, Out: cfg.Out, Log: cfg.Log,
			}
			fc.Shapes = shapes
			_, err = bench.RunFlows(ctx, &benchFlowSystem{client: client, workers: workers, batch: batch, flush: flush}, fc)
		} else {
			_, err = bench.Run(ctx, &benchSystem{client: client, workers: workers, batch: batch, flush: flush, commits: commits}, cfg)
		}
		if errors.Is(err, bench.ErrNotFresh) {
			return fmt.Errorf("%w, or pass --reset to empty this one first", err)
		}
		return err
	}
	return cmd
}

// resetDatabase empties docket's tables by reverting every migration and
// applying them again: the same on both backends, and it leaves nothing
// of a previous run (jobs, attempts, outbox, queues, nodes, keys).
func resetDatabase(ctx context.Context, client *docket.Client) error {
	if _, err := client.Migrate(ctx, docket.MigrateDown, 0); err != nil {
		return fmt.Errorf("reset: revert the migrations: %w", err)
	}
	if _, err := client.Migrate(ctx, docket.MigrateUp, 0); err != nil {
		return fmt.Errorf("reset: apply the migrations: %w", err)
	}
	return nil
}

// benchArgs is the no-op job of `docket bench`.
type benchArgs struct{}

func (benchArgs) JobType() string { return "bench.noop" }

// benchSystem adapts the public docket API to the bench harness.
type benchSystem struct {
	client  *docket.Client
	workers int
	batch   int
	flush   int
	worker  *docket.Worker
	commits *benchCommits // the client's OnJobFinished; nil when it has none
}

// benchCommits reports the client's committed successes to the hooks of
// the running benchmark (bench.CommitReporter): Config.OnJobFinished runs
// after each finishing statement's commit, once per job it applied.
type benchCommits struct{ hooks atomic.Pointer[bench.Hooks] }

func (c *benchCommits) finished(e docket.JobFinishedEvent) {
	if h := c.hooks.Load(); h != nil && e.State == docket.JobStateSuccess {
		h.Committed(1)
	}
}

func (s *benchSystem) ReportsCommits() bool { return s.commits != nil }

func (s *benchSystem) Name() string    { return "docket" }
func (s *benchSystem) Backend() string { return s.client.Backend() }

func (s *benchSystem) Insert(ctx context.Context, n int) error {
	jobs := make([]docket.InsertParams, n)
	for i := range jobs {
		jobs[i].Args = benchArgs{}
	}
	_, err := s.client.InsertMany(ctx, jobs)
	return err
}

func (s *benchSystem) InsertOne(ctx context.Context) (string, error) {
	res, err := s.client.Insert(ctx, benchArgs{}, nil)
	if err != nil {
		return "", err
	}
	return res.Job.ID.String(), nil
}

func (s *benchSystem) StartWorkers(ctx context.Context, h *bench.Hooks) error {
	if s.commits != nil {
		s.commits.hooks.Store(h)
	}
	w := docket.NewWorker(s.client, docket.WorkerConfig{
		Queues:     map[string]int{benchArgs{}.JobType(): s.workers},
		FetchBatch: s.batch, CompleteBatch: s.flush,
	})
	docket.AddHandler(w, func(_ context.Context, job *docket.Job[benchArgs]) error {
		if h.Tracking() {
			h.Started(job.ID.String())
		}
		h.Returned()
		return nil
	})
	if err := w.Start(ctx); err != nil {
		return err
	}
	s.worker = w
	return nil
}

func (s *benchSystem) StopWorkers(ctx context.Context) error {
	if s.worker != nil {
		s.worker.Stop(ctx)
	}
	return nil
}

func (s *benchSystem) CountCompleted(ctx context.Context) (int, error) {
	counts, err := s.client.CountByState(ctx)
	if err != nil {
		return 0, err
	}
	return counts[docket.JobStateSuccess], nil
}

func (s *benchSystem) CountUnfinished(ctx context.Context) (int, error) {
	counts, err := s.client.CountByState(ctx)
	if err != nil {
		return 0, err
	}
	return counts[docket.JobStateCreated] + counts[docket.JobStateQueued] +
		counts[docket.JobStateRunning] + counts[docket.JobStateRetry], nil
}
