package docket_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

// Child processes: the test binary re-run with these variables set.
const (
	childRoleEnv = "DOCKET_TEST_CHILD"
	childURLEnv  = "DOCKET_TEST_CHILD_URL"
	childFileEnv = "DOCKET_TEST_CHILD_FILE"
)

type (
	raceArgs  struct{ N int }
	crashArgs struct{}
)

func (raceArgs) JobType() string  { return "test.race" }
func (crashArgs) JobType() string { return "test.crash" }

// runChild is a worker process: "race" logs every execution to a file and
// runs until SIGTERM; "crash" signals (by creating a file) that it is inside
// a handler and then hangs there until it is killed.
func runChild(role string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: os.Getenv(childURLEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer client.Close()
	path := os.Getenv(childFileEnv)
	cfg := docket.WorkerConfig{PollInterval: 50 * time.Millisecond, LeaderTTL: 300 * time.Millisecond}
	var w *docket.Worker
	switch role {
	case "race":
		log, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		defer log.Close()
		cfg.Queues = map[string]int{"test.race": 8}
		cfg.FetchBatch = 8
		w = docket.NewWorker(client, cfg)
		docket.AddHandler(w, func(ctx context.Context, j *docket.Job[raceArgs]) error {
			start := time.Now().UnixNano()
			if j.Args.N%10 == 0 {
				time.Sleep(time.Millisecond) // widen the window for overlaps
			}
			line := fmt.Sprintf("%s %d %s %d %d\n", j.ID, j.Attempt, j.LeaseOwner, start, time.Now().UnixNano())
			_, err := log.WriteString(line) // one write, O_APPEND: lines never interleave
			return err
		})
	case "flowrace-left", "flowrace-right":
		log, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		defer log.Close()
		// Both work the shared queue; only this one works its side's.
		cfg.Queues = map[string]int{stepArgs{}.JobType(): 8, "race2-" + strings.TrimPrefix(role, "flowrace-"): 8}
		cfg.FetchBatch = 8
		// No sweep during the test: the sweeper is for a process that
		// died between a job's end and its advancement, and would also
		// release a join the advancement lost in a race, hiding it. So a
		// lost join stalls its run and fails the test. The sweeper runs
		// once when its process is elected, before any step has ended,
		// and then hourly; a leadership held for a minute is not lost
		// (and taken over, with a sweep) while the test runs, as one of
		// 300 ms was on a busy SQLite writer.
		cfg.WorkflowSweepInterval = time.Hour
		cfg.LeaderTTL = time.Minute
		w = docket.NewWorker(client, cfg)
		h := &stepHandler{}
		docket.AddHandler(w, func(ctx context.Context, j *docket.Job[stepArgs]) error {
			line := fmt.Sprintf("%s %d %s\n", j.ID, j.Attempt, j.LeaseOwner)
			if _, err := log.WriteString(line); err != nil { // one write, O_APPEND: lines never interleave
				return err
			}
			return h.work(ctx, j)
		})
	case "crash":
		cfg.LeaseDuration = time.Second
		w = docket.NewWorker(client, cfg)
		docket.AddHandler(w, func(ctx context.Context, j *docket.Job[crashArgs]) error {
			if err := os.WriteFile(path, []byte(j.LeaseOwner), 0o644); err != nil {
				return err
			}
			select {} // hang until SIGKILL
		})
	default:
		fmt.Fprintln(os.Stderr, "child: unknown role", role)
		return 2
	}
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.Stop(stopCtx)
	return 0
}

func startChild(t *testing.T, role, url, file string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childRoleEnv+"="+role, childURLEnv+"="+url, childFileEnv+"="+file)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

func openStore(t *testing.T, url string) store.Store {
	t.Helper()
	return teststore.Open(t, url)
}

// TestRaceTwoProcesses: two OS processes with 8 workers each work one
// database down. Afterwards every job succeeded exactly once: one accepted
// completion each, one execution each, no two executions overlapping.
func TestRaceTwoProcesses(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		n := 10000
		if backend.Name == "sqlite" {
			n = 2000
		}
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		params := make([]docket.InsertParams, n)
		for i := range params {
			params[i] = docket.InsertParams{Args: raceArgs{N: i}}
		}
		_, err := b.client.InsertMany(ctx, params)
		require.NoError(t, err)

		dir := t.TempDir()
		var children []*exec.Cmd
		for i := range 2 {
			children = append(children, startChild(t, "race", b.url, filepath.Join(dir, fmt.Sprintf("exec-%d.log", i))))
		}
		eventually(t, 3*time.Minute, "every job to succeed", func() bool {
			counts, err := b.client.CountByState(ctx)
			require.NoError(t, err)
			return counts[docket.JobStateSuccess] == n
		})
		for _, c := range children {
			require.NoError(t, c.Process.Signal(syscall.SIGTERM))
			require.NoError(t, c.Wait(), "child exits cleanly")
		}

		// Executions from the handler logs.
		type execution struct {
			attempt    int
			node       string
			start, end int64
		}
		runs := map[uuid.UUID][]execution{}
		nodes := map[string]bool{}
		for i := range children {
			f, err := os.Open(filepath.Join(dir, fmt.Sprintf("exec-%d.log", i)))
			require.NoError(t, err)
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				var id string
				var ex execution
				_, err := fmt.Sscan(sc.Text(), &id, &ex.attempt, &ex.node, &ex.start, &ex.end)
				require.NoError(t, err, sc.Text())
				runs[uuid.MustParse(id)] = append(runs[uuid.MustParse(id)], ex)
				nodes[ex.node] = true
			}
			require.NoError(t, f.Close())
		}
		require.Len(t, runs, n, "every job ran")
		require.Len(t, nodes, 2, "both processes did work")
		for id, exs := range runs {
			for i := range exs {
				for j := i + 1; j < len(exs); j++ {
					overlap := exs[i].start < exs[j].end && exs[j].start < exs[i].end
					require.False(t, overlap, "job %s: executions %+v and %+v overlap", id, exs[i], exs[j])
				}
			}
			require.Len(t, exs, 1, "job %s ran %d times without any fault", id, len(exs))
		}

		// Accepted completions, from the outbox: RUNNING -> SUCCESS once per job.
		st := openStore(t, b.url)
		successes := map[uuid.UUID]int{}
		var after int64
		for {
			events, err := st.OutboxList(ctx, &store.OutboxListParams{AfterID: after, Limit: 1000})
			require.NoError(t, err)
			if len(events) == 0 {
				break
			}
			for _, ev := range events {
				after = ev.ID
				if ev.Type != job.EventStateChanged {
					continue
				}
				var data job.StateChangedData
				require.NoError(t, json.Unmarshal(ev.Data, &data))
				for _, tr := range data.Transitions {
					if tr.To == job.StateSuccess {
						successes[tr.JobID]++
					}
				}
			}
		}
		require.Len(t, successes, n)
		for id, c := range successes {
			require.Equal(t, 1, c, "job %s has %d accepted completions", id, c)
		}
		var before uuid.UUID
		seen := 0
		for {
			rows, err := b.client.List(ctx, docket.ListParams{Before: before, Limit: 1000})
			require.NoError(t, err)
			if len(rows) == 0 {
				break
			}
			for _, r := range rows {
				require.Equal(t, 1, r.Attempt, "job %s", r.ID)
				require.Equal(t, docket.JobStateSuccess, r.State)
			}
			seen += len(rows)
			before = rows[len(rows)-1].ID
		}
		require.Equal(t, n, seen)
	})
}

// TestCrashInHandler: a worker process is SIGKILLed inside a handler; the
// job's lease expires, another process rescues it and completes it.
func TestCrashInHandler(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cfg := fastConfig()
		cfg.LeaseDuration = time.Second
		b := setup(t, backend, cfg)
		ctx := context.Background()
		res, err := b.client.Insert(ctx, crashArgs{}, nil)
		require.NoError(t, err)

		marker := filepath.Join(t.TempDir(), "inside-handler")
		child := startChild(t, "crash", b.url, marker)
		var childNode string
		eventually(t, 30*time.Second, "the child to enter the handler", func() bool {
			b, err := os.ReadFile(marker)
			childNode = string(b)
			return err == nil && len(b) > 0
		})
		require.NoError(t, child.Process.Signal(syscall.SIGKILL))
		_ = child.Wait()
		row, err := b.client.Get(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateRunning, row.State, "the dead child still holds the lease")
		require.Equal(t, childNode, row.LeaseOwner)

		ran := make(chan int, 1)
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[crashArgs]) error {
			ran <- j.Attempt
			return nil
		})
		b.start(t)
		row = b.waitState(t, res.Job.ID, docket.JobStateSuccess)
		require.Equal(t, 2, <-ran)
		require.Equal(t, 2, row.Attempt)
		atts, err := b.client.Attempts(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Len(t, atts, 2)
		require.Equal(t, childNode, atts[0].Node)
		require.EqualValues(t, "expired", atts[0].Outcome)
		require.Contains(t, atts[0].Error, "expired")
		require.Equal(t, b.worker.NodeID(), atts[1].Node)
		require.EqualValues(t, "success", atts[1].Outcome)
	})
}

// TestRunRaceTwoProcesses: two OS processes with 8 workers each drive
// diamond runs (1,000 on PostgreSQL, 300 on SQLite) on one database. Both
// work the queue of the top and join steps; the left step runs in a queue
// only the first process works, the right one in a queue only the second
// works, so every join is released from two processes: each records its
// parent's end, and the later of the two must release the join once.
// (When every step shared one queue, both parents of a join ended in
// different processes in 6 of 300 SQLite runs.) Afterwards, by SQL on the
// tables themselves: every run SUCCEEDED; every step instance is unique,
// SUCCEEDED in its first generation and has its own job; every step job
// has exactly one attempt, and it succeeded; and the handler logs show
// each job ran once, and every run's left and right steps ran in
// different processes. (Which process takes the shared queue's steps is
// up to timing: one may take every top step before the other starts.)
func TestRunRaceTwoProcesses(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		n := 1000
		if backend.Name == "sqlite" {
			n = 300
		}
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		def, err := docket.NewWorkflow("race2").
			Job("top", "wf.step").
			Job("left", "wf.step", docket.After("top"), docket.StepQueue("race2-left")).
			Job("right", "wf.step", docket.After("top"), docket.StepQueue("race2-right")).
			Job("join", "wf.step", docket.After("left", "right")).
			Definition()
		require.NoError(t, err)
		_, _, err = b.client.WorkflowPut(ctx, def)
		require.NoError(t, err)
		params := make([]docket.RunStartParams, n)
		for i := range params {
			params[i] = docket.RunStartParams{Workflow: "race2", Input: i}
		}
		_, err = b.client.RunStartMany(ctx, params)
		require.NoError(t, err)

		dir := t.TempDir()
		var children []*exec.Cmd
		for i, role := range []string{"flowrace-left", "flowrace-right"} {
			children = append(children, startChild(t, role, b.url, filepath.Join(dir, fmt.Sprintf("exec-%d.log", i))))
		}
		eventually(t, 4*time.Minute, "every run to finish", func() bool {
			open, err := b.client.RunList(ctx, docket.RunListParams{States: []docket.RunState{docket.RunRunning, docket.RunPaused}, Limit: 1})
			require.NoError(t, err)
			return len(open) == 0
		})
		for _, c := range children {
			require.NoError(t, c.Process.Signal(syscall.SIGTERM))
			require.NoError(t, c.Wait(), "child exits cleanly")
		}

		db := openSQL(t, backend, b.url)
		count := func(what, query string) int {
			t.Helper()
			var got int
			require.NoError(t, db.QueryRowContext(ctx, query).Scan(&got), what)
			return got
		}
		require.Equal(t, n, count("runs", `SELECT count(*) FROM docket_runs`))
		require.Zero(t, count("runs not SUCCEEDED", `SELECT count(*) FROM docket_runs WHERE state <> 'SUCCEEDED'`))
		require.Equal(t, 4*n, count("step instances", `SELECT count(*) FROM docket_steps`))
		require.Equal(t, 4*n, count("distinct step instances",
			`SELECT count(*) FROM (SELECT DISTINCT run_id, step, step_index FROM docket_steps) AS d`))
		require.Zero(t, count("step instances not SUCCEEDED once with a job",
			`SELECT count(*) FROM docket_steps WHERE state <> 'SUCCEEDED' OR generation <> 1 OR job_id IS NULL`))
		require.Equal(t, 4*n, count("distinct step jobs", `SELECT count(DISTINCT job_id) FROM docket_steps`))
		require.Equal(t, 4*n, count("jobs", `SELECT count(*) FROM docket_jobs`), "no job but the steps'")
		// The attempt history: a successful attempt is the job row itself
		// (state SUCCESS, attempt 1: started once); docket_job_attempts
		// holds the attempts that did not succeed, and there must be none.
		require.Equal(t, 4*n, count("step jobs that succeeded at their first attempt", `
			SELECT count(*) FROM docket_steps s JOIN docket_jobs j ON j.id = s.job_id
			WHERE j.state = 'SUCCESS' AND j.attempt = 1 AND j.attempt_base = 0`))
		require.Zero(t, count("attempts that did not succeed", `SELECT count(*) FROM docket_job_attempts`))
		var jobIDs []string
		type stepOf struct{ run, step string }
		steps := map[string]stepOf{} // job id → its run and step
		rows, err := db.QueryContext(ctx, `SELECT job_id, run_id, step FROM docket_steps`)
		require.NoError(t, err)
		for rows.Next() {
			var id string
			var st stepOf
			require.NoError(t, rows.Scan(&id, &st.run, &st.step))
			jobIDs = append(jobIDs, id)
			steps[id] = st
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		for _, id := range jobIDs {
			atts, err := b.client.Attempts(ctx, uuid.MustParse(id))
			require.NoError(t, err)
			require.Len(t, atts, 1, "job %s: one attempt", id)
			require.EqualValues(t, "success", atts[0].Outcome, "job %s", id)
		}

		// Executions, from the handler logs of both processes.
		ran := map[string]int{}
		sides := map[string]map[string]string{} // run → left/right → process
		for i := range children {
			data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("exec-%d.log", i)))
			require.NoError(t, err)
			sc := bufio.NewScanner(bytes.NewReader(data))
			for sc.Scan() {
				var id, node string
				var attempt int
				_, err := fmt.Sscan(sc.Text(), &id, &attempt, &node)
				require.NoError(t, err, sc.Text())
				ran[id]++
				if st := steps[id]; st.step == "left" || st.step == "right" {
					if sides[st.run] == nil {
						sides[st.run] = map[string]string{}
					}
					sides[st.run][st.step] = node
				}
			}
		}
		require.Len(t, ran, 4*n, "every step job ran")
		require.Len(t, sides, n)
		for run, side := range sides {
			require.Len(t, side, 2, "run %s", run)
			require.NotEqual(t, side["left"], side["right"], "run %s: left and right ran in different processes", run)
		}
		for id, times := range ran {
			require.Equal(t, 1, times, "job %s ran %d times", id, times)
		}
	})
}

// openSQL opens the test database for plain SQL.
func openSQL(t *testing.T, backend testdb.Backend, url string) *sql.DB {
	t.Helper()
	var db *sql.DB
	var err error
	if backend.Name == "sqlite" {
		db, err = sql.Open("sqlite", strings.TrimPrefix(url, "sqlite:")+"?_pragma=busy_timeout(10000)")
	} else {
		db, err = sql.Open("pgx", url)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}
