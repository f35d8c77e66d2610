package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
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
