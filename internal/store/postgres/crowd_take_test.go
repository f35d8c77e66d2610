package postgres

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// TestTakeWaitsForLockedUnit: a take whose SKIP LOCKED pick passes over
// the one available unit because another transaction holds its row (a
// judgment counting on it) does not answer "no unit": it waits for the
// lock and takes the unit's free slot. Before, near the end of a hot pool,
// contributors were told nothing was left while slots were free, and
// units stayed short of their judgments.
func TestTakeWaitsForLockedUnit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, _, err := b.s.WorkflowPut(b.ctx, &store.WorkflowPutParams{Name: "wf", Definition: json.RawMessage(`{}`), Hash: "h", Now: testBase})
	require.NoError(t, err)
	_, _, err = b.s.TaskPut(b.ctx, &store.TaskPutParams{Name: "t", Definition: json.RawMessage(`{}`), Hash: "h", Now: testBase})
	require.NoError(t, err)
	p, _, err := b.s.PoolCreate(b.ctx, &store.PoolCreateParams{ID: uuid.Must(uuid.NewV7()), Workflow: "wf", WorkflowVersion: 1,
		Step: "s", Task: "t", TaskVersion: 1, JudgmentsPerUnit: 3, AssignmentSeconds: 60, Now: testBase})
	require.NoError(t, err)
	us, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable,
		Units: []*store.UnitInsertParams{{ID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}}, Now: testBase})
	require.NoError(t, err)
	c, err := b.s.ContributorCreate(b.ctx, &store.ContributorCreateParams{ID: uuid.Must(uuid.NewV7()), ExternalID: "c", Now: testBase})
	require.NoError(t, err)

	// Not StrategyCandidates: its "none" speaks of its candidates only
	// (the client's last try is a random take).
	for _, strategy := range []crowd.Strategy{crowd.StrategyOrdered, crowd.StrategyRandom} {
		holder, err := b.s.Pool().Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = holder.Rollback(b.ctx) }() // after a failure: release the unit
		_, err = holder.Exec(b.ctx, `UPDATE docket_units SET updated_at = updated_at WHERE id = $1`, us[0].ID)
		require.NoError(t, err)

		tp := &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: p.ID, ContributorID: c.ID,
			Duration: time.Minute, Strategy: strategy, Now: testBase}
		type result struct {
			tk  *crowd.Taken
			err error
		}
		done := make(chan result, 1)
		go func() {
			tk, err := b.s.AssignmentTake(b.ctx, tp)
			done <- result{tk, err}
		}()
		// The take must be waiting for the holder's lock, not answered.
		deadline := time.Now().Add(10 * time.Second)
		for {
			var waiting bool
			require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%docket_units%')`).Scan(&waiting))
			if waiting {
				break
			}
			select {
			case r := <-done:
				t.Fatalf("%s: the take answered while the only unit was locked: %v", strategy, r.err)
			default:
			}
			require.True(t, time.Now().Before(deadline), "%s: the take never waited", strategy)
			time.Sleep(5 * time.Millisecond)
		}
		require.NoError(t, holder.Commit(b.ctx))
		r := <-done
		require.NoError(t, r.err, strategy)
		require.Equal(t, us[0].ID, r.tk.Unit.ID, strategy)
		// The next contributor's slot: one per strategy, then the third.
		c, err = b.s.ContributorCreate(b.ctx, &store.ContributorCreateParams{ID: uuid.Must(uuid.NewV7()),
			ExternalID: "c-" + string(strategy), Now: testBase})
		require.NoError(t, err)
	}
	_, err = b.s.AssignmentTake(b.ctx, &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: p.ID, ContributorID: c.ID,
		Duration: time.Minute, Strategy: crowd.StrategyRandom, Now: testBase})
	require.NoError(t, err)
	c, err = b.s.ContributorCreate(b.ctx, &store.ContributorCreateParams{ID: uuid.Must(uuid.NewV7()), ExternalID: "c-last", Now: testBase})
	require.NoError(t, err)
	_, err = b.s.AssignmentTake(b.ctx, &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: p.ID, ContributorID: c.ID,
		Duration: time.Minute, Strategy: crowd.StrategyRandom, Now: testBase})
	require.ErrorIs(t, err, crowd.ErrNoUnit, "three slots taken: none left, and no wait")
}
