package loadtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/docket-run/docket"
)

// workerStopTimeout bounds the workers' shutdown at the end of a run.
const workerStopTimeout = 30 * time.Second

// load is the state of one run.
type load struct {
	cfg   Config
	srv   *server
	t     *tally
	sub   *submitter
	runID string // in every idempotency key, so runs never collide
	sent  atomic.Int64
}

// Run starts one docket serve on cfg.DatabaseURL, which must be empty, and
// the workers, runs the steps, and after the last one waits for the
// backlog to drain and checks the database. When ctx ends it stops at once
// and returns the steps finished so far with ctx's error. The server is
// stopped and Dir removed (when Run made it) before Run returns.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "docket-load-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		cfg.Dir = dir
	}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = "sqlite:" + filepath.Join(cfg.Dir, "docket.db")
	}

	adminKey := "load_admin_" + randomHex(16)
	srv, err := startServer(ctx, cfg, adminKey)
	if err != nil {
		return nil, err
	}
	defer func() {
		if stopErr := srv.stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stop docket serve: %w\n%s", stopErr, srv.tail(20)))
		}
	}()

	t := &tally{}
	client, err := docket.NewClient(ctx, docket.Config{
		DatabaseURL:   cfg.DatabaseURL,
		OnJobFinished: t.onJobFinished,
		Logger:        slog.New(slog.NewTextHandler(cfg.Log, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, fmt.Errorf("open the database: %w", err)
	}
	defer client.Close()
	counts, err := client.CountByState(ctx)
	if err != nil {
		return nil, fmt.Errorf("count the jobs already there: %w", err)
	}
	if n := total(counts); n > 0 {
		return nil, fmt.Errorf("the database holds %d jobs: run on an empty database", n)
	}

	var stopWorkers func(context.Context)
	if cfg.Workers == WorkersGo {
		stopWorkers, err = startGoWorkers(ctx, client, cfg)
	} else {
		stopWorkers, err = startHTTPWorkers(ctx, srv.url, adminKey, cfg, t)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), workerStopTimeout)
		defer cancel()
		stopWorkers(stopCtx)
	}()

	l := &load{cfg: cfg, srv: srv, t: t, sub: newSubmitter(srv.url, adminKey, cfg), runID: randomHex(4)}
	defer l.sub.close()
	logf(cfg.Log, "docket serve on %s (backend %s), %s workers ×%d; log %s", srv.url, srv.backend, cfg.Workers, cfg.WorkerConcurrency, srv.log)
	rep = &Report{
		Backend: srv.backend, Workers: cfg.Workers, WorkerConcurrency: cfg.WorkerConcurrency,
		StepSeconds: cfg.StepDuration.Seconds(), WarmupSeconds: cfg.Warmup.Seconds(),
	}
	for i, rate := range cfg.Rates {
		s, err := l.step(ctx, i, rate)
		if err != nil {
			return rep, err
		}
		rep.Steps = append(rep.Steps, s)
		if s.Held {
			rep.HighestHeldRate = max(rep.HighestHeldRate, rate)
		} else if cfg.StopOnFail {
			break
		}
	}
	if rep.Final, err = l.final(ctx, client); err != nil {
		return rep, err
	}
	return rep, nil
}

// final waits for the backlog to drain, then checks the database: every
// accepted job is there, and SUCCESS.
func (l *load) final(ctx context.Context, client *docket.Client) (*Final, error) {
	logf(l.cfg.Log, "waiting up to %v for the backlog of %d jobs to drain", l.cfg.DrainTimeout, l.t.backlog())
	deadline := time.Now().Add(l.cfg.DrainTimeout)
	for l.t.backlog() > 0 && time.Now().Before(deadline) {
		pause(ctx, 20*time.Millisecond)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	f := &Final{Sent: int(l.sent.Load()), Accepted: int(l.t.accepted.Load()), Drained: l.t.backlog() == 0, States: map[string]int{}}
	counts, err := client.CountByState(ctx)
	if err != nil {
		return nil, fmt.Errorf("count the jobs: %w", err)
	}
	for st, n := range counts {
		f.States[string(st)] = n
	}
	switch n := total(counts); {
	case n < f.Accepted:
		f.Problems = append(f.Problems, fmt.Sprintf("%d accepted submissions are not in the database (%d jobs, %d accepted)", f.Accepted-n, n, f.Accepted))
	case n > f.Sent:
		f.Problems = append(f.Problems, fmt.Sprintf("the database holds %d jobs, more than the %d submissions sent", n, f.Sent))
	}
	for st, n := range counts {
		unfinished := st == docket.JobStateQueued || st == docket.JobStateRunning
		if st != docket.JobStateSuccess && (f.Drained || !unfinished) {
			f.Problems = append(f.Problems, fmt.Sprintf("%d jobs are %s", n, st))
		}
	}
	return f, nil
}

func total(counts map[docket.JobState]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// logf writes one progress line.
func logf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "%s load: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
