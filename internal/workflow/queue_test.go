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
