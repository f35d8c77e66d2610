package docket_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestReviewRejectRace: after a reject, the two judgments that redo
// label's unit race a cancel of the run. Whichever commits first, the
// end is one of two, never a mix: the redo finalized label's unit, the
// review SUCCEEDED with verdict reject and label's output is the redo's
// result (the cancel then ends the run); or the cancel came first,
// label's unit and the held review unit are CANCELED and the review step
// with them. No call fails but with a documented refusal, none
// deadlocks.
func TestReviewRejectRace(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := reviewSetup(t, backend, reviewTask)
		ctx := context.Background()
		runs := 12
		if backend.Name == "sqlite" {
			runs = 6
		}
		ends := map[string]int{}
		for range runs {
			id := b.start(0)
			b.label(id, "yes", "no")
			run := b.run(id)
			label, review := stepNamed(t, run, "label"), stepNamed(t, run, "review")
			b.judge(review.UnitID, b.contributor(), `{"verdict":"reject"}`)
			unit, err := b.client.UnitGet(ctx, label.UnitID)
			require.NoError(t, err)
			var takes []*docket.TakenAssignment
			var who []uuid.UUID
			for range 2 {
				c := b.contributor()
				tk, err := b.client.AssignmentTake(ctx, unit.PoolID, c)
				require.NoError(t, err)
				takes, who = append(takes, tk), append(who, c)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 3)
			for i, tk := range takes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := b.client.JudgmentSubmit(ctx, tk.Assignment.ID, who[i], json.RawMessage(`{"same":"no"}`))
					var ae *docket.AssignmentError
					if err != nil && !(errors.As(err, &ae) && ae.Reason == docket.RefusedUnitCanceled) {
						errs <- err
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := b.client.RunCancel(ctx, id); err != nil && !errors.Is(err, docket.ErrRunConflict) {
					errs <- err
				}
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}

			run = b.run(id)
			require.Equal(t, docket.RunCanceled, run.State)
			label, review = stepNamed(t, run, "label"), stepNamed(t, run, "review")
			require.Equal(t, docket.StepSucceeded, label.State, "label completed once, before")
			unit, err = b.client.UnitGet(ctx, label.UnitID)
			require.NoError(t, err)
			held, err := b.client.UnitGet(ctx, review.UnitID)
			require.NoError(t, err)
			switch review.State {
			case docket.StepSucceeded:
				ends["redo first"]++
				require.Equal(t, docket.UnitFinalized, unit.State)
				require.JSONEq(t, `{"same":"no"}`, string(unit.Result))
				require.JSONEq(t, `{"same":"no"}`, string(label.Output))
				require.JSONEq(t, `{"verdict":"reject","output":{"same":"no"}}`, string(review.Output))
				require.Equal(t, docket.UnitFinalized, held.State)
			case docket.StepCanceled:
				ends["cancel first"]++
				require.Equal(t, docket.UnitCanceled, unit.State)
				require.Equal(t, docket.UnitCanceled, held.State)
				require.Less(t, unit.JudgmentCount, unit.JudgmentsPerUnit, "not finalized")
			default:
				t.Fatalf("run %s: review %s (label unit %s, held unit %s)", id, review.State, unit.State, held.State)
			}
		}
		t.Logf("%v", ends)
	})
}
