// Command chaos is docket's chaos run: a throwaway PostgreSQL (or, with
// -backend sqlite, one SQLite file every process opens), an external
// nats-server, several `docket serve` processes, in-process Go workers and
// `docket worker --exec` workers, while processes are killed, paused and
// restarted on a seeded random schedule; then every invariant is checked.
//
//	go run ./bench/chaos -seed 1 -duration 10m -jobs 5000 -runs 1000
//
// Besides plain jobs it starts workflow runs (chains, diamonds, fan-outs
// of 50 with their fan-in, conditional skips, failing steps) whose step
// jobs the same workers run, and runs whose human step simulated
// contributors work over HTTP (taking, judging, releasing, abandoning
// and judging too late) while the servers they talk to are killed.
//
// It exits 1 when the checker found violations. It is also the worker
// binary of the run: `chaos worker` is an in-process Go worker and
// `chaos exec` the program `docket worker --exec` runs per job.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/docket-run/docket/internal/chaos"
	"github.com/docket-run/docket/internal/spawn"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == chaos.RoleWorker || os.Args[1] == chaos.RoleExec) {
		os.Exit(chaos.RunRole(os.Args[1]))
	}
	os.Exit(run())
}

func run() int {
	var cfg chaos.Config
	flag.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "seed of the scripts and the fault schedule")
	flag.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "length of the submit-and-fault phase")
	flag.IntVar(&cfg.Jobs, "jobs", 1000, "jobs submitted over the phase")
	flag.IntVar(&cfg.Runs, "runs", 200, "workflow runs started over the phase (chains, diamonds, fan-outs of 50, skips, failing steps)")
	flag.IntVar(&cfg.HumanRuns, "human-runs", 100, "runs of a workflow with a human step (job → human → job) started over the first part of the phase, worked by 16 simulated contributors over HTTP")
	flag.IntVar(&cfg.Servers, "servers", 3, "docket serve processes")
	flag.IntVar(&cfg.GoWorkers, "go-workers", 2, "in-process Go worker processes")
	flag.IntVar(&cfg.ExecWorkers, "exec-workers", 1, "docket worker --exec processes")
	flag.IntVar(&cfg.MaxFaults, "max-faults", 0, "most faults injected (0: as many as the phase allows)")
	flag.DurationVar(&cfg.FaultGap, "fault-gap", 3*time.Second, "mean pause between faults")
	flag.StringVar(&cfg.DocketBin, "docket", "", "docket binary (default: built from ./cmd/docket)")
	flag.StringVar(&cfg.TestDBScript, "testdb", "scripts/testdb.sh", "the throwaway PostgreSQL script")
	flag.StringVar(&cfg.Backend, "backend", chaos.BackendPostgres, "database every process shares: postgres (a throwaway cluster, restarted among the faults) or sqlite (one file, opened by every process)")
	flag.StringVar(&cfg.Dir, "dir", "", "directory for logs, NATS storage and the SQLite database (default a temporary one, kept on failure)")
	flag.Parse()
	cfg.Log = os.Stderr

	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	cfg.WorkerBin = self
	if cfg.DocketBin == "" {
		bin, cleanup, err := spawn.BuildDocket("docket-chaos-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 2
		}
		defer cleanup()
		cfg.DocketBin = bin
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	fmt.Print(rep)
	if len(rep.Violations) > 0 {
		fmt.Printf("  logs kept in %s\n", rep.Dir)
		return 1
	}
	return 0
}
