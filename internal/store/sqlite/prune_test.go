package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// TestDeleteFinishedDeletesAttempts: attempts have no foreign key, so the
// pruner deletes them itself, and only those of the jobs it deletes.
func TestDeleteFinishedDeletesAttempts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := migrated(t, filepath.Join(t.TempDir(), "docket.db"))
	_, err := s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{newJob("q"), newJob("q"), newJob("q")}, Now: base})
	require.NoError(t, err)
	rows, err := s.JobAcquire(ctx, &store.JobAcquireParams{Queue: "q", Max: 3, Owner: "n", LeaseDuration: time.Minute, Now: base})
	require.NoError(t, err)
	require.Len(t, rows, 3)
	fs := []*store.JobFinishParams{
		{ID: rows[0].ID, Attempt: 1, State: job.StateSuccess},
		{ID: rows[1].ID, Attempt: 1, State: job.StateDead, Error: "x"},
	}
	_, err = s.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: fs, Now: base.Add(time.Second)})
	require.NoError(t, err)
	count := func() (n int) {
		require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM docket_job_attempts`).Scan(&n))
		return n
	}
	require.Equal(t, 2, count())
	n, err := s.JobDeleteFinished(ctx, &store.JobDeleteFinishedParams{FinishedBefore: base.Add(time.Hour), Max: 1})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, count())
	n, err = s.JobDeleteFinished(ctx, &store.JobDeleteFinishedParams{FinishedBefore: base.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 0, count())
	_, err = s.JobGet(ctx, rows[2].ID)
	require.NoError(t, err, "the running job stays")
}
