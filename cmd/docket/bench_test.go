package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/bench"
	"github.com/docket-run/docket/internal/crowdcheck"
	"github.com/docket-run/docket/internal/testdb"
)

// docket bench refuses a database with unfinished jobs (a previous
// continuous run leaves some) unless --reset empties it first.
func TestBenchReset(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			u := backend.URL(t)
			c, err := docket.NewClient(context.Background(), docket.Config{DatabaseURL: u, AutoMigrate: true})
			require.NoError(t, err)
			_, err = c.InsertMany(context.Background(), []docket.InsertParams{{Args: benchArgs{}}, {Args: benchArgs{}}})
			require.NoError(t, err)
			require.NoError(t, c.Close())

			args := []string{"bench", "--database-url", u, "--mode", "burn", "--jobs", "30", "--workers", "10", "--batch", "10", "--interval", "50ms"}
			_, err = runDocket(t, args...)
			require.ErrorContains(t, err, "2 unfinished jobs")
			require.ErrorContains(t, err, "--reset")
			_, err = runDocket(t, append(args, "--reset")...)
			require.NoError(t, err)
			// And again: back-to-back runs are one command each.
			_, err = runDocket(t, append(args, "--reset")...)
			require.NoError(t, err)

			c, err = docket.NewClient(context.Background(), docket.Config{DatabaseURL: u})
			require.NoError(t, err)
			defer c.Close()
			counts, err := c.CountByState(context.Background())
			require.NoError(t, err)
			total := 0
			for _, n := range counts {
				total += n
			}
			require.Equal(t, 30, counts[docket.JobStateSuccess], "the last run's jobs, all worked")
			require.Equal(t, 30, total, "nothing of the earlier runs is left")
		})
	}
}

// docket bench --mode workflow and --mode workflow-latency work small
// numbers of chain and diamond runs to the end on both backends and report
// every figure; the database then holds exactly those runs, SUCCEEDED.
// No timing is asserted.
func TestBenchWorkflow(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			u := backend.URL(t)
			common := []string{"bench", "--database-url", u, "--workers", "20", "--batch", "10", "--interval", "100ms"}
			out, err := runDocket(t, append(common, "--mode", "workflow", "--runs", "25", "--run-batch", "10")...)
			require.NoError(t, err)
			for _, shape := range []string{"chain", "diamond"} {
				for _, key := range []string{"start_runs_per_sec", "runs_per_sec", "steps_per_sec", "step_latency_p50_ms", "step_latency_p99_ms"} {
					require.Contains(t, out, "docket_"+shape+"_"+key+"=", "workflow output:\n%s", out)
				}
			}
			out, err = runDocket(t, append(common, "--mode", "workflow-latency", "--rate", "20", "--duration", "500ms", "--shape", "diamond", "-o", "json")...)
			require.NoError(t, err)
			var res []struct {
				Shape       string `json:"shape"`
				Runs        int    `json:"runs"`
				Steps       int    `json:"steps"`
				StepLatency struct {
					Count int `json:"count"`
				} `json:"stepLatency"`
			}
			at := strings.Index(out, "\n[\n") // the result, after the progress lines
			require.NotEqual(t, -1, at, out)
			require.NoError(t, json.NewDecoder(strings.NewReader(out[at:])).Decode(&res), out)
			require.Len(t, res, 1)
			require.Equal(t, "diamond", res[0].Shape)
			require.Equal(t, 10, res[0].Runs, "20 runs/s for 0.5 s")
			require.Equal(t, 40, res[0].Steps)
			require.Equal(t, 30, res[0].StepLatency.Count, "three steps of each diamond have parents")

			_, err = runDocket(t, append(common, "--mode", "workflow", "--shape", "square")...)
			require.ErrorContains(t, err, `--shape "square"`)

			c, err := docket.NewClient(context.Background(), docket.Config{DatabaseURL: u})
			require.NoError(t, err)
			defer c.Close()
			for wf, want := range map[string]int{"bench_chain": 25, "bench_diamond": 35} {
				runs, err := c.RunList(context.Background(), docket.RunListParams{Workflow: wf, Limit: 1000})
				require.NoError(t, err)
				require.Len(t, runs, want, wf)
				for _, r := range runs {
					require.Equal(t, docket.RunSucceeded, r.State)
				}
			}
			counts, err := c.CountByState(context.Background())
			require.NoError(t, err)
			require.Equal(t, 4*(25+35), counts[docket.JobStateSuccess])
		})
	}
}

// docket bench --mode crowd works a small pool to the end with each take
// strategy on both backends: every slot judged once, every check 0. Then
// one judgment is deleted behind its back, and the checks see it. No
// timing is asserted.
func TestBenchCrowd(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			u := backend.URL(t)
			var lastPool uuid.UUID
			for _, strategy := range docket.TakeStrategies {
				out, err := runDocket(t, "bench", "--database-url", u, "--mode", "crowd", "--units", "60", "--contributors", "8",
					"--strategy", string(strategy), "-o", "json")
				require.NoError(t, err, out)
				at := strings.Index(out, "\n{\n")
				require.NotEqual(t, -1, at, out)
				var res crowdBenchResult
				require.NoError(t, json.NewDecoder(strings.NewReader(out[at:])).Decode(&res), out)
				require.Equal(t, string(strategy), res.Strategy)
				require.Equal(t, 180, res.Judgments)
				require.Equal(t, 180, res.Assign.Count)
				require.Equal(t, 180, res.Submit.Count)
				require.Len(t, res.Checks, 10)
				for _, c := range res.Checks {
					require.Zero(t, c.Violations, c.Name)
				}
				lastPool = res.PoolID
			}

			db, err := crowdcheck.Open(u)
			require.NoError(t, err)
			defer db.Close()
			_, err = db.ExecContext(t.Context(), `DELETE FROM docket_judgments WHERE id = (SELECT id FROM docket_judgments
				WHERE pool_id = '`+lastPool.String()+`' LIMIT 1)`)
			require.NoError(t, err)
			checks, err := crowdcheck.Run(t.Context(), db, lastPool, 3)
			require.NoError(t, err)
			bad := map[string]int{}
			for _, c := range crowdcheck.Failed(checks) {
				bad[c.Name] = c.Violations
			}
			require.Equal(t, map[string]int{
				"units without exactly 3 judgments":        1,
				"SUBMITTED assignments without a judgment": 1,
				"pool counters that differ from the tables (judgments, active assignments, judgable and finalized units)": 1,
			}, bad)

			_, err = runDocket(t, "bench", "--database-url", u, "--mode", "crowd", "--units", "5", "--contributors", "3", "--strategy", "fastest")
			require.ErrorContains(t, err, `--strategy "fastest"`)
		})
	}
}

// docket bench --mode crowd --think pauses each contributor between a
// submit and its next take: a small run on both backends is accepted,
// passes every check and reports the think time, the loop time and the
// offered rate (text and JSON); a negative think time is refused before
// anything is set up. No timing is asserted.
func TestBenchCrowdThink(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			u := backend.URL(t)
			common := []string{"bench", "--database-url", u, "--mode", "crowd", "--units", "20", "--contributors", "4"}
			out, err := runDocket(t, append(common, "--think", "2ms", "-o", "json")...)
			require.NoError(t, err, out)
			at := strings.Index(out, "\n{\n")
			require.NotEqual(t, -1, at, out)
			var res crowdBenchResult
			require.NoError(t, json.NewDecoder(strings.NewReader(out[at:])).Decode(&res), out)
			require.Equal(t, 60, res.Judgments)
			require.InDelta(t, 2.0, res.ThinkMs, 1e-9)
			require.Positive(t, res.LoopMs)
			require.InDelta(t, 4/((res.ThinkMs+res.LoopMs)/1000), res.OfferedPerSec, 1e-6*res.OfferedPerSec)
			require.Len(t, res.Checks, 10)
			for _, c := range res.Checks {
				require.Zero(t, c.Violations, c.Name)
			}

			out, err = runDocket(t, append(common, "--think", "1ms")...)
			require.NoError(t, err, out)
			for _, key := range []string{"judgments_per_sec", "assign_p99_ms", "submit_p99_ms", "loop_ms", "offered_per_sec"} {
				require.Contains(t, out, "\ndocket_crowd_"+key+"=", out)
			}
			require.Contains(t, out, "\ndocket_crowd_think_ms=1.00\n", out)
			require.Contains(t, out, "\ndocket_crowd_judgments=60\n", out)
			require.NotContains(t, out, "VIOLATED", out)

			trace := filepath.Join(t.TempDir(), "trace.csv")
			out, err = runDocket(t, append(common, "--think", "1ms", "--trace", trace)...)
			require.NoError(t, err, out)
			data, err := os.ReadFile(trace)
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			require.Equal(t, "start_unix_us,assign_ms,submit_ms", lines[0])
			require.Len(t, lines, 61, "one line per judgment")
			for _, l := range lines[1:] {
				f := strings.Split(l, ",")
				require.Len(t, f, 3, l)
				at, err := strconv.ParseInt(f[0], 10, 64)
				require.NoError(t, err, l)
				require.WithinDuration(t, time.Now(), time.UnixMicro(at), time.Minute, l)
				for _, ms := range f[1:] {
					v, err := strconv.ParseFloat(ms, 64)
					require.NoError(t, err, l)
					require.GreaterOrEqual(t, v, 0.0, l)
				}
			}

			out, err = runDocket(t, append(common, "--think", "-5ms")...)
			require.ErrorContains(t, err, "--think -5ms: must not be negative", out)
		})
	}
}

// Every contributor's pauses are exponential with the mean asked for, the
// same ones run after run (seeded by the contributor's number), different
// between contributors; --think 0 does not pause.
func TestCrowdThinkPause(t *testing.T) {
	t.Parallel()
	draw := func(i int) []float64 {
		th := crowdThink{mean: time.Second, rng: crowdThinkRand(i)}
		var d []float64
		for range 2000 {
			d = append(d, th.rng.ExpFloat64())
		}
		return d
	}
	a, b := draw(7), draw(7)
	require.Equal(t, a, b, "same contributor, same pauses")
	require.NotEqual(t, a, draw(8))
	var sum float64
	for _, x := range a {
		sum += x
	}
	require.InDelta(t, 1.0, sum/float64(len(a)), 0.1, "mean of an exponential of mean 1")

	zero := crowdThink{rng: crowdThinkRand(1)}
	require.NoError(t, zero.pause(t.Context()))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	long := crowdThink{mean: time.Hour, rng: crowdThinkRand(1)}
	require.ErrorIs(t, long.pause(ctx), context.Canceled, "a pause ends with its context")
}

// With think time a contributor's first take waits one pause (arrivals
// spread out); without, it goes at once. A listener that takes every
// connection and closes it tells which happened.
func TestCrowdContributeFirstPause(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	base := "http://" + ln.Addr().String()
	r := &crowdBenchResult{}

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	err = r.contribute(ctx, base, "key", uuid.New(), crowdThink{mean: time.Hour, rng: crowdThinkRand(1)})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, accepted.Load(), "no take before the first pause")

	err = r.contribute(t.Context(), base, "key", uuid.New(), crowdThink{rng: crowdThinkRand(1)})
	require.ErrorContains(t, err, "POST /v1/assignments")
	require.Eventually(t, func() bool { return accepted.Load() > 0 }, 5*time.Second, time.Millisecond, "without think time the first take goes at once")
}

// docket bench counts a burn's completions from the client's commit
// reports (OnJobFinished) and checks them against the database;
// --count-in-database counts the table instead. Both backends. (Continuous
// mode fills a backlog of 100,000 jobs first, too much for the suite; the
// harness's own tests cover its counting.)
func TestBenchCountsReportedCommits(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			u := backend.URL(t)
			for _, tc := range []struct {
				args    []string
				counted string
			}{
				{[]string{"--mode", "burn", "--jobs", "300"}, "reports"},
				{[]string{"--mode", "burn", "--jobs", "300", "--count-in-database"}, "database"},
			} {
				args := append([]string{"bench", "--database-url", u, "--reset", "--workers", "20", "--batch", "50",
					"--interval", "50ms", "-o", "json"}, tc.args...)
				out, err := runDocket(t, args...)
				require.NoError(t, err, out)
				// Progress lines, then the result: one indented JSON object.
				at := strings.Index(out, "\n{")
				require.GreaterOrEqual(t, at, 0, out)
				var res struct {
					Counted   string `json:"counted"`
					Completed int    `json:"completed"`
				}
				require.NoError(t, json.Unmarshal([]byte(out[at:]), &res), out)
				require.Equal(t, tc.counted, res.Counted, "%v", tc.args)
				require.Equal(t, 300, res.Completed, "%v", tc.args)
			}
		})
	}
}

// TestBenchRefusesBadValues: a zero or negative count or duration, or an
// unknown mode, is an error naming the flag before the database is
// touched, not the harness's default (--jobs -5 ran 100,000 jobs).
func TestBenchRefusesBadValues(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--jobs", "-5"}, {"--jobs", "0"}, {"--workers", "0"}, {"--duration", "-1s"}, {"--rate", "0"},
		{"--interval", "0s"}, {"--batch", "0"}, {"--insert-batch", "-1"}, {"--insert-concurrency", "0"},
		{"--runs", "0"}, {"--run-batch", "0"}, {"--units", "0"}, {"--contributors", "-2"},
		{"--complete-batch", "-1"}, {"--think", "-1s"}, {"--mode", "workflows"},
	} {
		path := filepath.Join(t.TempDir(), "bench.db")
		_, err := runDocket(t, append([]string{"bench", "--database-url", "sqlite:" + path}, args...)...)
		require.ErrorContains(t, err, args[0]+" ", "%v", args)
		_, statErr := os.Stat(path)
		require.ErrorIs(t, statErr, os.ErrNotExist, "%v: the database was opened", args)
	}
}

// TestBenchRateHelp: --rate's help gives each mode's default once: it
// said "(default 100)" for workflow-latency and the flag added "(default
// 1000)", the latency mode's, as if it were the only one.
func TestBenchRateHelp(t *testing.T) {
	t.Parallel()
	out, err := runDocket(t, "bench", "--help")
	require.NoError(t, err)
	var line string
	for l := range strings.Lines(out) {
		if strings.Contains(l, "--rate ") {
			line = l
		}
	}
	require.NotEmpty(t, line, out)
	require.Equal(t, 1, strings.Count(line, "default"), line)
	require.Contains(t, line, fmt.Sprintf("%d for latency", bench.RateDefault), line)
	require.Contains(t, line, fmt.Sprintf("%d for workflow-latency", bench.RunRateDefault), line)
}
