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
		{ID: rows[0].ID, Attempt: 1, State: job.StateCanceled},
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

// TestSuccessWritesNoAttemptRow: a successful attempt is read from the job
// row, not from a history row of its own, and is listed all the same.
func TestSuccessWritesNoAttemptRow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := migrated(t, filepath.Join(t.TempDir(), "docket.db"))
	_, err := s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{newJob("q")}, Now: base})
	require.NoError(t, err)
	rows, err := s.JobAcquire(ctx, &store.JobAcquireParams{Queue: "q", Max: 1, Owner: "node-s", LeaseDuration: time.Minute, Now: base})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	applied, err := s.JobFinishMany(ctx, &store.JobFinishManyParams{
		Jobs: []*store.JobFinishParams{{ID: rows[0].ID, Attempt: 1, State: job.StateSuccess}},
		Now:  base.Add(time.Second),
	})
	require.NoError(t, err)
	require.Equal(t, []job.State{job.StateSuccess}, applied)
	var n int
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM docket_job_attempts`).Scan(&n))
	require.Zero(t, n)
	as, err := s.JobAttemptList(ctx, rows[0].ID)
	require.NoError(t, err)
	require.Len(t, as, 1)
	require.Equal(t, job.OutcomeSuccess, as[0].Outcome)
	require.Equal(t, "node-s", as[0].Node)
	require.Equal(t, 1, as[0].Attempt)
	require.True(t, as[0].StartedAt.Equal(base), "started %s", as[0].StartedAt)
	require.True(t, as[0].FinishedAt.Equal(base.Add(time.Second)), "finished %s", as[0].FinishedAt)
}
