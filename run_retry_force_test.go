package docket_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// forceFlow is a (job, fails, continue) → report (job, all_done: runs
// long) and label (human, all_done) and boom (job, all_done, fails the
// run): once boom failed, the run is FAILED, label's unit CANCELED with
// it, while report's job runs on — a plain retry's blocker for as long as
// that job takes.
func forceFlow(t *testing.T, c *docket.Client) {
	t.Helper()
	ctx := context.Background()
	tmpl, err := docket.ParseTask([]byte(sameTask))
	require.NoError(t, err)
	_, _, err = c.TaskPut(ctx, "same", tmpl)
	require.NoError(t, err)
	def, err := docket.NewWorkflow("forcing").
		Job("a", "rf.a", docket.StepMaxAttempts(1), docket.ContinueOnFailure()).
		Job("report", "rf.report", docket.After("a"), docket.OnAllDone()).
		Human("label", "same", docket.After("a"), docket.OnAllDone()).
		Job("boom", "rf.boom", docket.After("a"), docket.OnAllDone(), docket.StepMaxAttempts(1)).
		Definition()
	require.NoError(t, err)
	_, _, err = c.WorkflowPut(ctx, def)
	require.NoError(t, err)
}

// leaseQueue leases the one job of queue.
func leaseQueue(t *testing.T, c *docket.Client, queue string) *docket.Lease {
	t.Helper()
	ls, err := c.Lease(context.Background(), docket.LeaseParams{Queues: []string{queue}, Max: 1, Duration: time.Minute, WorkerID: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	return ls[0]
}

// TestRunRetryForce: a FAILED run whose step report (after the failed a,
// all_done) still runs its job refuses a plain retry, with
// ErrRunConflict saying how to go on (force) and nothing changed;
// RunRetryWith Force cancels report in the retry's transaction and runs
// a, report, label and boom again (generation 2, new jobs, a new unit).
// The first round forces alone: report's job is asked to stop, its late
// completion is then not used. The others race the forced retry against
// report's job completing, in goroutines (-race): whichever comes first,
// the retry succeeds, the run
// is RUNNING with every step at generation 2 and report on a new job; the
// old job ended SUCCESS or was asked to stop, and its end changed
// nothing of generation 2; the pool holds one open unit, label's new one.
func TestRunRetryForce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig()) // no worker: nothing but the test moves the run
		ctx := context.Background()
		forceFlow(t, b.client)
		for round := range 6 {
			res, err := b.client.RunStart(ctx, "forcing", map[string]int{"round": round}, nil)
			require.NoError(t, err)
			a := leaseQueue(t, b.client, "rf.a")
			_, err = b.client.LeaseFail(ctx, a.ID, "no", false)
			require.NoError(t, err)
			report := leaseQueue(t, b.client, "rf.report") // runs on while boom fails the run
			boom := leaseQueue(t, b.client, "rf.boom")
			_, err = b.client.LeaseFail(ctx, boom.ID, "boom", false)
			require.NoError(t, err)
			run, err := b.client.RunGet(ctx, res.Run.ID)
			require.NoError(t, err)
			require.Equal(t, docket.RunFailed, run.State)
			require.Equal(t, docket.StepRunning, stepNamed(t, run, "report").State)
			oldLabel := stepNamed(t, run, "label")
			require.Equal(t, docket.StepCanceled, oldLabel.State, "the run's failure canceled the human step")

			if round == 0 {
				_, err = b.client.RunRetry(ctx, res.Run.ID)
				require.ErrorIs(t, err, docket.ErrRunConflict)
				require.ErrorContains(t, err, `step "report" is still RUNNING; retry after it ends, or force the retry`)
				require.ErrorContains(t, err, `{"force": true}`)
				again, err := b.client.RunGet(ctx, res.Run.ID)
				require.NoError(t, err)
				require.Equal(t, run, again, "the refused retry changed nothing")

				// Forced, with no race: report's running job is asked to
				// stop (its worker learns it on its next heartbeat) in
				// the retry's transaction.
				_, err = b.client.RunRetryWith(ctx, res.Run.ID, docket.RunRetryParams{Force: true})
				require.NoError(t, err)
				hb, err := b.client.LeaseHeartbeat(ctx, report.ID, time.Minute, nil, "")
				require.NoError(t, err)
				require.True(t, hb.CancelRequested, "the forced retry asked report's job to stop")
				run, err = b.client.RunGet(ctx, res.Run.ID)
				require.NoError(t, err)
				require.Equal(t, docket.RunRunning, run.State)
			}

			var (
				wg                    sync.WaitGroup
				retryErr, completeErr error
			)
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, retryErr = b.client.RunRetryWith(ctx, res.Run.ID, docket.RunRetryParams{Force: true})
			}()
			go func() {
				defer wg.Done()
				completeErr = b.client.LeaseComplete(ctx, report.ID, json.RawMessage(`{"late":true}`))
			}()
			wg.Wait()
			require.NoError(t, retryErr, "round %d", round)

			// The completion's own advancement ran in its transaction:
			// the old job's end, before or after the retry, changed
			// nothing of generation 2.
			run, err = b.client.RunGet(ctx, res.Run.ID)
			require.NoError(t, err)
			require.Equal(t, docket.RunRunning, run.State, run.Error)
			require.Equal(t, docket.StepRunning, stepNamed(t, run, "a").State)
			for _, name := range []string{"a", "report", "label", "boom"} {
				require.Equal(t, 2, stepNamed(t, run, name).Generation, "round %d: %s", round, name)
			}
			for _, name := range []string{"report", "label", "boom"} {
				require.Equal(t, docket.StepPending, stepNamed(t, run, name).State, "round %d: %s waits for a", round, name)
			}
			old, err := b.client.Get(ctx, report.Job.ID)
			require.NoError(t, err)
			t.Logf("round %d: the old job is %s", round, old.State)
			switch old.State {
			case docket.JobStateSuccess:
				require.NoError(t, completeErr)
			case docket.JobStateCanceled, docket.JobStateRunning:
				// Asked to stop first: the completion is refused or
				// records the cancel; a worker that keeps it RUNNING
				// sees CancelRequested on its next heartbeat.
			default:
				t.Fatalf("round %d: the old job is %s (%v)", round, old.State, completeErr)
			}

			// a succeeds this time: report, label and boom run again, on
			// a new job and a new unit.
			require.NoError(t, b.client.LeaseComplete(ctx, leaseQueue(t, b.client, "rf.a").ID, json.RawMessage(`{}`)))
			run, err = b.client.RunGet(ctx, res.Run.ID)
			require.NoError(t, err)
			for _, name := range []string{"report", "label", "boom"} {
				require.Equal(t, docket.StepRunning, stepNamed(t, run, name).State, "round %d: %s", round, name)
			}
			require.NotEqual(t, report.Job.ID, stepNamed(t, run, "report").JobID, "a new job")
			require.NotEqual(t, oldLabel.UnitID, stepNamed(t, run, "label").UnitID, "a new unit")
			ensured, _, err := b.client.PoolEnsure(ctx, "forcing", 1, "label", "same")
			require.NoError(t, err)
			pool, err := b.client.PoolGet(ctx, ensured.ID)
			require.NoError(t, err)
			require.Equal(t, 1, pool.Counts.Open(), "round %d: only label's new unit is open", round)
			_, err = b.client.RunCancel(ctx, res.Run.ID)
			require.NoError(t, err)
		}
	})
}
