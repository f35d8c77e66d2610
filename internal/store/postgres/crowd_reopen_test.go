package postgres

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
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
	require.Equal(t, []crowd.PoolUpdatedData{{PoolID: cp.pool, From: crowd.PoolCompleted, To: crowd.PoolClosed}}, cp.poolMoves(t, events))
}

// Reopens of units of one pool that completes under them: each reopen
// found the pool CLOSED (its UPDATE to CLOSED matched nothing), then
// locked it FOR SHARE to keep it from completing and found it COMPLETED
// (the completion had committed meanwhile), and moved it back to CLOSED
// holding its share lock: every reopen waited for the others' share
// locks to update, a deadlock PostgreSQL broke by aborting all but one
// (40P01). Here a transaction completes the pool, as PoolCompleteMany
// does, while the reopens of its units wait for it; once it commits,
// every reopen succeeds, the pool is CLOSED once, with one pool.updated.
func TestPoolReopenRacesCompletion(t *testing.T) {
	t.Parallel()
	const n = 6
	cp := setupCrowdPool(t, crowdPoolParams{Units: n, Slots: 1})
	conf := 0.9
	for _, u := range cp.units {
		_, err := cp.s.UnitFinalize(cp.ctx, &store.UnitFinalizeParams{ID: u.ID, Result: json.RawMessage(`{}`), Confidence: &conf, Now: testBase})
		require.NoError(t, err)
	}
	_, err := cp.s.PoolTransition(cp.ctx, &store.PoolTransitionParams{ID: cp.pool, From: crowd.PoolOpen, To: crowd.PoolClosed, Now: testBase})
	require.NoError(t, err)
	events := len(cp.outbox(t))

	tx, err := cp.s.Pool().Begin(cp.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(cp.ctx) }()
	var xid string // as pg_locks shows it (see holdWhile)
	require.NoError(t, tx.QueryRow(cp.ctx, `SELECT pg_current_xact_id()::xid::text`).Scan(&xid))
	_, err = tx.Exec(cp.ctx, `UPDATE docket_pools SET status = 'COMPLETED' WHERE id = $1`, cp.pool) // a completion, in flight
	require.NoError(t, err)

	// A connection per reopen: the default pool has max(4, cores).
	wide, err := url.Parse(cp.url)
	require.NoError(t, err)
	q := wide.Query()
	q.Set("pool_max_conns", strconv.Itoa(n+2))
	wide.RawQuery = q.Encode()
	reopener := openAt(t, wide.String())

	later := testBase.Add(time.Minute)
	errs := make(chan error, n)
	for _, u := range cp.units {
		go func() {
			_, err := reopener.UnitTransition(context.Background(), &store.UnitTransitionParams{ID: u.ID, From: crowd.UnitFinalized, To: crowd.UnitJudgable, Now: later})
			errs <- err
		}()
	}
	require.Eventually(t, func() bool {
		// The first waits for the transaction, the others for the
		// pool's tuple lock the first holds.
		return cp.count(t, `SELECT count(*) FROM pg_locks WHERE NOT granted
			AND (locktype = 'transactionid' AND transactionid::text = $1
				OR locktype = 'tuple' AND relation = 'docket_pools'::regclass)`, xid) == n
	}, time.Minute, 20*time.Millisecond, "every reopen waits for the completion")
	require.NoError(t, tx.Commit(cp.ctx))
	for range n {
		require.NoError(t, <-errs, "a reopen")
	}

	p, err := cp.s.PoolGet(cp.ctx, cp.pool)
	require.NoError(t, err)
	require.Equal(t, crowd.PoolClosed, p.Status)
	require.Equal(t, n, p.Counts.Open())
	require.Equal(t, []crowd.PoolUpdatedData{{PoolID: cp.pool, From: crowd.PoolCompleted, To: crowd.PoolClosed}}, cp.poolMoves(t, events))
}

// TestPoolCompleteOneWaitsForItsLock: completing one named pool (a close's
// PoolCompleteMany with PoolID) waits for a transaction holding that pool
// — the leader's pool-completer completing it — instead of skipping it,
// so the close's read after it sees the pool COMPLETED, not a CLOSED pool
// whose completion is about to commit (TestPoolCompletes failed so about
// 1 run in 8). The sweep over all pools still skips locked ones.
func TestPoolCompleteOneWaitsForItsLock(t *testing.T) {
	t.Parallel()
	cp := setupCrowdPool(t, crowdPoolParams{Units: 1, Slots: 1})
	conf := 0.9
	_, err := cp.s.UnitFinalize(cp.ctx, &store.UnitFinalizeParams{ID: cp.units[0].ID, Result: json.RawMessage(`{}`), Confidence: &conf, Now: testBase})
	require.NoError(t, err)
	_, err = cp.s.PoolTransition(cp.ctx, &store.PoolTransitionParams{ID: cp.pool, From: crowd.PoolOpen, To: crowd.PoolClosed, Now: testBase})
	require.NoError(t, err)

	// Another completer holds the pool, as poolCompleteLockSQL takes it.
	tx, err := cp.s.Pool().Begin(cp.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(cp.ctx) }()
	var xid string // as pg_locks shows it
	require.NoError(t, tx.QueryRow(cp.ctx, `SELECT pg_current_xact_id()::xid::text`).Scan(&xid))
	_, err = tx.Exec(cp.ctx, `SELECT id FROM docket_pools WHERE id = $1 FOR UPDATE`, cp.pool)
	require.NoError(t, err)

	later := testBase.Add(time.Minute)
	ids, err := cp.s.PoolCompleteMany(cp.ctx, &store.PoolCompleteManyParams{Max: 10, Now: later})
	require.NoError(t, err)
	require.Empty(t, ids, "the sweep skips a pool another completer holds")

	type result struct {
		ids []uuid.UUID
		err error
	}
	done := make(chan result, 1)
	go func() {
		ids, err := cp.s.PoolCompleteMany(context.Background(), &store.PoolCompleteManyParams{PoolID: cp.pool, Max: 1, Now: later})
		done <- result{ids, err}
	}()
	var early *result
	require.Eventually(t, func() bool {
		select {
		case r := <-done:
			early = &r
			return true
		default:
		}
		return cp.count(t, `SELECT count(*) FROM pg_locks WHERE NOT granted
			AND locktype = 'transactionid' AND transactionid::text = $1`, xid) == 1
	}, time.Minute, 10*time.Millisecond)
	require.Nil(t, early, "completing the named pool skipped it while another completer held it")

	_, err = tx.Exec(cp.ctx, `UPDATE docket_pools SET status = 'COMPLETED', updated_at = $2 WHERE id = $1`, cp.pool, later)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(cp.ctx))
	r := <-done
	require.NoError(t, r.err)
	require.Empty(t, r.ids, "completed by the other, not twice")
	p, err := cp.s.PoolGet(cp.ctx, cp.pool)
	require.NoError(t, err)
	require.Equal(t, crowd.PoolCompleted, p.Status)
}

// poolMoves is the pool.updated events of the outbox from its from-th on.
func (cp *crowdPool) poolMoves(t *testing.T, from int) []crowd.PoolUpdatedData {
	t.Helper()
	var moves []crowd.PoolUpdatedData
	for _, ev := range cp.outbox(t)[from:] {
		if ev.Type == crowd.EventPoolUpdated {
			var d crowd.PoolUpdatedData
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			moves = append(moves, d)
		}
	}
	return moves
}
