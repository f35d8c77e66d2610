// Command load measures the "load held" of one `docket serve` process: an
// open-loop load of submissions at fixed rates, step after step, while
// workers work the jobs; it reports, per step, the rate achieved, the
// errors, the submit latency percentiles (from each job's due time) and the
// backlog's growth, and last the highest rate held:
//
//	go run ./bench/load -rates 100,200,500,1000 -step-duration 2m
//	go run ./bench/load -database-url "$(scripts/testdb.sh url)" -rates 500,1000
//
// The verdict rule is in the documentation of internal/loadtest. Progress
// goes to stderr every 5 s; the table and then load_highest_held_rate=R go
// to stdout (-o json: one JSON object instead). It exits 1 when the
// database check after the run found a problem, 2 when the run could not
// be carried out, 130 on SIGINT (after stopping everything and printing the
// steps finished).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docket-run/docket/internal/loadtest"
	"github.com/docket-run/docket/internal/spawn"
)

func main() {
	os.Exit(run())
}

// envList is a repeatable KEY=VALUE flag.
type envList []string

func (e *envList) String() string { return strings.Join(*e, ",") }

func (e *envList) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	*e = append(*e, v)
	return nil
}

func run() int {
	cfg := loadtest.Config{Log: os.Stderr}
	var (
		rates   = flag.String("rates", joinInts(loadtest.RatesDefault), "steps, in submissions per second, comma-separated")
		output  = flag.String("o", "text", "report format: text or json")
		keepDB  = flag.Bool("keep-schema", false, "PostgreSQL: keep the run's schema instead of dropping it")
		serveEn envList
	)
	flag.StringVar(&cfg.DocketBin, "docket", "", "docket binary (default: built from ./cmd/docket)")
	flag.StringVar(&cfg.DatabaseURL, "database-url", "", "PostgreSQL URL (the run makes a schema of its own in it and drops it after) or sqlite:PATH of an empty database (default: a new SQLite file in a temporary directory)")
	flag.StringVar(&cfg.Dir, "dir", "", "directory for the server's log and data, kept (default: a temporary one, removed)")
	flag.DurationVar(&cfg.StepDuration, "step-duration", loadtest.StepDurationDefault, "measured length of each step")
	flag.DurationVar(&cfg.Warmup, "warmup", loadtest.WarmupDefault, "unmeasured start of each step")
	flag.BoolVar(&cfg.StopOnFail, "stop-on-fail", true, "stop after the first step not held")
	flag.StringVar(&cfg.Workers, "workers", loadtest.WorkersGo, "workers: go (docket.Worker in this program, on the database) or http (lease protocol of the server)")
	flag.IntVar(&cfg.WorkerConcurrency, "worker-concurrency", 0, fmt.Sprintf("go: jobs run at once (default %d); http: workers, each leasing up to 10 jobs per call (default %d)", loadtest.WorkerConcurrencyDefault, loadtest.HTTPWorkersDefault))
	flag.DurationVar(&cfg.WorkerPollInterval, "worker-poll-interval", loadtest.WorkerPollIntervalDefault, "go workers: fallback poll for jobs (on SQLite, the server's inserts cannot wake them)")
	flag.IntVar(&cfg.MaxInFlight, "max-in-flight", loadtest.MaxInFlightDefault, "most submissions awaiting an answer at once")
	flag.DurationVar(&cfg.RequestTimeout, "request-timeout", loadtest.RequestTimeoutDefault, "deadline of one submission (past it, an error)")
	flag.DurationVar(&cfg.DrainTimeout, "drain-timeout", loadtest.DrainTimeoutDefault, "wait for the backlog to empty after the last step")
	flag.Var(&serveEn, "serve-env", "KEY=VALUE environment of docket serve (repeatable), e.g. DOCKET_LOG_LEVEL=debug")
	flag.Parse()
	cfg.ServeEnv = serveEn
	if *output != "text" && *output != "json" {
		fmt.Fprintf(os.Stderr, "load: -o %q: must be text or json\n", *output)
		return 2
	}
	var err error
	if cfg.Rates, err = parseInts(*rates); err != nil {
		fmt.Fprintf(os.Stderr, "load: -rates: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.DocketBin == "" {
		fmt.Fprintln(os.Stderr, "load: building docket")
		bin, cleanup, err := spawn.BuildDocket("docket-load-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			return 2
		}
		defer cleanup()
		cfg.DocketBin = bin
	}
	if loadtest.IsPostgres(cfg.DatabaseURL) {
		url, drop, err := loadtest.NewPostgresSchema(ctx, cfg.DatabaseURL)
		if err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			return 2
		}
		cfg.DatabaseURL = url
		if !*keepDB {
			defer func() {
				dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				if err := drop(dropCtx); err != nil {
					fmt.Fprintln(os.Stderr, "load:", err)
				}
			}()
		} else {
			fmt.Fprintf(os.Stderr, "load: database kept: %s\n", url)
		}
	}

	rep, err := loadtest.Run(ctx, cfg)
	if rep != nil {
		write := rep.WriteText
		if *output == "json" {
			write = rep.WriteJSON
		}
		if werr := write(os.Stdout); werr != nil {
			fmt.Fprintln(os.Stderr, "load:", werr)
			return 2
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(os.Stderr, "load: interrupted")
		return 130
	case err != nil:
		fmt.Fprintln(os.Stderr, "load:", err)
		return 2
	case rep.Final != nil && len(rep.Final.Problems) > 0:
		return 1
	}
	return 0
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}
