package chaos_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/chaos"
	"github.com/docket-run/docket/internal/flow"
)

// chaosSeed is the fixed seed of the suite's chaos run.
const chaosSeed = 7

// chaosHumanRuns is how many runs with a human step it starts.
const chaosHumanRuns = 20

// TestChaosShort is a short chaos run: 3 servers, 2 Go workers and one
// exec worker on a PostgreSQL and a NATS of their own, running 200 jobs
// and 40 workflow runs of every shape and 20 runs with a human step
// worked by simulated contributors under a seeded schedule of kills,
// pauses and restarts; every invariant must hold.
// The binaries are built without -race: the run is about processes
// dying, and race-built ones would make it too slow for 2 cores.
func TestChaosShort(t *testing.T) {
	runChaosShort(t, chaos.BackendPostgres)
}

// TestChaosShortSQLite is the same run on one SQLite file that every
// process opens (several processes on one file is a supported way to run
// docket), without the database restarts: a SQLite file has no server to
// restart.
func TestChaosShortSQLite(t *testing.T) {
	runChaosShort(t, chaos.BackendSQLite)
}

// runChaosShort runs the short chaos run on backend and checks its report.
func runChaosShort(t *testing.T, backend string) {
	if testing.Short() {
		t.Skip("chaos run: not in -short")
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl"); len(m) == 0 && backend == chaos.BackendPostgres {
		if os.Getenv("CI") != "" {
			t.Fatal("PostgreSQL is needed (scripts/testdb.sh start installs it)")
		}
		t.Skip("PostgreSQL is needed (scripts/testdb.sh start installs it)")
	}
	if _, err := exec.LookPath("nats-server"); err != nil {
		if _, err := os.Stat("/usr/sbin/nats-server"); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatal("nats-server is needed (apt-get install nats-server)")
			}
			t.Skip("nats-server is needed (apt-get install nats-server)")
		}
	}
	bin := t.TempDir()
	for _, b := range []struct{ out, pkg string }{
		{"docket", "github.com/docket-run/docket/cmd/docket"},
		{"chaos", "github.com/docket-run/docket/bench/chaos"},
	} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(bin, b.out), b.pkg).CombinedOutput()
		require.NoError(t, err, "go build %s:\n%s", b.pkg, out)
	}
	script, err := filepath.Abs("../../scripts/testdb.sh")
	require.NoError(t, err)

	rep, err := chaos.Run(t.Context(), chaos.Config{
		Seed:           chaosSeed,
		Duration:       45 * time.Second,
		Jobs:           200,
		Runs:           40,
		HumanRuns:      chaosHumanRuns,
		FaultGap:       2 * time.Second,
		QuiesceTimeout: 90 * time.Second,
		DocketBin:      filepath.Join(bin, "docket"),
		WorkerBin:      filepath.Join(bin, "chaos"),
		TestDBScript:   script,
		Backend:        backend,
		Log:            tWriter{t},
	})
	require.NoError(t, err)
	t.Log(rep)
	require.Equal(t, backend, rep.Backend)
	require.Empty(t, rep.Violations, "logs kept in %s", rep.Dir)
	require.Equal(t, 200, rep.Jobs)
	require.Equal(t, 40+chaosHumanRuns, rep.Runs)
	require.Equal(t, chaosHumanRuns, rep.HumanRuns)
	require.Equal(t, chaosHumanRuns, rep.RunShapes[chaos.HumanShape.Name])
	for _, sh := range chaos.Shapes {
		require.NotZero(t, rep.RunShapes[sh.Name], "no run of workflow %s", sh.Name)
	}
	require.Equal(t, 40+chaosHumanRuns, rep.RunStates[flow.RunSucceeded]+rep.RunStates[flow.RunFailed], "every run ended, as its shape wants (the checker holds each to it)")
	require.GreaterOrEqual(t, rep.Crowd.Judgments, chaosHumanRuns*chaos.HumanJudgments, "every unit got its judgments")
	require.NotZero(t, rep.Crowd.Abandoned, "no assignment was abandoned: the reaper went untested")
	require.NotZero(t, rep.Crowd.LateRefuse, "no late judgment was refused")
	require.NotZero(t, rep.Crowd.Repeats, "no judgment was sent twice")
	require.NotZero(t, rep.Crowd.Releases, "no assignment was released")
	require.NotZero(t, rep.Crowd.Flags, "no spammer was flagged")
	require.NotZero(t, rep.Crowd.Unflags, "no spammer was forgiven")
	require.NotZero(t, rep.Crowd.ResultChanges, "no finalized result was repaired")
	require.NotZero(t, rep.StepJobsByExec, "no step job ran on the exec worker: the lease API's advancement went untested")
	kinds := []string{chaos.FaultKillServe, chaos.FaultKillWorker, chaos.FaultKillExec,
		chaos.FaultNATSStop, chaos.FaultPauseWorker, chaos.FaultKillServeJudging}
	if backend == chaos.BackendPostgres {
		kinds = append(kinds, chaos.FaultPGFast, chaos.FaultPGImmediate)
	}
	for _, kind := range kinds {
		require.NotZero(t, rep.Faults[kind], "fault %s was never injected", kind)
	}
	if backend == chaos.BackendSQLite {
		require.Zero(t, rep.Faults[chaos.FaultPGFast]+rep.Faults[chaos.FaultPGImmediate], "a database restart on SQLite")
	}
}

// tWriter sends the run's progress lines to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
