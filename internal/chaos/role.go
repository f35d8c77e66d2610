package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/workflow"
)

// Roles of the worker binary (bench/chaos): the run starts it as an
// in-process Go worker, and `docket worker --exec` runs it per job.
const (
	RoleWorker = "worker"
	RoleExec   = "exec"
)

// JobType and Queue of every chaos job.
const (
	JobType = "chaos"
	Queue   = "chaos"
)

// Environment of the worker role.
const (
	envDatabaseURL = "DOCKET_CHAOS_DATABASE_URL"
	envNodeID      = "DOCKET_CHAOS_NODE_ID"
)

// retryUntilAttempt: a retry job fails retryably before this attempt.
const retryUntilAttempt = 3

// cancelWaitMax bounds how long a cancel job waits to be canceled.
const cancelWaitMax = 60 * time.Second

// payload is what a chaos job's handler is told to do.
type payload struct {
	Script Script `json:"script"`
	MS     int    `json:"ms"` // how long the work takes
	N      int    `json:"n"`
}

// chaosArgs is the Go worker's view of a job.
type chaosArgs payload

func (chaosArgs) JobType() string { return JobType }

// Go worker timings: short leases so a paused worker loses its lease and
// a killed one's jobs are rescued quickly.
const (
	goLease          = 2 * time.Second
	goRescueInterval = 200 * time.Millisecond
)

// RunRole runs a role of the worker binary and returns its exit status.
func RunRole(role string) int {
	switch role {
	case RoleWorker:
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		if err := runWorker(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "chaos worker:", err)
			return 1
		}
		return 0
	case RoleExec:
		return runExec()
	}
	fmt.Fprintf(os.Stderr, "chaos: unknown role %q\n", role)
	return 2
}

// runWorker is an in-process Go worker on the database.
func runWorker(ctx context.Context) error {
	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: os.Getenv(envDatabaseURL)})
	if err != nil {
		return err
	}
	defer client.Close()
	w := docket.NewWorker(client, docket.WorkerConfig{
		NodeID:            os.Getenv(envNodeID),
		Queues:            map[string]int{Queue: 8},
		LeaseDuration:     goLease,
		RescueInterval:    goRescueInterval,
		SchedulerInterval: 50 * time.Millisecond,
		PollInterval:      200 * time.Millisecond,
		LeaderTTL:         time.Second,
		RetryBackoffBase:  10 * time.Millisecond,
		RetryBackoffMax:   200 * time.Millisecond,
	})
	docket.AddHandler(w, func(ctx context.Context, j *docket.Job[chaosArgs]) error {
		return perform(ctx, payload(j.Args), j.Attempt)
	})
	docket.AddHandler(w, func(ctx context.Context, j *docket.Job[stepJob]) error {
		out, fatal, err := performStep(ctx, j.Args, j.Attempt)
		switch {
		case fatal:
			return docket.Fatal(err)
		case err != nil:
			return err
		}
		return docket.SetResult(ctx, out)
	})
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	w.Stop(stopCtx)
	return nil
}

// errScripted is the failure of retry and fatal jobs.
var errScripted = errors.New("scripted failure")

// perform does a job as its script says, for the Go worker.
func perform(ctx context.Context, p payload, attempt int) error {
	if p.Script == ScriptCancel {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(cancelWaitMax):
			return nil // never canceled: the checker will say so
		}
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(time.Duration(p.MS) * time.Millisecond):
	}
	switch {
	case p.Script == ScriptFatal:
		return docket.Fatal(errScripted)
	case p.Script == ScriptRetry && attempt < retryUntilAttempt:
		return fmt.Errorf("attempt %d: %w", attempt, errScripted)
	}
	return nil
}

// runExec is the program `docket worker --exec` runs per job: payload on
// stdin, attempt in DOCKET_ATTEMPT; exit 0 success, 75 retryable, 1 fatal.
// It ends with its parent: a SIGKILLed worker's programs do not linger.
func runExec() int {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "read payload:", err)
		return 1
	}
	if _, ok := workflow.IsStepPayload(data); ok {
		return runExecStep(data)
	}
	var p payload
	if err := json.Unmarshal(data, &p); err != nil {
		fmt.Fprintln(os.Stderr, "decode payload:", err)
		return 1
	}
	ctx, attempt, stop := execContext()
	defer stop()
	err = perform(ctx, p, attempt)
	switch {
	case err == nil:
		return 0
	case p.Script == ScriptFatal:
		fmt.Fprintln(os.Stderr, err)
		return 1
	default:
		fmt.Fprintln(os.Stderr, err)
		return 75
	}
}

// execContext is the context of an exec'd job program: it ends on SIGTERM,
// and the program exits when its parent (the worker) dies.
func execContext() (context.Context, int, func()) {
	attempt, _ := strconv.Atoi(os.Getenv("DOCKET_ATTEMPT"))
	parent := os.Getppid()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		for ctx.Err() == nil {
			if os.Getppid() != parent {
				os.Exit(1) // orphaned: the worker was killed
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return ctx, attempt, func() { cancel(); stop() }
}

// runExecStep is runExec for a step job: the output on stdout.
func runExecStep(data []byte) int {
	var p stepJob
	if err := json.Unmarshal(data, &p); err != nil {
		fmt.Fprintln(os.Stderr, "decode step payload:", err)
		return 1
	}
	ctx, attempt, stop := execContext()
	defer stop()
	out, fatal, err := performStep(ctx, p, attempt)
	switch {
	case fatal:
		fmt.Fprintln(os.Stderr, err)
		return 1
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 75
	}
	if _, err := os.Stdout.Write(out); err != nil {
		return 75
	}
	return 0
}
