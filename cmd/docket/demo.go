package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/docket-run/docket"
)

// The demo's job types: each shows one behaviour of the engine.
type (
	demoEmail  struct{ To string }    // succeeds quickly
	demoResize struct{ Image string } // reports progress, then succeeds
	demoReport struct {
		Name  string
		Fails int
	} // fails Fails times, then succeeds
	demoCharge struct{ Amount int } // fatal: goes to DEAD at once
)

func (demoEmail) JobType() string  { return "demo.email" }
func (demoResize) JobType() string { return "demo.resize" }
func (demoReport) JobType() string { return "demo.report" }
func (demoCharge) JobType() string { return "demo.charge" }

func demoCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Insert a few hundred sample jobs and run them on the embedded database",
		Args:  cobra.NoArgs,
	}
	url := databaseURLFlag(cmd, "sqlite:docket-demo.db")
	n := cmd.Flags().Int("jobs", 300, "how many jobs to insert")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *n < 4 || *n > 100000 {
			return usageErrorf("--jobs %d: must be between 4 and 100000", *n)
		}
		return runDemo(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), *url, *n)
	}
	return cmd
}

func runDemo(ctx context.Context, stdout, stderr io.Writer, url string, n int) error {
	client, err := openClient(ctx, url, true, slog.LevelWarn)
	if err != nil {
		return err
	}
	defer client.Close()

	w := docket.NewWorker(client, docket.WorkerConfig{
		Queues:            map[string]int{"demo": 20},
		SchedulerInterval: 100 * time.Millisecond,
		PollInterval:      200 * time.Millisecond,
	})
	docket.AddHandler(w, func(ctx context.Context, j *docket.Job[demoEmail]) error {
		return sleep(ctx, time.Duration(rand.IntN(20))*time.Millisecond)
	})
	docket.AddHandler(w, func(ctx context.Context, j *docket.Job[demoResize]) error {
		for p := 25; p <= 100; p += 25 {
			if err := sleep(ctx, 10*time.Millisecond); err != nil {
				return err
			}
			if err := docket.Progress(ctx, float64(p), "resizing "+j.Args.Image); err != nil {
				return err
			}
		}
		return docket.SetResult(ctx, map[string]string{"thumbnail": j.Args.Image + ".thumb.png"})
	}, docket.HandlerOpts{Timeout: 10 * time.Second})
	docket.AddHandler(w, func(ctx context.Context, j *docket.Job[demoReport]) error {
		if j.Attempt <= j.Args.Fails {
			return fmt.Errorf("report %s: upstream not ready (attempt %d)", j.Args.Name, j.Attempt)
		}
		return nil
	}, docket.HandlerOpts{RetryBackoffBase: 50 * time.Millisecond, RetryBackoffMax: 400 * time.Millisecond})
	docket.AddHandler(w, func(ctx context.Context, j *docket.Job[demoCharge]) error {
		return docket.Fatal(errors.New("card declined"))
	})

	params := make([]docket.InsertParams, 0, n)
	opts := &docket.InsertOpts{Queue: "demo"}
	params = append(params, docket.InsertParams{Args: demoCharge{Amount: 4200}, Opts: opts})
	for i := 1; len(params) < n; i++ {
		var args docket.JobArgs
		switch i % 3 {
		case 0:
			args = demoEmail{To: fmt.Sprintf("user%d@example.com", i)}
		case 1:
			args = demoResize{Image: fmt.Sprintf("photo-%d.jpg", i)}
		default:
			args = demoReport{Name: fmt.Sprintf("r%d", i), Fails: i % 3}
		}
		params = append(params, docket.InsertParams{Args: args, Opts: opts})
	}
	res, err := client.InsertMany(ctx, params)
	if err != nil {
		return err
	}
	ids := make([]uuid.UUID, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	fmt.Fprintf(stderr, "inserted %d jobs into %s (%s)\n", len(ids), url, client.Backend())

	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Stop(context.WithoutCancel(ctx))

	var counts map[docket.JobState]int
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if counts, err = countStates(ctx, client, ids); err != nil {
			return err
		}
		done := counts[docket.JobStateSuccess] + counts[docket.JobStateDead] + counts[docket.JobStateCanceled]
		fmt.Fprintf(stderr, "\r%s %d/%d", bar(done, len(ids), 40), done, len(ids))
		if done == len(ids) {
			fmt.Fprintln(stderr)
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(stderr)
			return ctx.Err()
		case <-tick.C:
		}
	}
	states := make([]string, 0, len(counts))
	for s := range counts {
		states = append(states, string(s))
	}
	sort.Strings(states)
	for _, s := range states {
		fmt.Fprintf(stdout, "%-8s %d\n", s, counts[docket.JobState(s)])
	}
	fmt.Fprintln(stdout)
	return demoHighlights(ctx, client, ids, stdout)
}

// demoHighlights prints what the demo is there to show, read back from the
// database: the retries (with the attempt history of one retried job), the
// progress of a resize job, and the fatal error.
func demoHighlights(ctx context.Context, client *docket.Client, ids []uuid.UUID, out io.Writer) error {
	var (
		retried, retries, resized int
		example, resize, charge   *docket.JobRow
	)
	for _, id := range ids {
		j, err := client.Get(ctx, id)
		if err != nil {
			return err
		}
		switch j.Type {
		case demoReport{}.JobType():
			if n := j.AttemptsUsed(); n > 1 {
				retried++
				retries += n - 1
				if example == nil || n > example.AttemptsUsed() {
					example = j
				}
			}
		case demoResize{}.JobType():
			if j.Progress > 0 {
				resized++
				if resize == nil {
					resize = j
				}
			}
		case demoCharge{}.JobType():
			charge = j
		}
	}
	fmt.Fprintf(out, "retries: %d jobs needed more than one attempt (%d retries in all, with backoff)", retried, retries)
	if example != nil {
		attempts, err := client.Attempts(ctx, example.ID)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "; %s %s:\n", example.Type, example.ID)
		for _, a := range attempts {
			fmt.Fprintf(out, "  attempt %d  %-8s %s\n", a.Attempt, a.Outcome, a.Error)
		}
	} else {
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "progress: %d demo.resize jobs reported progress", resized)
	if resize != nil {
		var args demoResize
		_ = json.Unmarshal(resize.Payload, &args)
		fmt.Fprintf(out, "; %s ended at %.0f%% %q with result %s", args.Image, resize.Progress, resize.ProgressMsg, resize.Result)
	}
	fmt.Fprintln(out)
	if charge != nil {
		fmt.Fprintf(out, "fatal: %s is %s after %d attempt, not retried: %s\n", charge.Type, charge.State, charge.AttemptsUsed(), charge.LastError)
	}
	return nil
}

func countStates(ctx context.Context, client *docket.Client, ids []uuid.UUID) (map[docket.JobState]int, error) {
	counts := map[docket.JobState]int{}
	for _, id := range ids {
		j, err := client.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		counts[j.State]++
	}
	return counts, nil
}

func bar(done, total, width int) string {
	filled := done * width / total
	return "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "]"
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
