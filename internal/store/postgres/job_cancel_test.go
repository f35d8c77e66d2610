package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// holdWhile runs change on a transaction of its own, then fn in a
// goroutine, and commits the transaction once fn's statement waits for
// it (pg_locks), so that the row fn meets changed after fn's snapshot.
func (b *bundle) holdWhile(t *testing.T, change string, args []any, fn func()) {
	t.Helper()
	tx, err := b.s.Pool().Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	var xid string // as pg_locks shows it (see TestJudgeBatchWaitsForUnit)
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT pg_current_xact_id()::xid::text`).Scan(&xid))
	_, err = tx.Exec(b.ctx, change, args...)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted
			AND transactionid::text = $1`, xid) > 0
	}, time.Minute, 20*time.Millisecond, "the cancel waits for the row")
	require.NoError(t, tx.Commit(b.ctx))
	<-done
}

// A job acquired (QUEUED → RUNNING) after the cancel's snapshot, by a
// transaction the cancel waits for, is not taken for a finished one nor
// for the QUEUED job the snapshot shows: the statement leaves it out and
// JobCancelMany runs it again for that job alone, which asks it to stop.
// The others of the batch are canceled by the first statement.
func TestJobCancelManyRetriesAJobChangedUnderIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: newJobs("q", 3), Now: testBase})
	require.NoError(t, err)
	ids := []uuid.UUID{res[0].Job.ID, res[1].Job.ID, res[2].Job.ID}
	var got []store.JobCancelManyResult
	b.holdWhile(t, `UPDATE docket_jobs SET state = 'RUNNING', attempt = attempt + 1, lease_owner = 'w',
			lease_expires_at = $2, attempted_at = $3 WHERE id = $1`,
		[]any{ids[1], testBase.Add(time.Hour), testBase}, func() {
			got, err = b.s.JobCancelMany(context.Background(), &store.JobCancelManyParams{IDs: ids, Now: testBase.Add(time.Minute)})
		})
	require.NoError(t, err)
	require.Equal(t, []store.JobCancelManyResult{
		{State: job.StateCanceled, Canceled: true}, {State: job.StateRunning}, {State: job.StateCanceled, Canceled: true},
	}, got)
	row, err := b.s.JobGet(b.ctx, ids[1])
	require.NoError(t, err)
	require.Equal(t, job.StateRunning, row.State)
	require.True(t, row.CancelRequested, "the job acquired under the cancel is asked to stop")
}

// A unit paused after the cancel's snapshot, by a transaction the cancel
// waits for, is canceled from PAUSED by the statement run again for it
// alone, and the counters move from PAUSED.
func TestUnitCancelManyRetriesAUnitChangedUnderIt(t *testing.T) {
	t.Parallel()
	cp := setupCrowdPool(t, crowdPoolParams{Units: 2, Slots: 1})
	ids := []uuid.UUID{cp.units[0].ID, cp.units[1].ID}
	var (
		got []store.UnitCancelManyResult
		err error
	)
	cp.holdWhile(t, `WITH u AS (UPDATE docket_units SET state = 'PAUSED' WHERE id = $1 RETURNING pool_id)
		UPDATE docket_pool_counters pc SET units_judgable = units_judgable - 1, units_paused = units_paused + 1
		FROM u WHERE pc.pool_id = u.pool_id AND pc.shard = 0`, []any{ids[0]}, func() {
		got, err = cp.s.UnitCancelMany(context.Background(), &store.UnitCancelManyParams{IDs: ids, Now: testBase.Add(time.Minute)})
	})
	require.NoError(t, err)
	require.Equal(t, []store.UnitCancelManyResult{{State: crowd.UnitCanceled, Canceled: true}, {State: crowd.UnitCanceled, Canceled: true}}, got)
	p, err := cp.s.PoolGet(cp.ctx, cp.pool)
	require.NoError(t, err)
	require.Equal(t, crowd.PoolCounts{Canceled: 2}, p.Counts, "the counters move from PAUSED for the unit paused")
}
