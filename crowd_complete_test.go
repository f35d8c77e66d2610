package docket

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/testdb"
)

// TestPoolCompletes: a closed pool becomes COMPLETED when its last unit
// is final — through the leader's pool-completer of a running worker —
// and a pool closed with no open unit is COMPLETED at once.
func TestPoolCompletes(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newCrowdFixture(t, backend)
			_, err := f.c.UnitsAdd(ctx, f.pool.ID, []json.RawMessage{json.RawMessage(`{}`)})
			require.NoError(t, err)
			// The unit's three slots are taken, then the pool is closed (a
			// closed pool hands out no assignment; those taken go on).
			var taken []*TakenAssignment
			for range 3 {
				a, err := f.c.AssignmentTake(ctx, f.pool.ID, f.contributor(t))
				require.NoError(t, err)
				taken = append(taken, a)
			}
			p, err := f.c.PoolClose(ctx, f.pool.ID)
			require.NoError(t, err)
			require.Equal(t, PoolClosed, p.Status, "one unit is open")
			n, err := f.c.PoolsComplete(ctx)
			require.NoError(t, err)
			require.Zero(t, n)

			w := NewWorker(f.c, WorkerConfig{AssignmentReapInterval: 10 * time.Millisecond, LeaderTTL: time.Second})
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { w.Stop(ctx) })
			for _, a := range taken {
				_, err = f.c.JudgmentSubmit(ctx, a.Assignment.ID, a.Assignment.ContributorID, json.RawMessage(`{"same": "yes"}`))
				require.NoError(t, err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				p, err = f.c.PoolGet(ctx, f.pool.ID)
				require.NoError(t, err)
				if p.Status == PoolCompleted {
					break
				}
				require.True(t, time.Now().Before(deadline), "the pool did not complete: %s %+v", p.Status, p.Counts)
				time.Sleep(20 * time.Millisecond)
			}
			require.Equal(t, 1, p.Counts.Finalized)

			def, err := DecodeWorkflow([]byte(`{"name": "wf2", "steps": [{"name": "label", "human": {"task": "same-product"}}]}`))
			require.NoError(t, err)
			_, _, err = f.c.WorkflowPut(ctx, def)
			require.NoError(t, err)
			empty, _, err := f.c.PoolEnsure(ctx, "wf2", 1, "label", "same-product")
			require.NoError(t, err)
			p, err = f.c.PoolClose(ctx, empty.ID)
			require.NoError(t, err)
			require.Equal(t, PoolCompleted, p.Status, "nothing to wait for")
		})
	}
}
