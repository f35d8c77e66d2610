package sqlite

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// TestRowidHintsThatMiss: a finish goes to the row its acquisition hinted
// at, but a hint is never trusted over the id: one pointing at another
// job's row, or at no row, is retried by id, and the other job is left
// alone.
func TestRowidHintsThatMiss(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "docket.db"), store.Options{}.WithDefaults())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	_, err = s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var ps []*store.JobInsertParams
	for range 3 {
		ps = append(ps, &store.JobInsertParams{ID: uuid.Must(uuid.NewV7()), Type: "t", Queue: "q",
			Payload: json.RawMessage(`{}`), State: job.StateQueued, MaxAttempts: 3})
	}
	_, err = s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: ps, Now: now})
	require.NoError(t, err)
	rows, err := s.JobAcquire(ctx, &store.JobAcquireParams{Queue: "q", Max: 3, Owner: "n", LeaseDuration: time.Minute, Now: now})
	require.NoError(t, err)
	require.Len(t, rows, 3)
	a, b, c := rows[0].ID, rows[1].ID, rows[2].ID
	ra, rb := s.hints.take(a), s.hints.take(b)
	require.NotZero(t, ra, "acquisition leaves a hint")
	require.NotZero(t, rb)
	s.hints.put(a, rb) // a's hint points at b's row
	s.hints.put(c, 1<<40)

	finish := func(id uuid.UUID) bool {
		t.Helper()
		ok, err := s.JobFinishMany(ctx, &store.JobFinishManyParams{
			Jobs: []*store.JobFinishParams{{ID: id, Attempt: 1, State: job.StateSuccess}}, Now: now.Add(time.Second)})
		require.NoError(t, err)
		return ok[0] != ""
	}
	require.True(t, finish(a))
	got, err := s.JobGet(ctx, b)
	require.NoError(t, err)
	require.Equal(t, job.StateRunning, got.State, "the job the wrong hint pointed at is untouched")
	require.True(t, finish(c), "a hint to no row is retried by id")
	require.True(t, finish(b), "no hint: by id")
	require.False(t, finish(b), "a second finish is fenced")
	for _, id := range []uuid.UUID{a, b, c} {
		got, err := s.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, job.StateSuccess, got.State)
	}
}
