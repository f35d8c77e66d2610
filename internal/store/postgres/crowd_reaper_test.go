package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// TestReaperNeverWaits: the expiry reaper runs beside transactions that
// lock a pool's counter row and a unit in either order — a judgment (its
// unit, then the counter), an advancement that adds a unit to the pool and
// then cancels or pauses another (the counter, then the unit) — all on one
// counter shard, with the reaper's lapsed assignments on those very units.
// No transaction fails (a deadlock would fail one: 40P01), every lapsed
// assignment is expired and the slots and counters match the rows.
func TestReaperNeverWaits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.WithValue(b.ctx, txShardKey{}, 0)
	_, _, err := b.s.WorkflowPut(ctx, &store.WorkflowPutParams{Name: "wf", Definition: json.RawMessage(`{}`), Hash: "h", Now: testBase})
	require.NoError(t, err)
	_, _, err = b.s.TaskPut(ctx, &store.TaskPutParams{Name: "t", Definition: json.RawMessage(`{}`), Hash: "h", Now: testBase})
	require.NoError(t, err)
	pool, _, err := b.s.PoolCreate(ctx, &store.PoolCreateParams{ID: uuid.Must(uuid.NewV7()), Workflow: "wf", WorkflowVersion: 1,
		Step: "s", Task: "t", TaskVersion: 1, JudgmentsPerUnit: 100, AssignmentSeconds: 60, Now: testBase})
	require.NoError(t, err)
	const units, rounds, workers = 40, 15, 6
	ps := make([]*store.UnitInsertParams, units)
	for i := range ps {
		ps[i] = &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), RunID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}
	}
	us, err := b.s.UnitInsertMany(ctx, &store.UnitInsertManyParams{PoolID: pool.ID, State: crowd.UnitJudgable, Units: ps, Now: testBase})
	require.NoError(t, err)

	expired := 0
	for round := range rounds {
		// Every unit gets a lapsed assignment of a new contributor.
		c, err := b.s.ContributorCreate(ctx, &store.ContributorCreateParams{ID: uuid.Must(uuid.NewV7()), ExternalID: fmt.Sprint("c", round), Now: testBase})
		require.NoError(t, err)
		for range units {
			_, err := b.s.AssignmentTake(ctx, &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: pool.ID,
				ContributorID: c.ID, Duration: time.Minute, Strategy: crowd.StrategyOrdered, Now: testBase})
			require.NoError(t, err)
		}
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		fail := func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < units; i += workers {
					u := us[i].ID
					err := b.s.InTx(ctx, func(txCtx context.Context, tx store.Tx) error {
						txCtx = context.WithValue(txCtx, txShardKey{}, 0)
						if i%2 == 0 {
							// The counter, then the unit.
							if _, err := tx.UnitInsertMany(txCtx, &store.UnitInsertManyParams{PoolID: pool.ID, State: crowd.UnitNew,
								Units: []*store.UnitInsertParams{{ID: uuid.Must(uuid.NewV7()), RunID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}}, Now: testBase}); err != nil {
								return err
							}
						}
						// The unit, then the counter (one statement), and back.
						if _, err := tx.UnitTransition(txCtx, &store.UnitTransitionParams{ID: u, From: crowd.UnitJudgable, To: crowd.UnitPaused, Now: testBase}); err != nil {
							return err
						}
						_, err := tx.UnitTransition(txCtx, &store.UnitTransitionParams{ID: u, From: crowd.UnitPaused, To: crowd.UnitJudgable, Now: testBase})
						return err
					})
					if err != nil {
						fail(err)
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left := units; left > 0; {
				n, err := b.s.AssignmentExpire(ctx, &store.AssignmentExpireParams{Now: testBase.Add(2 * time.Minute), Max: 7})
				if err != nil {
					fail(err)
					return
				}
				left -= n
				expired += n
			}
		}()
		wg.Wait()
		require.Empty(t, errs, "round %d", round)
	}
	require.Equal(t, units*rounds, expired)
	for name, q := range map[string]string{
		"active assignments left": `SELECT count(*) FROM docket_assignments WHERE state = 'ACTIVE'`,
		"slots taken left":        `SELECT count(*) FROM docket_units WHERE slots_taken <> 0`,
		"active counter not 0":    `SELECT count(*) FROM (SELECT sum(active_assignments) AS n FROM docket_pool_counters GROUP BY pool_id) x WHERE n <> 0`,
	} {
		require.Zero(t, b.count(t, q), name)
	}
}
