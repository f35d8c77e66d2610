package sqlite_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/sqlite"
)

// fillUp caps s's database at the pages it has now (PRAGMA max_page_count
// holds for the writer's one connection), so that a write needing a new
// page fails with SQLITE_FULL, as on a full disk.
func fillUp(t *testing.T, s *sqlite.Store) {
	t.Helper()
	var pages int
	require.NoError(t, s.DB().QueryRowContext(t.Context(), "PRAGMA page_count").Scan(&pages))
	var capped int
	require.NoError(t, s.DB().QueryRowContext(t.Context(), "PRAGMA max_page_count = "+itoa(pages)).Scan(&capped))
	require.Equal(t, pages, capped)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestStorageFull: a write that finds the database full (SQLITE_FULL) is
// store.ErrStorageFull, with nothing of it written; reads go on, and
// writes again once there is room.
func TestStorageFull(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t).(*sqlite.Store)
	kept := newJob("full")
	_, err := s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{kept}, Now: base})
	require.NoError(t, err)
	fillUp(t, s)

	big := newJob("full")
	big.Payload = json.RawMessage(`{"blob":"` + strings.Repeat("x", 256<<10) + `"}`)
	_, err = s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{big}, Now: base})
	require.ErrorIs(t, err, store.ErrStorageFull)
	require.Contains(t, err.Error(), "full")

	_, err = s.JobGet(ctx, big.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "nothing of the refused write is kept")
	got, err := s.JobGet(ctx, kept.ID)
	require.NoError(t, err)
	require.Equal(t, kept.ID, got.ID)

	// Room made, the same write succeeds: the failure left the writer's
	// connection usable.
	_, err = s.DB().ExecContext(ctx, "PRAGMA max_page_count = 1000000")
	require.NoError(t, err)
	_, err = s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{big}, Now: base})
	require.NoError(t, err)
	_, err = s.JobGet(ctx, big.ID)
	require.NoError(t, err)
}
