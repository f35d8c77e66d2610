package postgres

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// A reopen (FINALIZED → JUDGABLE) locks its unit before its pool, as a
// flag's repair does (UnitLock on its units, then a reopen of one of
// them): docs/quality.md "Lock order". Here a transaction holds unit 0
// as a repair does while a reopen of unit 0 waits for it, then reopens
// unit 1 of the same COMPLETED pool. When the reopen took the pool
// first, the waiting reopen held the pool (moved back to CLOSED) and the
// repair's reopen waited for it: a deadlock PostgreSQL broke by aborting
// one of them (40P01). Now the waiting reopen holds nothing yet; both
// succeed, the pool is CLOSED once, with one pool.updated.
func TestPoolReopenLockOrder(t *testing.T) {
	t.Parallel()
	cp := setupCrowdPool(t, crowdPoolParams{Units: 2, Slots: 1})
	conf := 0.9
	for _, u := range cp.units {
		_, err := cp.s.UnitFinalize(cp.ctx, &store.UnitFinalizeParams{ID: u.ID, Result: json.RawMessage(`{}`), Confidence: &conf, Now: testBase})
		require.NoError(t, err)
	}
	_, err := cp.s.PoolTransition(cp.ctx, &store.PoolTransitionParams{ID: cp.pool, From: crowd.PoolOpen, To: crowd.PoolClosed, Now: testBase})
	require.NoError(t, err)
	ids, err := cp.s.PoolCompleteMany(cp.ctx, &store.PoolCompleteManyParams{PoolID: cp.pool, Max: 1, Now: testBase})
	require.NoError(t, err)
	require.Len(t, ids, 1)
	events := len(cp.outbox(t))

	later := testBase.Add(time.Minute)
	reopen := func(i int) *store.UnitTransitionParams {
		return &store.UnitTransitionParams{ID: cp.units[i].ID, From: crowd.UnitFinalized, To: crowd.UnitJudgable, Now: later}
	}
	tx, err := cp.s.Pool().Begin(cp.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(cp.ctx) }()
	var xid string // as pg_locks shows it (see holdWhile)
	require.NoError(t, tx.QueryRow(cp.ctx, `SELECT pg_current_xact_id()::xid::text`).Scan(&xid))
	_, err = tx.Exec(cp.ctx, `SELECT id FROM docket_units WHERE id = $1 FOR UPDATE`, cp.units[0].ID) // the repair's UnitLock
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := cp.s.UnitTransition(context.Background(), reopen(0))
		done <- err
	}()
	require.Eventually(t, func() bool {
		return cp.count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted
			AND transactionid::text = $1`, xid) > 0
	}, time.Minute, 20*time.Millisecond, "the reopen of unit 0 waits for it")
	_, err = unitTransition(cp.ctx, tx, reopen(1))
	require.NoError(t, err, "the repair's reopen of unit 1")
	require.NoError(t, tx.Commit(cp.ctx))
	require.NoError(t, <-done, "the reopen of unit 0")

	p, err := cp.s.PoolGet(cp.ctx, cp.pool)
	require.NoError(t, err)
	require.Equal(t, crowd.PoolClosed, p.Status)
	require.Equal(t, 2, p.Counts.Open())
	var moves []crowd.PoolUpdatedData
	for _, ev := range cp.outbox(t)[events:] {
		if ev.Type == crowd.EventPoolUpdated {
			var d crowd.PoolUpdatedData
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			moves = append(moves, d)
		}
	}
	require.Equal(t, []crowd.PoolUpdatedData{{PoolID: cp.pool, From: crowd.PoolCompleted, To: crowd.PoolClosed}}, moves)
}
