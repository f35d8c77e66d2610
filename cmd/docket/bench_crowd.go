package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/bench"
	"github.com/docket-run/docket/internal/crowdcheck"
)

// Defaults of `docket bench --mode crowd`.
const (
	crowdBenchUnitsDefault        = 20_000
	crowdBenchContributorsDefault = 500
	crowdBenchPerUnit             = 3
)

// crowdBenchConfig is one crowd benchmark.
type crowdBenchConfig struct {
	DatabaseURL  string
	Units        int
	Contributors int
	Strategy     string // of the server this command starts
	Server       string // a running server's URL instead (its own strategy)
	// Think is each contributor's mean pause between a submit and its
	// next take (exponentially distributed); 0, the default, is a closed
	// loop: the throughput at saturation.
	Think time.Duration
	// Trace, when set, gets one CSV line per loop (bench.go writes its header):
	// when its take started and both latencies, to see when the slow
	// ones happened.
	Trace    io.Writer
	JSON     bool
	Out, Log io.Writer
}

// crowdBenchResult is what the crowd benchmark reports.
type crowdBenchResult struct {
	Backend          string  `json:"backend"`
	Strategy         string  `json:"strategy"`
	Units            int     `json:"units"`
	JudgmentsPerUnit int     `json:"judgmentsPerUnit"`
	Contributors     int     `json:"contributors"`
	Judgments        int     `json:"judgments"`
	Seconds          float64 `json:"seconds"`
	JudgmentsPerSec  float64 `json:"judgmentsPerSec"`
	ThinkMs          float64 `json:"thinkMs"`       // the mean pause asked for (--think)
	LoopMs           float64 `json:"loopMs"`        // mean take + submit, client side
	OfferedPerSec    float64 `json:"offeredPerSec"` // contributors / (think + loop)
	// ClientCPUUs is this process's CPU per judgment while the
	// contributors ran: the simulated contributors' alone with --server,
	// theirs and the server's without.
	ClientCPUUs float64             `json:"clientCpuUsPerJudgment"`
	Assign      bench.Latency       `json:"assign"`
	Submit      bench.Latency       `json:"submit"`
	Checks      []crowdcheck.Result `json:"checks"`
	PoolID      uuid.UUID           `json:"poolId"`
	Setup       map[string]float64  `json:"setupSeconds"`

	keys     []string   // the contributors' secrets
	latMu    sync.Mutex // guards assignMs, submitMs and trace
	assignMs []float64  // of each take that got an assignment
	submitMs []float64  // of each accepted judgment
	trace    io.Writer  // cfg.Trace
	traceErr error      // its first write error
}

const crowdBenchTemplate = `{"title": "Benchmark: same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
 "judgmentsPerUnit": {"min": 3, "max": 3}, "assignmentSeconds": 900}`

// runCrowdBench sets up one hot pool on the database, serves it (or uses
// cfg.Server), runs the contributors over HTTP, then checks the tables.
func runCrowdBench(ctx context.Context, client *docket.Client, cfg crowdBenchConfig) (*crowdBenchResult, error) {
	if cfg.Units < 1 || cfg.Contributors < 1 {
		return nil, usageErrorf("--units and --contributors must be at least 1")
	}
	if cfg.Contributors < crowdBenchPerUnit {
		return nil, usageErrorf("--contributors must be at least %d: each unit needs that many different people", crowdBenchPerUnit)
	}
	if cfg.Think < 0 {
		return nil, usageErrorf("--think %s: must not be negative (0: no pause between a submit and the next take)", cfg.Think)
	}
	if !docket.TakeStrategy(cfg.Strategy).Valid() {
		return nil, usageErrorf("--strategy %q: want ordered, random or candidates", cfg.Strategy)
	}
	res := &crowdBenchResult{Backend: client.Backend(), Strategy: cfg.Strategy, Units: cfg.Units, JudgmentsPerUnit: crowdBenchPerUnit,
		Contributors: cfg.Contributors, ThinkMs: float64(cfg.Think.Microseconds()) / 1000, Setup: map[string]float64{}, trace: cfg.Trace}
	if cfg.Server != "" {
		res.Strategy = "server's own (--server)"
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "crowd %s: "+format+"\n", append([]any{res.Backend}, args...)...)
	}

	// Setup, on the database: a task, a one-step workflow of its own (so
	// every run gets a fresh pool), the units, the contributors and keys.
	t0 := time.Now()
	tmpl, err := docket.ParseTask([]byte(crowdBenchTemplate))
	if err != nil {
		return nil, err
	}
	if _, _, err := client.TaskPut(ctx, "bench-crowd", tmpl); err != nil {
		return nil, fmt.Errorf("store the task: %w", err)
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	wf := "bench_crowd_" + run
	def, err := docket.DecodeWorkflow([]byte(`{"name": "` + wf + `", "steps": [{"name": "label", "human": {"task": "bench-crowd"}}]}`))
	if err != nil {
		return nil, err
	}
	v, _, err := client.WorkflowPut(ctx, def)
	if err != nil {
		return nil, fmt.Errorf("store the workflow: %w", err)
	}
	pool, _, err := client.PoolEnsure(ctx, wf, v.Version, "label", "bench-crowd")
	if err != nil {
		return nil, fmt.Errorf("make the pool: %w", err)
	}
	res.PoolID = pool.ID
	for left := cfg.Units; left > 0; {
		n := min(left, 5000)
		inputs := make([]json.RawMessage, n)
		for i := range inputs {
			inputs[i] = json.RawMessage(`{"left": "Acme anvil 10kg", "right": "ACME Anvil, 10 kg"}`)
		}
		if _, err := client.UnitsAdd(ctx, pool.ID, inputs); err != nil {
			return nil, fmt.Errorf("add units: %w", err)
		}
		left -= n
	}
	res.Setup["units"] = time.Since(t0).Seconds()
	t1 := time.Now()
	res.keys = make([]string, cfg.Contributors)
	for i := range res.keys {
		who, err := client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "bench-" + run + "-" + strconv.Itoa(i)})
		if err != nil {
			return nil, fmt.Errorf("create a contributor: %w", err)
		}
		if res.keys[i], _, err = client.CreateContributorKey(ctx, who.ID, "bench "+who.ExternalID); err != nil {
			return nil, fmt.Errorf("make a contributor key: %w", err)
		}
	}
	res.Setup["contributors"] = time.Since(t1).Seconds()
	logf("pool %s: %d units × %d, %d contributors (setup %.1fs)", pool.ID, cfg.Units, crowdBenchPerUnit, cfg.Contributors, time.Since(t0).Seconds())

	base := cfg.Server
	if base == "" {
		url, stop, err := startBenchServer(ctx, cfg)
		if err != nil {
			return nil, err
		}
		defer stop()
		base = url
	}
	base = strings.TrimRight(base, "/")

	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), bench.SelfCPU()
	for i, key := range res.keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// each contributor's pauses come from a generator of its own,
			// seeded by its number: the same run draws the same pauses
			think := crowdThink{mean: cfg.Think, rng: crowdThinkRand(i)}
			if err := res.contribute(wctx, base, key, pool.ID, think); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	clientCPU := bench.SelfCPU() - cpu0
	if err := context.Cause(wctx); err != nil && !errors.Is(err, context.Canceled) {
		return nil, fmt.Errorf("contributors: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if res.traceErr != nil {
		return nil, fmt.Errorf("--trace: %w", res.traceErr)
	}
	res.Judgments = len(res.submitMs)
	res.JudgmentsPerSec = float64(res.Judgments) / res.Seconds
	if res.Judgments > 0 {
		res.ClientCPUUs = float64(clientCPU.Microseconds()) / float64(res.Judgments)
		var sum float64
		for i := range res.assignMs {
			sum += res.assignMs[i] + res.submitMs[i]
		}
		res.LoopMs = sum / float64(res.Judgments)
		res.OfferedPerSec = float64(cfg.Contributors) / ((res.ThinkMs + res.LoopMs) / 1000)
	}
	res.Assign, res.Submit = bench.Percentiles(res.assignMs), bench.Percentiles(res.submitMs)

	db, err := crowdcheck.Open(cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if res.Checks, err = crowdcheck.Run(ctx, db, pool.ID, crowdBenchPerUnit); err != nil {
		return nil, err
	}
	if err := res.report(cfg); err != nil {
		return nil, err
	}
	if bad := crowdcheck.Failed(res.Checks); len(bad) > 0 {
		var names []string
		for _, b := range bad {
			names = append(names, fmt.Sprintf("%s: %d", b.Name, b.Violations))
		}
		return res, fmt.Errorf("crowd invariants violated: %s", strings.Join(names, "; "))
	}
	if res.Judgments != cfg.Units*crowdBenchPerUnit {
		return res, fmt.Errorf("%d judgments submitted, want %d", res.Judgments, cfg.Units*crowdBenchPerUnit)
	}
	return res, nil
}

// crowdBenchThinkSeed is the second word of every contributor's think-time
// generator (the first is the contributor's number).
const crowdBenchThinkSeed = 0x646f636b6574

// crowdThinkRand is contributor i's think-time generator.
func crowdThinkRand(i int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(i), crowdBenchThinkSeed))
}

// crowdThink is one contributor's pauses: exponentially distributed with
// the given mean, from a generator of its own.
type crowdThink struct {
	mean time.Duration
	rng  *rand.Rand
}

// pause waits one think time, or until ctx ends.
func (t crowdThink) pause(ctx context.Context) error {
	if t.mean <= 0 {
		return nil
	}
	timer := time.NewTimer(time.Duration(t.rng.ExpFloat64() * float64(t.mean)))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-timer.C:
		return nil
	}
}

// contribute is one simulated contributor: take, submit, think, until the
// pool has no unit left for them, on a connection of its own
// (bench_conn.go). Any answer but 201/202 (and the final 404) fails the
// benchmark.
func (r *crowdBenchResult) contribute(ctx context.Context, base, key string, poolID uuid.UUID, think crowdThink) error {
	c, err := newBenchConn(base, key)
	if err != nil {
		return err
	}
	defer c.close()
	takeBody, _ := json.Marshal(map[string]any{"poolId": poolID})
	// With think time, the first take waits one pause too: contributors
	// arrive spread out as they go on, not all at the first instant (a
	// herd of every contributor's first take at once, which no steady
	// state has, made most of the slow requests of a run).
	if err := think.pause(ctx); err != nil {
		return err
	}
	for {
		var taken struct {
			AssignmentID string `json:"assignmentId"`
		}
		t0 := time.Now()
		status, data, err := c.post(ctx, "/v1/assignments", takeBody)
		assignMs := float64(time.Since(t0).Microseconds()) / 1000
		if err != nil {
			return fmt.Errorf("POST /v1/assignments: %w", err)
		}
		if status == http.StatusNotFound {
			return nil // no unit left for this contributor
		}
		if status != http.StatusCreated {
			return fmt.Errorf("POST /v1/assignments: %d %s", status, bytes.TrimSpace(data))
		}
		if err := json.Unmarshal(data, &taken); err != nil {
			return fmt.Errorf("decode POST /v1/assignments: %w", err)
		}
		body, _ := json.Marshal(map[string]any{"assignmentId": taken.AssignmentID, "data": map[string]string{"same": "yes"}})
		t1 := time.Now()
		status, data, err = c.post(ctx, "/v1/judgments", body)
		submitMs := float64(time.Since(t1).Microseconds()) / 1000
		if err != nil {
			return fmt.Errorf("POST /v1/judgments: %w", err)
		}
		if status != http.StatusAccepted {
			return fmt.Errorf("POST /v1/judgments: %d %s", status, bytes.TrimSpace(data))
		}
		r.latMu.Lock()
		if r.trace != nil && r.traceErr == nil {
			_, r.traceErr = fmt.Fprintf(r.trace, "%d,%.3f,%.3f\n", t0.UnixMicro(), assignMs, submitMs)
		}
		r.assignMs = append(r.assignMs, assignMs)
		r.submitMs = append(r.submitMs, submitMs)
		r.latMu.Unlock()
		if err := think.pause(ctx); err != nil {
			return err
		}
	}
}

// startBenchServer runs docket serve in this process on a loopback port,
// on the benchmark's database with cfg.Strategy, and returns its URL and
// how to stop it.
func startBenchServer(ctx context.Context, cfg crowdBenchConfig) (string, func(), error) {
	dir, err := os.MkdirTemp("", "docket-bench-crowd-")
	if err != nil {
		return "", nil, err
	}
	addrFile := filepath.Join(dir, "addr")
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addServeFlags(fs)
	env := map[string]string{
		"DOCKET_LISTEN": "127.0.0.1:0", "DOCKET_ADDR_FILE": addrFile, "DOCKET_DATABASE_URL": cfg.DatabaseURL,
		"DOCKET_TAKE_STRATEGY": cfg.Strategy, "DOCKET_NATS_DIR": filepath.Join(dir, "nats"), "DOCKET_LOG_LEVEL": "warn",
		"DOCKET_SHUTDOWN_TIMEOUT": "10s",
	}
	scfg, err := loadServeConfig(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- runServe(sctx, scfg, io.Discard, cfg.Log) }()
	stop := func() {
		cancel()
		<-served
		_ = os.RemoveAll(dir)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if addr, err := os.ReadFile(addrFile); err == nil && len(bytes.TrimSpace(addr)) > 0 {
			return "http://" + string(bytes.TrimSpace(addr)), stop, nil
		}
		select {
		case err := <-served:
			cancel()
			_ = os.RemoveAll(dir)
			return "", nil, fmt.Errorf("start the server: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, errors.New("start the server: not listening within a minute")
		}
	}
}

// report writes the figures and the checks: key=value lines, or JSON.
func (r *crowdBenchResult) report(cfg crowdBenchConfig) error {
	if cfg.JSON {
		enc := json.NewEncoder(cfg.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	w := cfg.Out
	fmt.Fprintf(w, "docket_crowd_backend=%s\ndocket_crowd_strategy=%s\n", r.Backend, r.Strategy)
	fmt.Fprintf(w, "docket_crowd_units=%d\ndocket_crowd_judgments_per_unit=%d\ndocket_crowd_contributors=%d\n", r.Units, r.JudgmentsPerUnit, r.Contributors)
	fmt.Fprintf(w, "docket_crowd_judgments=%d\ndocket_crowd_seconds=%.2f\ndocket_crowd_judgments_per_sec=%.0f\n", r.Judgments, r.Seconds, r.JudgmentsPerSec)
	fmt.Fprintf(w, "docket_crowd_think_ms=%.2f\ndocket_crowd_loop_ms=%.2f\ndocket_crowd_offered_per_sec=%.0f\n", r.ThinkMs, r.LoopMs, r.OfferedPerSec)
	fmt.Fprintf(w, "docket_crowd_client_cpu_us_per_judgment=%.0f\n", r.ClientCPUUs)
	fmt.Fprintf(w, "docket_crowd_assign_p50_ms=%.2f\ndocket_crowd_assign_p99_ms=%.2f\n", r.Assign.P50, r.Assign.P99)
	fmt.Fprintf(w, "docket_crowd_submit_p50_ms=%.2f\ndocket_crowd_submit_p99_ms=%.2f\n", r.Submit.P50, r.Submit.P99)
	for _, c := range r.Checks {
		verdict := "ok"
		if c.Violations != 0 {
			verdict = "VIOLATED"
		}
		fmt.Fprintf(w, "check %-4s %d  %s\n", verdict, c.Violations, c.Name)
	}
	return nil
}
