package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// TestReviewReleaseBatchDeadlock: a release of another assignment of a
// unit the batch's statement holds locks its counter shard before its
// unit (the release's u and c CTEs are both run after its main query, the
// later one first), so it closes a cycle with the batch's statement,
// which holds the unit and waits for the same shard.
func TestReviewReleaseBatchDeadlock(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 1, 2, 3)
	u := g.units[0].ID
	a1, a2 := g.assign(t, g.contributors[0], u), g.assign(t, g.contributors[1], u)
	const sh = 3
	waiters := func(xid int64) int {
		return g.count(t, `SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype IN ('transactionid', 'tuple')`)
	}
	// Y holds the shard.
	y, err := g.s.Pool().Begin(g.ctx)
	require.NoError(t, err)
	defer func() { _ = y.Rollback(g.ctx) }()
	var xid int64
	require.NoError(t, y.QueryRow(g.ctx, `SELECT txid_current()`).Scan(&xid))
	_, err = y.Exec(g.ctx, `SELECT 1 FROM docket_pool_counters WHERE pool_id = $1 AND shard = $2 FOR UPDATE`, g.pool, sh)
	require.NoError(t, err)
	base := waiters(xid)

	rerr := make(chan error, 1)
	go func() {
		_, err := g.s.AssignmentRelease(context.WithValue(g.ctx, txShardKey{}, sh),
			&store.AssignmentReleaseParams{ID: a2.ID, ContributorID: a2.ContributorID, Now: testBase.Add(time.Second)})
		rerr <- err
	}()
	require.Eventually(t, func() bool { return waiters(xid) > base }, 10*time.Second, 5*time.Millisecond)
	// The release waits for the shard holding its assignment only: the unit is free.
	x, err := g.s.Pool().Begin(g.ctx)
	require.NoError(t, err)
	defer func() { _ = x.Rollback(g.ctx) }()
	xerr := make(chan error, 1)
	go func() {
		rows, err := x.Query(g.ctx, judgmentInsertBatchSQL.sql, judgmentInsertBatchSQL.args(pgx.NamedArgs{
			"ids": []uuid.UUID{uuid.Must(uuid.NewV7())}, "assignments": []uuid.UUID{a1.ID},
			"contributors": []uuid.UUID{a1.ContributorID}, "data": []string{`{}`},
			"now": []time.Time{testBase.Add(time.Second)}, "pool": g.pool, "shard": sh})...)
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		xerr <- err
	}()
	require.Eventually(t, func() bool { return waiters(xid) > base+1 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, y.Commit(g.ctx))
	require.NoError(t, <-rerr, "release")
	require.NoError(t, <-xerr, "batch statement")
}
