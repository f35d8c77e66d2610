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

// TestReleaseLockOrderWithJudgeBatch: a release of another assignment of
// a unit locks the unit before its counter shard, as the judgment batch's
// statement does. (It locked the shard first when its counter CTE did not
// read its unit's: PostgreSQL runs such CTEs after the main query, the
// later one first. Then a release waiting for a shard while the batch
// held the unit and waited for the same shard was a deadlock.)
func TestReleaseLockOrderWithJudgeBatch(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 1, 2, 3)
	u := g.units[0].ID
	a1, a2 := g.assign(t, g.contributors[0], u), g.assign(t, g.contributors[1], u)
	const sh = 3
	// waiting counts the sessions waiting for one of pids (other tests
	// share the database, so only this test's sessions count)
	waiting := func(pids ...int32) int {
		return g.count(t, `SELECT count(*) FROM pg_stat_activity WHERE pg_blocking_pids(pid) && $1::int[]`, pids)
	}
	// Y holds the shard.
	y, err := g.s.Pool().Begin(g.ctx)
	require.NoError(t, err)
	defer func() { _ = y.Rollback(g.ctx) }()
	var ypid int32
	require.NoError(t, y.QueryRow(g.ctx, `SELECT pg_backend_pid()`).Scan(&ypid))
	_, err = y.Exec(g.ctx, `SELECT 1 FROM docket_pool_counters WHERE pool_id = $1 AND shard = $2 FOR UPDATE`, g.pool, sh)
	require.NoError(t, err)

	rerr := make(chan error, 1)
	go func() {
		_, err := g.s.AssignmentRelease(context.WithValue(g.ctx, txShardKey{}, sh),
			&store.AssignmentReleaseParams{ID: a2.ID, ContributorID: a2.ContributorID, Now: testBase.Add(time.Second)})
		rerr <- err
	}()
	var rpid int32
	require.Eventually(t, func() bool {
		err := g.s.Pool().QueryRow(g.ctx, `SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, ypid).Scan(&rpid)
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the release waits for the shard")
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
	require.Eventually(t, func() bool { return waiting(ypid, rpid) == 2 }, time.Minute, 20*time.Millisecond,
		"the batch's statement waits too: for the release's unit, or (locked in the other order) for the shard")
	require.NoError(t, y.Commit(g.ctx))
	require.NoError(t, <-rerr, "release")
	require.NoError(t, <-xerr, "batch statement")
}
