package workflow_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/workflow"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestQueue: runs enqueued (twice, and an unknown one) are advanced by the
// queue's goroutines; Stop leaves nothing running.
func TestQueue(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"q","steps":[{"name":"a","job":{"type":"echo"}},{"name":"b","after":["a"],"job":{"type":"echo"}}]}`)
		var runs []uuid.UUID
		for range 5 {
			runs = append(runs, b.start(t, name, `{}`).ID)
		}
		q := workflow.NewQueue(b.adv, b.st, discard(), 2)
		require.NoError(t, q.Start(b.ctx))
		defer q.Stop()
		rows, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "echo", Max: 10, Owner: "w", LeaseDuration: time.Minute, Now: b.now()})
		require.NoError(t, err)
		require.Len(t, rows, 5)
		var fins []*store.JobFinishParams
		for _, r := range rows {
			fins = append(fins, &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess})
		}
		_, err = b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Jobs: fins, Now: b.now()})
		require.NoError(t, err)
		q.Enqueue(append(runs, runs[0], uuid.Must(uuid.NewV7()))...)
		deadline := time.Now().Add(20 * time.Second)
		for _, id := range runs {
			for {
				_, steps := b.get(t, id)
				if len(steps["b"]) == 1 {
					require.Equal(t, flow.StepRunning, steps["b"][0].State)
					break
				}
				require.True(t, time.Now().Before(deadline), "run %s was not advanced", id)
				time.Sleep(5 * time.Millisecond)
			}
		}
	})
}

// TestAdvanceTogetherReleaseThenFail: advanced in one transaction, two
// runs each release a job step (written by the batch at the end) and fail
// a step whose `if` errors in the same walk; failing the run cancels the released
// step, so the batch must be in the store by then. A third run of another
// workflow just moves on.
func TestAdvanceTogetherReleaseThenFail(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		fails := b.put(t, `{"name":"rf","steps":[{"name":"a","job":{"type":"echo"}},
			{"name":"b","after":["a"],"job":{"type":"later"}},{"name":"h","after":["a"],"if":"steps.a.output.nope > 1","job":{"type":"later"}}]}`)
		chain := b.put(t, `{"name":"ch","steps":[{"name":"a","job":{"type":"echo"}},{"name":"b","after":["a"],"job":{"type":"later"}}]}`)
		runs := []uuid.UUID{b.start(t, fails, `{}`).ID, b.start(t, fails, `{}`).ID, b.start(t, chain, `{}`).ID}
		rows, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "echo", Max: 10, Owner: "w", LeaseDuration: time.Minute, Now: b.now()})
		require.NoError(t, err)
		require.Len(t, rows, 3)
		var fins []*store.JobFinishParams
		for _, r := range rows {
			fins = append(fins, &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess})
		}
		_, err = b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Jobs: fins, Now: b.now()})
		require.NoError(t, err)
		require.NoError(t, b.adv.AdvanceTogether(b.ctx, b.st, runs))
		for _, id := range runs[:2] {
			run, steps := b.get(t, id)
			require.Equal(t, flow.RunFailed, run.State)
			require.Equal(t, map[string]flow.StepState{"a": flow.StepSucceeded, "b": flow.StepCanceled, "h": flow.StepFailed}, states(steps))
			row, err := b.st.JobGet(b.ctx, steps["b"][0].JobID)
			require.NoError(t, err)
			require.Equal(t, job.StateCanceled, row.State)
		}
		run, steps := b.get(t, runs[2])
		require.Equal(t, flow.RunRunning, run.State)
		require.Equal(t, map[string]flow.StepState{"a": flow.StepSucceeded, "b": flow.StepRunning}, states(steps))
		row, err := b.st.JobGet(b.ctx, steps["b"][0].JobID)
		require.NoError(t, err)
		require.Equal(t, job.StateQueued, row.State)
	})
}

// TestStartReleaseThenFail: the same at start: a run whose job root is
// released and whose other root's `if` errors is FAILED with the job
// CANCELED.
func TestStartReleaseThenFail(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"sf","steps":[{"name":"a","job":{"type":"later"}},{"name":"h","if":"input.nope > 1","job":{"type":"later"}}]}`)
		run := b.start(t, name, `{}`)
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunFailed, run.State)
		require.Equal(t, map[string]flow.StepState{"a": flow.StepCanceled, "h": flow.StepFailed}, states(steps))
		row, err := b.st.JobGet(b.ctx, steps["a"][0].JobID)
		require.NoError(t, err)
		require.Equal(t, job.StateCanceled, row.State)
	})
}
