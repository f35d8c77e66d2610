package postgres

import (
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
	b := setup(t)
	_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{newJob("q"), newJob("q"), newJob("q")}, Now: testBase})
	require.NoError(t, err)
	rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "q", Max: 3, Owner: "n", LeaseDuration: time.Minute, Now: testBase})
	require.NoError(t, err)
	require.Len(t, rows, 3)
	fs := []*store.JobFinishParams{
		{ID: rows[0].ID, Attempt: 1, State: job.StateCanceled},
		{ID: rows[1].ID, Attempt: 1, State: job.StateDead, Error: "x"},
	}
	_, err = b.s.JobFinishMany(b.ctx, &store.JobFinishManyParams{Jobs: fs, Now: testBase.Add(time.Second)})
	require.NoError(t, err)
	count := func() (n int) {
		require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT count(*) FROM docket_job_attempts`).Scan(&n))
		return n
	}
	require.Equal(t, 2, count())
	n, err := b.s.JobDeleteFinished(b.ctx, &store.JobDeleteFinishedParams{FinishedBefore: testBase.Add(time.Hour), Max: 1})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, count())
	n, err = b.s.JobDeleteFinished(b.ctx, &store.JobDeleteFinishedParams{FinishedBefore: testBase.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 0, count())
	_, err = b.s.JobGet(b.ctx, rows[2].ID)
	require.NoError(t, err, "the running job stays")
}

// TestSuccessWritesNoAttemptRow: a successful attempt is read from the job
// row, not from a history row of its own, and is listed all the same.
func TestSuccessWritesNoAttemptRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{newJob("q")}, Now: testBase})
	require.NoError(t, err)
	rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "q", Max: 1, Owner: "node-s", LeaseDuration: time.Minute, Now: testBase})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	applied, err := b.s.JobFinishMany(b.ctx, &store.JobFinishManyParams{
		Jobs: []*store.JobFinishParams{{ID: rows[0].ID, Attempt: 1, State: job.StateSuccess}},
		Now:  testBase.Add(time.Second),
	})
	require.NoError(t, err)
	require.Equal(t, []job.State{job.StateSuccess}, applied)
	var n int
	require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT count(*) FROM docket_job_attempts`).Scan(&n))
	require.Zero(t, n)
	as, err := b.s.JobAttemptList(b.ctx, rows[0].ID)
	require.NoError(t, err)
	require.Len(t, as, 1)
	require.Equal(t, job.OutcomeSuccess, as[0].Outcome)
	require.Equal(t, "node-s", as[0].Node)
	require.Equal(t, 1, as[0].Attempt)
	require.True(t, as[0].StartedAt.Equal(testBase), "started %s", as[0].StartedAt)
	require.True(t, as[0].FinishedAt.Equal(testBase.Add(time.Second)), "finished %s", as[0].FinishedAt)
}
