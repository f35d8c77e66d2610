package postgres

import (
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
	b := setupCrowdPool(t, crowdPoolParams{Units: 1, Slots: 3, Contributors: 4})
	unit := b.units[0].ID
	cs := b.contributors

	// Not StrategyCandidates: its "none" speaks of its candidates only
	// (the client's last try is a random take).
	for i, strategy := range []crowd.Strategy{crowd.StrategyOrdered, crowd.StrategyRandom} {
		holder, err := b.s.Pool().Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = holder.Rollback(b.ctx) }() // after a failure: release the unit
		_, err = holder.Exec(b.ctx, `UPDATE docket_units SET updated_at = updated_at WHERE id = $1`, unit)
		require.NoError(t, err)

		tp := &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: b.pool, ContributorID: cs[i],
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
		require.Equal(t, unit, r.tk.Unit.ID, strategy)
	}
	// The third slot, then none for the fourth contributor.
	_, err := b.s.AssignmentTake(b.ctx, &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: b.pool, ContributorID: cs[2],
		Duration: time.Minute, Strategy: crowd.StrategyRandom, Now: testBase})
	require.NoError(t, err)
	_, err = b.s.AssignmentTake(b.ctx, &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: b.pool, ContributorID: cs[3],
		Duration: time.Minute, Strategy: crowd.StrategyRandom, Now: testBase})
	require.ErrorIs(t, err, crowd.ErrNoUnit, "three slots taken: none left, and no wait")
}
