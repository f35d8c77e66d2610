package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/spawn"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/storeurl"
	"github.com/docket-run/docket/internal/workflow"
)

// Config of a chaos run.
type Config struct {
	// Seed of every random choice (scripts, fault schedule).
	Seed uint64
	// Duration of the submit-and-fault phase.
	Duration time.Duration
	// Jobs submitted, spread over Duration.
	Jobs int
	// Runs are workflow runs started, spread over Duration, each of a
	// seeded random one of Shapes.
	Runs int
	// HumanRuns are runs of HumanShape (job → human step → job) started
	// over the first part of Duration (humanSpan), whose human step
	// Contributors simulated contributors work over HTTP; 0 starts no
	// contributor either.
	HumanRuns int
	// Servers (docket serve), GoWorkers (in-process Go workers) and
	// ExecWorkers (docket worker --exec) processes; defaults 3, 2, 1.
	Servers, GoWorkers, ExecWorkers int
	// MaxFaults bounds the faults injected; 0 means no bound but Duration.
	MaxFaults int
	// FaultGap is the mean pause between faults; default 3 s.
	FaultGap time.Duration
	// QuiesceTimeout bounds the wait for every job to finish after the
	// faults stop; default 2 min.
	QuiesceTimeout time.Duration
	// DocketBin is the docket command; WorkerBin is bench/chaos (run with
	// the role as its only argument).
	DocketBin, WorkerBin string
	// TestDBScript is scripts/testdb.sh.
	TestDBScript string
	// Backend is the database every process shares: BackendPostgres (the
	// default, a throwaway cluster that the faults restart) or
	// BackendSQLite (one file in Dir, opened by every process; no
	// database restarts among the faults).
	Backend string
	// Dir holds the logs, the NATS storage and, on SQLite, the database
	// (made afresh: a file left by an earlier run is removed); a new
	// temporary directory
	// when "" (removed unless the run found violations or failed).
	Dir string
	// Log receives progress lines; nil for none.
	Log io.Writer
}

// Report is the outcome of a run.
type Report struct {
	Seed      uint64
	Backend   string        // Config.Backend
	Duration  time.Duration // whole run, start to checked
	Jobs      int
	Resubmits int
	Scripts   map[Script]int
	Faults    map[string]int
	Crashes   map[string]int // exits the run did not cause, by process
	States    map[job.State]int
	// Events is the job transitions of the outbox; SSE and Webhook how
	// many the SSE client and the webhook receiver got (the receiver may
	// get one more than once).
	Events, SSE, Webhook int
	// Rescued is how many attempts the database records as ended by the
	// rescuer because their lease expired (job_attempts outcome
	// "expired", Snapshot.Rescued): leases taken from a holder that was
	// killed, paused or cut off, after which that holder can no longer
	// complete, fail or renew the attempt (the attempt fence). Whether a
	// holder was alive to try, and was refused, the database does not
	// record.
	Rescued int
	// Runs started (RunResubmits of them answered as duplicates of a try
	// whose answer was lost), by shape; RunStates their end states;
	// StepJobs the jobs of their steps.
	Runs         int
	RunResubmits int
	RunShapes    map[string]int
	RunStates    map[flow.RunState]int
	StepJobs     int
	// StepJobsByExec: step jobs that succeeded on an exec worker, whose
	// completion reached the run through a server's lease API.
	StepJobsByExec int
	// HumanRuns is how many runs of HumanShape were started; Crowd what
	// the contributors did; CrowdTables the units, assignments and
	// judgments the database holds at the end.
	HumanRuns   int
	Crowd       CrowdReport
	CrowdTables string
	Violations  []Violation
	Dir         string
}

// Fault kinds.
const (
	FaultKillServe   = "kill_serve"
	FaultKillWorker  = "kill_go_worker"
	FaultKillExec    = "kill_exec_worker"
	FaultPGFast      = "postgres_restart_fast"
	FaultPGImmediate = "postgres_restart_immediate"
	FaultNATSStop    = "nats_stop"
	FaultPauseWorker = "pause_go_worker"
	// FaultKillServeJudging (runs with human work only) SIGKILLs the
	// server a contributor is sending a judgment to, as it sends it.
	FaultKillServeJudging = "kill_serve_judging"
)

var faultKinds = []string{FaultKillServe, FaultKillWorker, FaultKillExec, FaultPGFast, FaultPGImmediate, FaultNATSStop, FaultPauseWorker}

// Backends of Config.Backend.
const (
	BackendPostgres = "postgres"
	BackendSQLite   = "sqlite"
)

// String is the summary of the report.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: seed %d, %s, %v, %d jobs (%d resubmitted by the client)\n", r.Seed, r.Backend, r.Duration.Round(time.Second), r.Jobs, r.Resubmits)
	fmt.Fprintf(&b, "  scripts: %s\n", countsOf(r.Scripts))
	fmt.Fprintf(&b, "  end states: %s\n", countsOf(r.States))
	fmt.Fprintf(&b, "  workflow runs: %d (%d answered as duplicates of a lost answer), %d step jobs (%d succeeded on the exec worker)\n", r.Runs, r.RunResubmits, r.StepJobs, r.StepJobsByExec)
	fmt.Fprintf(&b, "  run shapes: %s\n", countsOf(r.RunShapes))
	fmt.Fprintf(&b, "  run end states: %s\n", countsOf(r.RunStates))
	if r.HumanRuns > 0 {
		fmt.Fprintf(&b, "  human work: %d runs of %s; contributors: %s\n", r.HumanRuns, HumanShape.Name, &r.Crowd)
		fmt.Fprintf(&b, "  human work tables: %s\n", r.CrowdTables)
	}
	fmt.Fprintf(&b, "  events: %d in the outbox, %d received by the SSE client, %d webhook deliveries\n", r.Events, r.SSE, r.Webhook)
	total := 0
	for _, n := range r.Faults {
		total += n
	}
	fmt.Fprintf(&b, "  faults: %d: %s\n", total, countsOf(r.Faults))
	fmt.Fprintf(&b, "  attempts rescued after their lease expired (fenced from their holder): %d\n", r.Rescued)
	if len(r.Crashes) > 0 {
		fmt.Fprintf(&b, "  unexpected exits: %s\n", countsOf(r.Crashes))
	}
	fmt.Fprintf(&b, "  violations: %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "    %s\n", v)
	}
	return b.String()
}

func countsOf[K ~string](m map[K]int) string {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// run is the state of one chaos run.
type run struct {
	cfg      Config
	dir      string
	rnd      *mrand.Rand      // fault schedule; used by the injector only
	pg       *postgresCluster // nil on SQLite
	dbURL    string           // the database every process opens
	nats     *proc
	natsURL  string
	adminKey string
	servers  []*proc
	urls     []string
	goW      []*proc
	execW    []*proc
	http     *http.Client
	st       store.Store // the run's own connection, to watch and check
	sse      *sseFollower
	hook     *webhookReceiver

	client *docket.Client // the run's own client of the database: workflows and runs
	crowd  *crowdSim      // the simulated contributors; nil without human runs

	mu           sync.Mutex
	faults       map[string]int
	crashes      map[string]int
	expect       map[string]Script
	resubmits    int
	expectRuns   map[string]Shape
	runResubmits int
}

func (r *run) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, "%s chaos: %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

// Run starts the processes, submits jobs while injecting faults, waits for
// every job to finish and checks the invariants. The error is for a run
// that could not be carried out; violations are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Servers == 0 {
		cfg.Servers = 3
	}
	if cfg.GoWorkers == 0 {
		cfg.GoWorkers = 2
	}
	if cfg.ExecWorkers == 0 {
		cfg.ExecWorkers = 1
	}
	if cfg.FaultGap == 0 {
		cfg.FaultGap = 3 * time.Second
	}
	if cfg.QuiesceTimeout == 0 {
		cfg.QuiesceTimeout = 2 * time.Minute
	}
	switch cfg.Backend {
	case "":
		cfg.Backend = BackendPostgres
	case BackendPostgres, BackendSQLite:
	default:
		return nil, fmt.Errorf("chaos: backend %q: want %s or %s", cfg.Backend, BackendPostgres, BackendSQLite)
	}
	began := time.Now()
	r := &run{
		cfg: cfg, rnd: mrand.New(mrand.NewPCG(cfg.Seed, 1)),
		http:   &http.Client{Timeout: 30 * time.Second},
		faults: map[string]int{}, crashes: map[string]int{}, expect: map[string]Script{},
		expectRuns: map[string]Shape{},
	}
	keep := false
	r.dir = cfg.Dir
	if r.dir != "" {
		// Absolute: the processes run in it and are given paths in it.
		d, err := filepath.Abs(r.dir)
		if err != nil {
			return nil, err
		}
		r.dir = d
	} else {
		d, err := os.MkdirTemp("", "docket-chaos-")
		if err != nil {
			return nil, err
		}
		r.dir = d
		defer func() {
			if !keep {
				_ = os.RemoveAll(d)
			}
		}()
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	defer r.shutdown()
	if err := r.startAll(ctx); err != nil {
		keep = true
		return nil, err
	}
	if err := r.startConsumers(ctx); err != nil {
		keep = true
		return nil, err
	}
	defer r.hook.close()
	followCtx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	go r.sse.follow(followCtx)
	select {
	case <-r.sse.connected:
	case <-time.After(60 * time.Second):
		keep = true
		return nil, errors.New("the SSE client could not connect within 60 s")
	}

	phase, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var wg sync.WaitGroup
	var submitErr error
	var runsErr, humanErr error
	if r.crowd != nil {
		r.crowd.startWork(ctx)
		defer r.crowd.stopWork()
		wg.Add(1)
		go func() {
			defer wg.Done()
			humanErr = r.submitHumanRuns(phase)
		}()
	}
	wg.Add(3)
	go func() {
		defer wg.Done()
		submitErr = r.submitAll(phase)
	}()
	go func() {
		defer wg.Done()
		runsErr = r.submitRuns(phase)
	}()
	go func() {
		defer wg.Done()
		r.injectFaults(phase)
	}()
	wg.Wait()
	if err := errors.Join(submitErr, runsErr, humanErr); err != nil {
		keep = true
		return nil, err
	}
	r.logf("faults stopped; waiting for every job to finish")
	rep, err := r.finish(ctx)
	if err != nil {
		keep = true
		return nil, err
	}
	rep.Duration = time.Since(began)
	rep.Dir = r.dir
	if len(rep.Violations) > 0 {
		keep = true
	}
	return rep, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (r *run) onCrash(name string, err error) {
	r.mu.Lock()
	r.crashes[name]++
	r.mu.Unlock()
	r.logf("%s exited on its own (%v); see %s.log", name, err, name)
}

func (r *run) startAll(ctx context.Context) error {
	if r.cfg.Backend == BackendSQLite {
		// A database of its own: keys depend on the seed only, so an
		// earlier run's file in the same directory would answer this
		// run's submissions as duplicates.
		path := filepath.Join(r.dir, "chaos.db")
		for _, f := range []string{path, path + "-wal", path + "-shm"} {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		r.dbURL = "sqlite:" + path
	} else if err := r.startPostgres(); err != nil {
		return err
	}

	natsBin, err := natsBinary()
	if err != nil {
		return fmt.Errorf("nats-server is needed (apt-get install nats-server): %w", err)
	}
	// NATS picks its port (-p -1) and names it in its ports file; restarts
	// keep it (startNATS).
	r.nats = &proc{name: "nats", dir: r.dir, log: filepath.Join(r.dir, "nats.log"), env: os.Environ(),
		argv: []string{natsBin, "-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", r.dir, "-js", "-sd", filepath.Join(r.dir, "nats")}}
	if err := r.startNATS(ctx); err != nil {
		return err
	}

	r.adminKey = "chaos_admin_" + randomHex(16)
	base := spawn.EnvWithout("DOCKET_")
	for i := range r.cfg.Servers {
		// The server picks its port and writes it to its address file;
		// restarts keep it (startServer).
		p := &proc{
			name: fmt.Sprintf("serve%d", i+1), dir: r.dir, log: filepath.Join(r.dir, fmt.Sprintf("serve%d.log", i+1)),
			argv: []string{r.cfg.DocketBin, "serve", "--listen", "127.0.0.1:0", "--database-url", r.dbURL,
				"--addr-file", filepath.Join(r.dir, fmt.Sprintf("serve%d.addr", i+1))},
			env: append(slices.Clone(base),
				"DOCKET_ADMIN_KEY="+r.adminKey, "DOCKET_NATS_URL="+r.natsURL, "DOCKET_NODE_ID="+fmt.Sprintf("serve%d", i+1),
				"DOCKET_RESCUE_INTERVAL=200ms", "DOCKET_SCHEDULER_INTERVAL=50ms", "DOCKET_POLL_INTERVAL=200ms",
				"DOCKET_LEADER_TTL=1s", "DOCKET_RETRY_BACKOFF_BASE=10ms", "DOCKET_RETRY_BACKOFF_MAX=200ms",
				"DOCKET_SHUTDOWN_TIMEOUT=10s", "DOCKET_RATE_LIMIT=0", "DOCKET_WEBHOOK_POLL_INTERVAL=100ms",
				"DOCKET_WEBHOOK_BACKOFF_BASE=50ms", "DOCKET_WEBHOOK_BACKOFF_MAX=1s",
				// A delivery claimed by a killed server is retried after
				// its claim lapses: (per-webhook batch + 1) × this timeout.
				"DOCKET_WEBHOOK_TIMEOUT=2s"),
			onCrash: r.onCrash,
		}
		r.servers = append(r.servers, p)
		r.urls = append(r.urls, "")
		// One at a time: the first migrates the database.
		if err := r.startServer(ctx, i); err != nil {
			return err
		}
	}
	for i := range r.cfg.GoWorkers {
		name := fmt.Sprintf("goworker%d", i+1)
		p := &proc{
			name: name, dir: r.dir, log: filepath.Join(r.dir, name+".log"),
			argv:    []string{r.cfg.WorkerBin, RoleWorker},
			env:     append(slices.Clone(base), envDatabaseURL+"="+r.dbURL, envNodeID+"="+name),
			onCrash: r.onCrash,
		}
		r.goW = append(r.goW, p)
		if err := p.start(); err != nil {
			return err
		}
	}
	for i := range r.cfg.ExecWorkers {
		name := fmt.Sprintf("execworker%d", i+1)
		p := &proc{
			name: name, dir: r.dir, log: filepath.Join(r.dir, name+".log"),
			argv: []string{r.cfg.DocketBin, "worker", "--server", r.urls[i%len(r.urls)], "--queue", Queue,
				"--exec", r.cfg.WorkerBin + " " + RoleExec, "--concurrency", "4", "--lease-seconds", "5",
				"--wait-seconds", "2", "--worker-id", name, "--shutdown-timeout", "5s"},
			env:     append(slices.Clone(base), "DOCKET_API_KEY="+r.adminKey),
			onCrash: r.onCrash,
		}
		r.execW = append(r.execW, p)
		if err := p.start(); err != nil {
			return err
		}
	}
	if r.st, err = storeurl.Open(ctx, r.dbURL, store.Options{}); err != nil {
		return fmt.Errorf("open the database: %w", err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if r.client, err = docket.NewClient(ctx, docket.Config{DatabaseURL: r.dbURL, Logger: quiet}); err != nil {
		return fmt.Errorf("open a client of the database: %w", err)
	}
	if err := r.putWorkflows(ctx); err != nil {
		return err
	}
	if r.cfg.HumanRuns > 0 {
		if err := r.putHuman(ctx); err != nil {
			return err
		}
	}
	r.logf("up: %d servers %v, %d Go workers, %d exec workers, NATS %s, database %s", len(r.servers), r.urls, len(r.goW), len(r.execW), r.natsURL, r.dbURL)
	return nil
}

// startPostgres starts the throwaway cluster every process shares.
func (r *run) startPostgres() error {
	pgPort, err := freePort()
	if err != nil {
		return err
	}
	bin, err := pgBinDir()
	if err != nil {
		return err
	}
	// Outside r.dir: the postgres user must reach it.
	pgDir := filepath.Join(os.TempDir(), "docket-chaos-pg-"+randomHex(4))
	r.pg = &postgresCluster{script: r.cfg.TestDBScript, dir: pgDir, port: pgPort, bin: bin}
	r.logf("starting PostgreSQL on port %d in %s", pgPort, pgDir)
	if err := r.pg.start(); err != nil {
		return err
	}
	r.dbURL = r.pg.url()
	return nil
}

// startConsumers starts the webhook receiver and subscribes it, and makes
// the SSE client (started by Run).
func (r *run) startConsumers(ctx context.Context) error {
	secret := "chaos-hook-" + randomHex(16)
	hook, err := startWebhookReceiver(secret)
	if err != nil {
		return err
	}
	r.hook = hook
	body, err := json.Marshal(map[string]any{"url": hook.url, "eventTypes": []string{"job.state_changed"}, "secret": secret})
	if err != nil {
		return err
	}
	if err := r.call("POST", "/v1/webhooks", body, 0, nil, http.StatusCreated); err != nil {
		return fmt.Errorf("subscribe the webhook receiver: %w", err)
	}
	r.sse = newSSEFollower(r)
	return nil
}

func (r *run) startNATS(ctx context.Context) error {
	if err := r.nats.start(); err != nil {
		return err
	}
	if r.natsURL == "" {
		// The first start: learn the port NATS picked and keep it for
		// restarts, since the servers are configured with this URL.
		var perr error
		err := poll(ctx, 30*time.Second, "nats-server's ports file", func() bool {
			r.natsURL, perr = spawn.NATSPortsURL(r.dir, r.nats.pid())
			return r.natsURL != "" || perr != nil
		})
		if err = errors.Join(err, perr); err != nil {
			return err
		}
		r.nats.setArg("-p", r.natsURL[strings.LastIndex(r.natsURL, ":")+1:])
	}
	return poll(ctx, 30*time.Second, "nats-server takes connections", func() bool {
		return tcpUp(strings.TrimPrefix(r.natsURL, "nats://"))
	})
}

func (r *run) startServer(ctx context.Context, i int) error {
	p := r.servers[i]
	if err := p.start(); err != nil {
		return err
	}
	if r.urls[i] == "" {
		// The first start: learn the port the server picked and keep it
		// for restarts, since workers and consumers are pointed at it.
		file := p.arg("--addr-file")
		var addr string
		var aerr error
		err := poll(ctx, 60*time.Second, p.name+"'s address file", func() bool {
			addr, aerr = spawn.ReadAddrFile(file)
			return addr != "" || aerr != nil
		})
		if err = errors.Join(err, aerr); err != nil {
			return err
		}
		r.urls[i] = "http://" + addr
		p.setArg("--listen", addr)
	}
	return poll(ctx, 60*time.Second, r.servers[i].name+" answers HTTP", func() bool {
		return httpUp(r.urls[i] + "/healthz")
	})
}

// shutdown ends every process and the database.
func (r *run) shutdown() {
	var all []*proc
	all = append(all, r.execW...)
	all = append(all, r.goW...)
	all = append(all, r.servers...)
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.end(syscall.SIGTERM, 15*time.Second)
		}()
	}
	wg.Wait()
	if r.nats != nil {
		r.nats.end(syscall.SIGKILL, 5*time.Second)
	}
	if r.st != nil {
		_ = r.st.Close()
	}
	if r.client != nil {
		_ = r.client.Close()
	}
	if r.pg != nil {
		r.pg.stop()
	}
}

// submitAll submits cfg.Jobs jobs spread over the phase, over HTTP to the
// servers in turn, retrying each until a server accepts it.
func (r *run) submitAll(ctx context.Context) error {
	rnd := mrand.New(mrand.NewPCG(r.cfg.Seed, 2))
	gap := r.cfg.Duration / time.Duration(r.cfg.Jobs+1)
	var wg sync.WaitGroup
	errs := make(chan error, r.cfg.Jobs)
	start := time.Now()
	for i := range r.cfg.Jobs {
		// Open loop: job i is due at start + i×gap whatever the others do.
		if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		var script Script
		switch x := rnd.IntN(100); {
		case x < 45:
			script = ScriptSuccess
		case x < 65:
			script = ScriptRetry
		case x < 80:
			script = ScriptFatal
		default:
			script = ScriptCancel
		}
		req := map[string]any{
			"jobType": JobType, "queue": Queue,
			"payload":        payload{Script: script, MS: 20 + rnd.IntN(400), N: i},
			"idempotencyKey": fmt.Sprintf("chaos-%d-%d", r.cfg.Seed, i),
		}
		if rnd.IntN(10) == 0 {
			req["runAt"] = time.Now().Add(time.Duration(1000+rnd.IntN(3000)) * time.Millisecond).UTC().Format(time.RFC3339Nano)
		}
		resubmit := rnd.IntN(10) == 0
		cancelAfter := time.Duration(rnd.IntN(2000)) * time.Millisecond
		server := i
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.submitOne(req, script, resubmit, cancelAfter, server); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// submitTimeout bounds the retries of one request across faults.
const submitTimeout = 3 * time.Minute

func (r *run) submitOne(req map[string]any, script Script, resubmit bool, cancelAfter time.Duration, server int) error {
	key := req["idempotencyKey"].(string)
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	var first string
	for n := 0; n < 1 || (resubmit && n < 2); n++ {
		var res struct {
			JobID string `json:"jobId"`
		}
		if err := r.call("POST", "/v1/jobs", body, server+n, &res, http.StatusAccepted, http.StatusOK); err != nil {
			return fmt.Errorf("submit %s: %w", key, err)
		}
		if n == 0 {
			first = res.JobID
			r.mu.Lock()
			r.expect[key] = script
			r.mu.Unlock()
		} else {
			r.mu.Lock()
			r.resubmits++
			r.mu.Unlock()
			if res.JobID != first {
				return fmt.Errorf("resubmitted key %s: job %s, first %s", key, res.JobID, first)
			}
		}
	}
	if script != ScriptCancel {
		return nil
	}
	time.Sleep(cancelAfter) // when the client changes its mind: part of the script, not a wait for state
	if err := r.call("POST", "/v1/jobs/"+first+"/cancel", nil, server, nil, http.StatusOK, http.StatusAccepted, http.StatusConflict); err != nil {
		return fmt.Errorf("cancel %s: %w", key, err)
	}
	return nil
}

// call sends a request to the servers in turn from server until one
// answers with one of the statuses, for up to submitTimeout.
func (r *run) call(method, path string, body []byte, server int, out any, ok ...int) error {
	deadline := time.Now().Add(submitTimeout)
	var last string
	for try := 0; time.Now().Before(deadline); try++ {
		url := r.urls[(server+try)%len(r.urls)] + path
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+r.adminKey)
		res, err := r.http.Do(req)
		if err == nil {
			data, rerr := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if rerr == nil && slices.Contains(ok, res.StatusCode) {
				if out != nil {
					return json.Unmarshal(data, out)
				}
				return nil
			}
			last = fmt.Sprintf("%s: %d %s", url, res.StatusCode, data)
			if res.StatusCode >= 400 && res.StatusCode < 500 && res.StatusCode != http.StatusTooManyRequests {
				return errors.New(last)
			}
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond) // back off from a server that is down
	}
	return fmt.Errorf("no server accepted it within %v; last: %s", submitTimeout, last)
}

// injectFaults injects one fault at a time on the seeded schedule until
// the phase ends or MaxFaults were injected. The first faults are every
// kind once, in a seeded order, so even a short run injects each kind.
func (r *run) injectFaults(ctx context.Context) {
	kinds := faultKinds
	if r.cfg.Backend == BackendSQLite {
		kinds = slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k == FaultPGFast || k == FaultPGImmediate })
	}
	if r.crowd != nil {
		kinds = append(slices.Clone(kinds), FaultKillServeJudging)
	}
	first := slices.Clone(kinds)
	r.rnd.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	if r.crowd != nil {
		// First, while the first human runs' units are being judged: a
		// short run's later faults may come when no one judges any more.
		k := slices.Index(first, FaultKillServeJudging)
		first = append([]string{FaultKillServeJudging}, slices.Delete(first, k, k+1)...)
	}
	for n := 0; r.cfg.MaxFaults == 0 || n < r.cfg.MaxFaults; n++ {
		gap := r.cfg.FaultGap/2 + time.Duration(r.rnd.Int64N(int64(r.cfg.FaultGap)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
		kind := kinds[r.rnd.IntN(len(kinds))]
		if n < len(first) {
			kind = first[n]
		}
		if err := r.inject(ctx, kind); err != nil {
			r.logf("fault %s: %v", kind, err)
			continue
		}
		r.mu.Lock()
		r.faults[kind]++
		r.mu.Unlock()
	}
}

func (r *run) inject(ctx context.Context, kind string) error {
	// The pauses below are the faults' lengths, chosen by the schedule.
	switch kind {
	case FaultKillServe:
		i := r.rnd.IntN(len(r.servers))
		if r.crowd != nil {
			// A server a contributor is talking to now: the kill cuts a
			// take, a judgment (maybe the one that finalizes a unit) or a
			// release.
			if busy := r.crowd.busyServer(r.rnd); busy >= 0 {
				i = busy
				r.crowd.count(func(c *CrowdReport) { c.KillsDuringWork++ })
			}
		}
		r.logf("SIGKILL %s", r.servers[i].name)
		r.servers[i].end(syscall.SIGKILL, 5*time.Second)
		time.Sleep(time.Duration(r.rnd.IntN(1000)) * time.Millisecond)
		return r.startServer(context.WithoutCancel(ctx), i)
	case FaultKillServeJudging:
		i := r.rnd.IntN(len(r.servers))
		pause := time.Duration(r.rnd.IntN(1000)) * time.Millisecond
		// The next judgment sent within 3 s picks the server: the kill
		// races its transaction (committed or not, the contributor's
		// resend must get the one judgment).
		select {
		case j := <-r.crowd.judging:
			i = j
			r.crowd.count(func(c *CrowdReport) { c.KillsMidJudgment++ })
		case <-time.After(3 * time.Second):
		}
		r.logf("SIGKILL %s (judging)", r.servers[i].name)
		r.servers[i].end(syscall.SIGKILL, 5*time.Second)
		time.Sleep(pause)
		return r.startServer(context.WithoutCancel(ctx), i)
	case FaultKillWorker, FaultKillExec:
		ps := r.goW
		if kind == FaultKillExec {
			ps = r.execW
		}
		p := ps[r.rnd.IntN(len(ps))]
		r.logf("SIGKILL %s", p.name)
		p.end(syscall.SIGKILL, 5*time.Second)
		time.Sleep(time.Duration(r.rnd.IntN(1000)) * time.Millisecond)
		return p.start()
	case FaultPGFast, FaultPGImmediate:
		mode := "fast"
		if kind == FaultPGImmediate {
			mode = "immediate"
		}
		r.logf("restart PostgreSQL -m %s", mode)
		return r.pg.restart(mode)
	case FaultNATSStop:
		d := time.Duration(1000+r.rnd.IntN(3000)) * time.Millisecond
		r.logf("stop NATS for %v", d)
		r.nats.end(syscall.SIGKILL, 5*time.Second)
		time.Sleep(d)
		return r.startNATS(context.WithoutCancel(ctx))
	case FaultPauseWorker:
		p := r.goW[r.rnd.IntN(len(r.goW))]
		if h := r.holder(ctx); h != nil {
			p = h // a worker holding a lease: pausing it provokes fencing
		}
		// Past the lease and the rescuer's next pass: its jobs are
		// rescued and run elsewhere; when it wakes it must be fenced.
		d := 2*goLease + time.Duration(r.rnd.IntN(1000))*time.Millisecond
		r.logf("SIGSTOP %s for %v", p.name, d)
		p.signal(syscall.SIGSTOP)
		time.Sleep(d)
		p.signal(syscall.SIGCONT)
		return nil
	}
	return fmt.Errorf("unknown fault %q", kind)
}

// holder returns a Go worker holding a lease now, nil when none does.
func (r *run) holder(ctx context.Context) *proc {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rows, err := r.st.JobList(qctx, &store.JobListParams{States: []job.State{job.StateRunning}, Limit: 50})
	if err != nil {
		return nil
	}
	for _, row := range rows {
		for _, p := range r.goW {
			if row.LeaseOwner == p.name {
				return p
			}
		}
	}
	return nil
}

// finish waits until every submitted job is terminal, then checks.
func (r *run) finish(ctx context.Context) (*Report, error) {
	st := r.st
	r.mu.Lock()
	expect := maps.Clone(r.expect)
	rep := &Report{Seed: r.cfg.Seed, Backend: r.cfg.Backend, Jobs: len(r.expect), Resubmits: r.resubmits,
		Scripts: map[Script]int{}, Faults: maps.Clone(r.faults), Crashes: maps.Clone(r.crashes), States: map[job.State]int{},
		Runs: len(r.expectRuns), RunResubmits: r.runResubmits, RunShapes: map[string]int{}, RunStates: map[flow.RunState]int{}}
	expectRuns := map[string]flow.RunState{}
	for k, sh := range r.expectRuns {
		expectRuns[k] = sh.Want
		rep.RunShapes[sh.Name]++
	}
	r.mu.Unlock()
	for _, s := range expect {
		rep.Scripts[s]++
	}
	var lastCounts []*store.JobCount
	said := time.Now()
	err := poll(ctx, r.cfg.QuiesceTimeout, "every job and every run to finish", func() bool {
		if r.crowd != nil {
			// A unit a late flag reopened after its run went on is
			// judged again: the contributors work until none is open.
			if n := r.crowd.openUnits(ctx); n != 0 {
				if time.Since(said) > 10*time.Second {
					said = time.Now()
					r.logf("waiting for %d reopened units to be judged", n)
				}
				return false
			}
		}
		if n := r.openRuns(ctx); n != 0 {
			if time.Since(said) > 10*time.Second {
				said = time.Now()
				r.logf("waiting for %d runs to finish", n)
			}
			return false
		}
		cs, err := st.JobCount(ctx)
		if err != nil {
			return false
		}
		lastCounts = cs
		total := 0
		for _, c := range cs {
			if !c.State.Terminal() {
				return false
			}
			total += c.Count
		}
		return total >= len(expect)
	})
	if err != nil {
		var parts []string
		for _, c := range lastCounts {
			parts = append(parts, fmt.Sprintf("%s %d", c.State, c.Count))
		}
		r.logf("not quiet: %s", strings.Join(parts, ", "))
		// Check anyway: the violations say what is stuck.
	}
	if r.crowd != nil {
		// Every human run is done and every unit final (or the wait
		// gave up): no unit needs a contributor any more.
		r.crowd.stopWork()
	}
	// Quiet: wait for the consumers to get every event.
	var snap *Snapshot
	var sse, hook map[string]int
	var badSig []string
	delivered := func() bool {
		s, err := Load(ctx, st)
		if err != nil {
			return false
		}
		snap = s
		sse = r.sse.snapshot()
		hook, badSig = r.hook.snapshot()
		missSSE, missHook := 0, 0
		for _, tr := range s.Transitions {
			if sse[tr.EventID] == 0 {
				missSSE++
			}
			if hook[tr.EventID] == 0 {
				missHook++
			}
		}
		if missSSE+missHook > 0 && time.Since(said) > 10*time.Second {
			said = time.Now()
			r.logf("waiting for %d events to reach the SSE client, %d the webhook receiver", missSSE, missHook)
		}
		return missSSE+missHook == 0
	}
	r.logf("every job and run finished; waiting for the consumers to get every event")
	if err := poll(ctx, r.cfg.QuiesceTimeout, "every event to reach the SSE client and the webhook receiver", delivered); err != nil {
		r.logf("%v", err)
		// Check anyway: the violations say what was not delivered.
	}
	if snap == nil {
		return nil, errors.New("could not read the database to check it")
	}
	for _, j := range snap.Jobs {
		rep.States[j.State]++
		if _, ok := workflow.IsStepPayload(j.Payload); ok {
			rep.StepJobs++
			for _, a := range snap.Attempts[j.ID] {
				if a.Outcome == job.OutcomeSuccess && strings.HasPrefix(a.Node, "execworker") {
					rep.StepJobsByExec++
				}
			}
		}
	}
	for _, run := range snap.Flows.Runs {
		rep.RunStates[run.State]++
	}
	rep.Events = len(snap.Transitions)
	for _, n := range sse {
		rep.SSE += n
	}
	for _, n := range hook {
		rep.Webhook += n
	}
	rep.Violations = snap.Check(Expectations{Jobs: expect, Runs: expectRuns, RescueWindow: goLease + 5*time.Second, Deliveries: []Delivery{
		{Name: "the SSE client", Seen: sse, ExactlyOnce: true},
		{Name: "the webhook receiver", Seen: hook},
	}})
	rep.Rescued = snap.Rescued()
	if r.crowd != nil {
		vs, err := r.checkCrowd(ctx, snap, expectRuns, rep)
		if err != nil {
			return nil, err
		}
		rep.Violations = append(rep.Violations, vs...)
	}
	for _, b := range badSig {
		rep.Violations = append(rep.Violations, Violation{Kind: KindBadSignature, Detail: b})
	}
	r.mu.Lock()
	rep.Crashes = maps.Clone(r.crashes)
	r.mu.Unlock()
	return rep, nil
}
