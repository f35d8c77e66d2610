package docket

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// TestPoolClosedMessageFromItsEnd: a human step's error named the pool's
// close whenever its CANCELED unit was recorded while the pool was CLOSED
// or COMPLETED (StepUnitEnds read the pool's status then), whatever had
// ended the unit. Run a's unit is ended by the close (1 of 2 judgments):
// its step says so. Run b's unit, held by a live assignment, is left by
// the close and then ended otherwise (canceled in the store here, as
// any other cause would) while the pool is CLOSED: its step said "pool …
// was closed before unit … had enough judgments (0 of 2)"; it says "unit
// … was canceled" now — the close's own transaction tells the advancement
// why (HumanStepOutput.Canceled, AdvanceUnitCanceled).
func TestPoolClosedMessageFromItsEnd(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newTaskFixture(t, backend, `{"title": "Same?",
			 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
			 "judgmentsPerUnit": {"min": 2}}`)
			c := f.c
			unitOf := func(runID uuid.UUID) uuid.UUID {
				t.Helper()
				run, err := c.RunGet(ctx, runID)
				require.NoError(t, err)
				return run.Steps[0].UnitID
			}
			take := func(unit uuid.UUID) (*TakenAssignment, uuid.UUID) {
				t.Helper()
				who := f.contributor(t)
				for range 10 {
					taken, err := c.AssignmentTake(ctx, f.pool.ID, who)
					require.NoError(t, err)
					if taken.Unit.ID == unit {
						return taken, who
					}
					_, err = c.AssignmentRelease(ctx, taken.Assignment.ID, who)
					require.NoError(t, err)
				}
				t.Fatalf("unit %s never handed out", unit)
				return nil, uuid.Nil
			}
			a, err := c.RunStart(ctx, "wf", nil, nil)
			require.NoError(t, err)
			b, err := c.RunStart(ctx, "wf", nil, nil)
			require.NoError(t, err)
			ua, ub := unitOf(a.Run.ID), unitOf(b.Run.ID)
			ta, whoA := take(ua)
			_, err = c.JudgmentSubmit(ctx, ta.Assignment.ID, whoA, json.RawMessage(`{"same":"yes"}`))
			require.NoError(t, err)
			take(ub) // live: the close leaves ub

			_, err = c.PoolClose(ctx, f.pool.ID)
			require.NoError(t, err)
			run, err := c.RunGet(ctx, a.Run.ID)
			require.NoError(t, err)
			require.Equal(t, StepFailed, run.Steps[0].State)
			require.Equal(t, fmt.Sprintf("pool %s was closed before unit %s had enough judgments (1 of 2)", f.pool.ID, ua), run.Steps[0].Error)

			res, err := c.store.UnitCancelMany(ctx, &store.UnitCancelManyParams{IDs: []uuid.UUID{ub}, Now: c.cfg.Now()})
			require.NoError(t, err)
			require.True(t, res[0].Canceled)
			adv, err := c.flows()
			require.NoError(t, err)
			_, err = adv.AdvanceRun(ctx, c.store, b.Run.ID) // the sweeper's advancement
			require.NoError(t, err)
			run, err = c.RunGet(ctx, b.Run.ID)
			require.NoError(t, err)
			require.Equal(t, StepFailed, run.Steps[0].State)
			require.Equal(t, fmt.Sprintf("unit %s was canceled", ub), run.Steps[0].Error, "not ended by the close")
		})
	}
}
