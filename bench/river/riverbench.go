// Package riverbench adapts River (github.com/riverqueue/river) to docket's
// bench harness (internal/bench), so that River and `docket bench` are
// measured on the same workloads with the same counting: no-op jobs,
// completions counted as committed (from River's subscription to completed
// jobs, which it sends after the completing statement returns, checked
// against the database at the end; with -count-in-database, by counting
// the table every -interval).
//
// It is a module of its own, as are the two programs that use it
// (postgres/ with the latest River, sqlite/ with riversqlite, whose latest
// release needs River v0.31.0), so that River's dependencies never enter
// docket's go.mod.
package riverbench

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/docket-run/docket/internal/bench"
)

// Flags are the command line of both programs.
type Flags struct {
	URL           string
	Config        bench.Config
	Workers       int
	FetchCooldown time.Duration
	FetchPoll     time.Duration
}

// ParseFlags parses os.Args.
func ParseFlags() (*Flags, error) {
	f := &Flags{}
	var output string
	flag.StringVar(&f.URL, "database-url", "", "postgres://… or sqlite:PATH")
	flag.StringVar(&f.Config.Mode, "mode", bench.ModeBurn, "burn, continuous or latency")
	flag.IntVar(&f.Config.Jobs, "jobs", bench.JobsDefault, "burn: jobs to insert and work")
	flag.DurationVar(&f.Config.Duration, "duration", bench.DurationDefault, "continuous, latency: how long to run")
	flag.IntVar(&f.Config.Rate, "rate", bench.RateDefault, "latency: jobs inserted per second")
	flag.IntVar(&f.Config.InsertBatch, "insert-batch", bench.InsertBatchDefault, "jobs per InsertManyFast call")
	flag.IntVar(&f.Config.InsertConcurrency, "insert-concurrency", bench.InsertConcurrencyDefault, "InsertManyFast calls in flight at once")
	flag.DurationVar(&f.Config.Interval, "interval", bench.IntervalDefault, "progress and sample period")
	flag.BoolVar(&f.Config.CountInDatabase, "count-in-database", false, "count completions in the database every -interval, not from River's completed-job events")
	flag.IntVar(&f.Workers, "workers", 5000, "MaxWorkers of the queue")
	flag.IntVar(new(int), "batch", 0, "ignored: River fetches up to its free worker slots")
	flag.DurationVar(&f.FetchCooldown, "fetch-cooldown", 0, "River FetchCooldown (0: River's default, 100ms)")
	flag.DurationVar(&f.FetchPoll, "fetch-poll-interval", 0, "River FetchPollInterval (0: River's default, 1s)")
	flag.StringVar(&output, "o", "text", "text or json")
	flag.Parse()
	switch output {
	case "text":
	case "json":
		f.Config.JSON = true
	default:
		return nil, fmt.Errorf("-o %q: want text or json", output)
	}
	f.Config.Out, f.Config.Log = os.Stdout, os.Stderr
	return f, nil
}

// Run migrates River's schema and runs the benchmark. count runs a
// query returning one integer.
func Run[TTx any](ctx context.Context, f *Flags, backend string, driver riverdriver.Driver[TTx],
	count func(ctx context.Context, query string) (int, error)) error {
	s := &system[TTx]{backend: backend, driver: driver, flags: f, count: count}
	migrator, err := rivermigrate.New(s.driver, nil)
	if err != nil {
		return fmt.Errorf("migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// Logs go to stderr: stdout carries the result (-o json).
	if s.client, err = river.NewClient(s.driver, &river.Config{Logger: stderrLogger()}); err != nil {
		return fmt.Errorf("insert client: %w", err)
	}
	_, err = bench.Run(ctx, s, f.Config)
	return err
}

// stderrLogger is River's logger for both clients: warnings and errors, on
// stderr.
func stderrLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// noopArgs is the no-op job.
type noopArgs struct{}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	hooks *bench.Hooks
}

func (w *noopWorker) Work(_ context.Context, job *river.Job[noopArgs]) error {
	if w.hooks.Tracking() {
		w.hooks.Started(strconv.FormatInt(job.ID, 10))
	}
	w.hooks.Returned()
	return nil
}

// system adapts a River client to the bench harness.
type system[TTx any] struct {
	backend string
	driver  riverdriver.Driver[TTx]
	flags   *Flags
	count   func(ctx context.Context, query string) (int, error)

	client *river.Client[TTx] // inserts only
	worker *river.Client[TTx]

	unsubscribe func()        // ends the subscription to completed jobs
	forwarded   chan struct{} // closed when its events are all reported
}

// subscribeChanSize is the subscription's buffer. River drops an event
// its subscriber's buffer cannot take (v0.51.1 logs a warning, v0.31.0,
// which the SQLite program uses, says nothing); the harness then fails
// the run, as the reports fall short of the database. The forwarding loop
// only adds to a counter, and River's completer hands over one completed
// batch at a time (up to a few thousand jobs).
const subscribeChanSize = 1 << 17

// ReportsCommits implements bench.CommitReporter: StartWorkers reports
// River's completed-job events when the harness counts them
// (bench.Config.CountsReports), as docket bench sets OnJobFinished.
func (s *system[TTx]) ReportsCommits() bool { return s.flags.Config.CountsReports() }

func (s *system[TTx]) Name() string    { return "river" }
func (s *system[TTx]) Backend() string { return s.backend }

func (s *system[TTx]) Insert(ctx context.Context, n int) error {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i].Args = noopArgs{}
	}
	_, err := s.client.InsertManyFast(ctx, params)
	return err
}

func (s *system[TTx]) InsertOne(ctx context.Context) (string, error) {
	res, err := s.client.Insert(ctx, noopArgs{}, nil)
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(res.Job.ID, 10), nil
}

func (s *system[TTx]) StartWorkers(ctx context.Context, h *bench.Hooks) error {
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{hooks: h})
	c, err := river.NewClient(s.driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: s.flags.Workers}},
		Workers:           workers,
		FetchCooldown:     s.flags.FetchCooldown,
		FetchPollInterval: s.flags.FetchPoll,
		Logger:            stderrLogger(),
	})
	if err != nil {
		return err
	}
	s.unsubscribe = func() {}
	s.forwarded = make(chan struct{})
	if s.ReportsCommits() {
		// River sends a job's completed event after the statement that
		// completed it returned (its batch completer, autocommitted).
		var events <-chan *river.Event
		events, s.unsubscribe = c.SubscribeConfig(&river.SubscribeConfig{
			Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: subscribeChanSize,
		})
		go func() {
			defer close(s.forwarded)
			for range events {
				h.Committed(1)
			}
		}()
	} else {
		close(s.forwarded)
	}
	if err := c.Start(ctx); err != nil {
		s.unsubscribe()
		return err
	}
	s.worker = c
	return nil
}

func (s *system[TTx]) StopWorkers(ctx context.Context) error {
	if s.worker == nil {
		return nil
	}
	err := s.worker.Stop(ctx)
	s.unsubscribe()
	<-s.forwarded
	return err
}

// The counts read the whole table grouped by state, as docket's
// Client.CountByState does, so that counting costs both the same.

func (s *system[TTx]) CountCompleted(ctx context.Context) (int, error) {
	return s.count(ctx, `SELECT coalesce(sum(CASE WHEN state = 'completed' THEN n END), 0)
		FROM (SELECT state, count(*) AS n FROM river_job GROUP BY state) c`)
}

func (s *system[TTx]) CountUnfinished(ctx context.Context) (int, error) {
	return s.count(ctx, `SELECT coalesce(sum(CASE WHEN state NOT IN ('completed', 'cancelled', 'discarded') THEN n END), 0)
		FROM (SELECT state, count(*) AS n FROM river_job GROUP BY state) c`)
}
