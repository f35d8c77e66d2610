package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeQueue is an in-memory System: handlers run as soon as jobs are
// inserted, and completions are "committed" in batches a little later, so
// the harness must wait for commits, not handler returns.
type fakeQueue struct {
	mu         sync.Mutex
	next       int
	pending    []string
	done       int // committed completions
	hooks      *Hooks
	stop       chan struct{}
	wg         sync.WaitGroup
	unfinished int
	counts     int // CountCompleted calls

	reports bool // a CommitReporter
	phantom int  // completions reported with the first batch that never commit
	lose    int  // commits of the first batch never reported
	silent  bool // reports nothing although it says it does
}

func (f *fakeQueue) ReportsCommits() bool { return f.reports }

func (f *fakeQueue) Name() string    { return "fake" }
func (f *fakeQueue) Backend() string { return "memory" }

func (f *fakeQueue) Insert(_ context.Context, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.next++
		f.pending = append(f.pending, strconv.Itoa(f.next))
	}
	return nil
}

func (f *fakeQueue) InsertOne(ctx context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	key := strconv.Itoa(f.next)
	f.pending = append(f.pending, key)
	return key, nil
}

func (f *fakeQueue) StartWorkers(_ context.Context, h *Hooks) error {
	f.hooks, f.stop = h, make(chan struct{})
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
			f.mu.Lock()
			batch := f.pending[:min(len(f.pending), 500)]
			f.pending = f.pending[len(batch):]
			f.mu.Unlock()
			for _, key := range batch {
				if h.Tracking() {
					h.Started(key)
				}
				h.Returned()
			}
			time.Sleep(2 * time.Millisecond) // the "commit"
			f.mu.Lock()
			f.done += len(batch)
			f.mu.Unlock()
			if f.reports && !f.silent && len(batch) > 0 {
				h.Committed(len(batch) + f.phantom - min(f.lose, len(batch)))
				f.phantom, f.lose = 0, 0
			}
		}
	}()
	return nil
}

func (f *fakeQueue) StopWorkers(context.Context) error {
	close(f.stop)
	f.wg.Wait()
	return nil
}

func (f *fakeQueue) CountCompleted(context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts++
	return f.done, nil
}

func (f *fakeQueue) CountUnfinished(context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending) + f.unfinished, nil
}

func run(t *testing.T, cfg Config) (*Result, string) {
	t.Helper()
	return runOn(t, &fakeQueue{}, cfg)
}

func runOn(t *testing.T, q *fakeQueue, cfg Config) (*Result, string) {
	t.Helper()
	var out bytes.Buffer
	cfg.Out, cfg.Interval = &out, 50*time.Millisecond
	res, err := Run(t.Context(), q, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res, out.String()
}

func TestBurnCountsCommittedCompletions(t *testing.T) {
	t.Parallel()
	res, out := run(t, Config{Mode: ModeBurn, Jobs: 3000, InsertBatch: 700})
	if res.Inserted != 3000 || res.Completed != 3000 {
		t.Fatalf("inserted %d, completed %d, want 3000 each", res.Inserted, res.Completed)
	}
	if res.JobsPerSec <= 0 || res.InsertJobsPerSec <= 0 {
		t.Fatalf("rates %v, %v", res.JobsPerSec, res.InsertJobsPerSec)
	}
	last := res.Samples[len(res.Samples)-1]
	if last.Completed != 3000 || last.Seconds != res.WorkSeconds {
		t.Fatalf("last sample %+v, work seconds %v", last, res.WorkSeconds)
	}
	for _, want := range []string{"fake_insert_jobs_per_sec=", "fake_jobs_per_sec="} {
		if !strings.Contains(out, want) {
			t.Fatalf("output %q lacks %q", out, want)
		}
	}
}

// A CommitReporter's burn is counted from its reports: the database is
// read before the run and once to check the reports, never while the
// workers run.
func TestBurnCountsReportedCommits(t *testing.T) {
	t.Parallel()
	q := &fakeQueue{reports: true}
	res, _ := runOn(t, q, Config{Mode: ModeBurn, Jobs: 3000, InsertBatch: 700})
	if res.Completed != 3000 || res.Counted != CountedFromReports {
		t.Fatalf("completed %d, counted from %q; want 3000 from reports", res.Completed, res.Counted)
	}
	if last := res.Samples[len(res.Samples)-1]; last.Completed != 3000 || last.Seconds != res.WorkSeconds {
		t.Fatalf("last sample %+v, work seconds %v", last, res.WorkSeconds)
	}
	if q.counts != 2 {
		t.Fatalf("the database was counted %d times, want 2 (before the run, the check)", q.counts)
	}

	q = &fakeQueue{reports: true}
	res, _ = runOn(t, q, Config{Mode: ModeBurn, Jobs: 3000, InsertBatch: 700, CountInDatabase: true})
	// Counted in the database: before the run, then until a count sees
	// 3000 — the first one may, when the workers beat the first
	// Interval (seen under load), so two counts at least.
	if res.Completed != 3000 || res.Counted != CountedInDatabase || q.counts < 2 {
		t.Fatalf("CountInDatabase: completed %d, counted from %q, %d counts", res.Completed, res.Counted, q.counts)
	}
}

// Reports the database does not back fail the run, as do reports that
// stop short.
func TestBurnChecksTheReports(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, err := Run(t.Context(), &fakeQueue{reports: true, phantom: 10},
		Config{Mode: ModeBurn, Jobs: 3000, Out: &out, Interval: 50 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "3010 completions were reported committed, but the database holds 3000") {
		t.Fatalf("phantom reports: %v", err)
	}
	_, err = Run(t.Context(), &fakeQueue{reports: true, phantom: 10},
		Config{Mode: ModeContinuous, Duration: 300 * time.Millisecond, Out: &out, Interval: 50 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "completions were reported committed, but the database holds") {
		t.Fatalf("continuous, phantom reports: %v", err)
	}
	// Lost reports would lower a continuous figure: they fail the run too.
	_, err = Run(t.Context(), &fakeQueue{reports: true, lose: 3},
		Config{Mode: ModeContinuous, Duration: 300 * time.Millisecond, Out: &out, Interval: 50 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "completions were reported committed, but the database holds") {
		t.Fatalf("continuous, lost reports: %v", err)
	}
}

func TestBurnGivesUpOnSilentReports(t *testing.T) {
	wait := commitReportWait
	commitReportWait = 200 * time.Millisecond
	t.Cleanup(func() { commitReportWait = wait })
	var out bytes.Buffer
	_, err := Run(t.Context(), &fakeQueue{reports: true, silent: true},
		Config{Mode: ModeBurn, Jobs: 1000, Out: &out, Interval: 50 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "only 0 of 1000 commits were reported") {
		t.Fatalf("silent reports: %v", err)
	}
}

func TestContinuousCountsReportedCommits(t *testing.T) {
	t.Parallel()
	q := &fakeQueue{reports: true}
	res, _ := runOn(t, q, Config{Mode: ModeContinuous, Duration: 600 * time.Millisecond})
	if res.Completed <= 0 || res.Counted != CountedFromReports || q.counts != 2 {
		t.Fatalf("completed %d, counted from %q, %d counts", res.Completed, res.Counted, q.counts)
	}
}

func TestContinuousKeepsTheBacklog(t *testing.T) {
	t.Parallel()
	res, _ := run(t, Config{Mode: ModeContinuous, Duration: 600 * time.Millisecond, JSON: true})
	if res.Completed <= 0 || res.Inserted <= 0 {
		t.Fatalf("completed %d, inserted %d during the run", res.Completed, res.Inserted)
	}
}

func TestLatencyJSON(t *testing.T) {
	t.Parallel()
	res, out := run(t, Config{Mode: ModeLatency, Rate: 400, Duration: 500 * time.Millisecond, JSON: true})
	if res.Latency == nil || res.Latency.Count != 200 {
		t.Fatalf("latency %+v, want 200 samples", res.Latency)
	}
	var decoded Result
	if err := json.Unmarshal([]byte(out), &decoded); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	if decoded.Latency == nil || decoded.Latency.P99 < decoded.Latency.P50 {
		t.Fatalf("decoded latency %+v", decoded.Latency)
	}
}

func TestRefusesAnUnfinishedBacklog(t *testing.T) {
	t.Parallel()
	_, err := Run(t.Context(), &fakeQueue{unfinished: 5}, Config{Mode: ModeBurn, Jobs: 10})
	if err == nil || !strings.Contains(err.Error(), "fresh database") {
		t.Fatalf("err = %v, want a refusal", err)
	}
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	ms := make([]float64, 100)
	for i := range ms {
		ms[i] = float64(100 - i) // 100 .. 1
	}
	l := Percentiles(ms)
	if l.P50 != 50 || l.P90 != 90 || l.P99 != 99 || l.Max != 100 || l.Count != 100 {
		t.Fatalf("percentiles %+v", l)
	}
}

// StepLatencies measures each child from its parents' completion: a join
// from the later of its parents, roots not at all; a step whose parent or
// handler start is missing is an error.
func TestStepLatencies(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	jobs := []StepJob{
		{Run: "r", Step: "top", Key: "k-top", Finished: ms(10)},
		{Run: "r", Step: "left", Key: "k-left", Finished: ms(20)},
		{Run: "r", Step: "right", Key: "k-right", Finished: ms(35)},
		{Run: "r", Step: "join", Key: "k-join", Finished: ms(50)},
	}
	starts := map[string]time.Time{"k-top": ms(0), "k-left": ms(12), "k-right": ms(13), "k-join": ms(40)}
	got, err := StepLatencies(ShapeDiamond, jobs, starts)
	if err != nil {
		t.Fatal(err)
	}
	// left 12-10, right 13-10, join 40-35 (the later parent, right).
	if want := []float64{2, 3, 5}; !slices.Equal(got, want) {
		t.Fatalf("latencies %v, want %v", got, want)
	}
	delete(starts, "k-join")
	if _, err := StepLatencies(ShapeDiamond, jobs, starts); err == nil || !strings.Contains(err.Error(), "never started") {
		t.Fatalf("err = %v, want the missing handler start", err)
	}
	if _, err := StepLatencies(ShapeDiamond, jobs[1:], starts); err == nil || !strings.Contains(err.Error(), "parent top") {
		t.Fatalf("err = %v, want the missing parent", err)
	}
}

// ProcessCPU reads a live process's CPU, which grows as it runs, and
// fails for a pid that does not exist. The process is a single-threaded
// shell loop, as a PostgreSQL backend is single-threaded: the test's own
// process would not do, since its spinning goroutine may run on a thread
// other than the main one, whose time the file counts.
func TestProcessCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		t.Skip("no /proc/PID/schedstat here")
	}
	spin := exec.Command("sh", "-c", "while :; do :; done")
	if err := spin.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = spin.Process.Kill(); _ = spin.Wait() })
	c0, err := ProcessCPU(spin.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// The loop gets a core for some of any 100 ms, however busy the
	// machine; a bound keeps a starved one from hanging the test.
	c1 := c0
	for t0 := time.Now(); c1 <= c0 && time.Since(t0) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
		if c1, err = ProcessCPU(spin.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	if c1 <= c0 {
		t.Fatalf("CPU %v after spinning, %v before", c1, c0)
	}
	if _, err := ProcessCPU(-1); err == nil {
		t.Fatal("no error for pid -1")
	}
}
