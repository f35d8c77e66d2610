package sqlite_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store/storetest"
)

// TestCrowdRace is the PostgreSQL race, smaller: 30 contributors on one
// pool of 300 units × 3 judgments. Afterwards it breaks the tables on
// purpose, to show the checks catch what they look for.
func TestCrowdRace(t *testing.T) {
	t.Parallel()
	s := migrated(t, filepath.Join(t.TempDir(), "docket.db"))
	pool := storetest.RunCrowdRace(t, s, storetest.CrowdRaceConfig{
		Units: 300, JudgmentsPerUnit: 3, Contributors: 30, AbandonEvery: 10, Timeout: 3 * time.Minute,
	})
	checks := storetest.CrowdRaceChecks(pool, 3)
	count := func(name string) int {
		t.Helper()
		var n int
		require.NoError(t, s.DB().QueryRowContext(t.Context(), checks[name]).Scan(&n), name)
		return n
	}
	for name := range checks {
		require.Zero(t, count(name), name)
	}

	// One slot too many on one unit; a counter off by one.
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := s.DB().ExecContext(t.Context(), q, args...)
		require.NoError(t, err)
	}
	exec(`UPDATE docket_assignments SET state = 'ACTIVE' WHERE id = (SELECT id FROM docket_assignments
		WHERE pool_id = ? AND state = 'EXPIRED' LIMIT 1)`, pool.String())
	require.Equal(t, 1, count("slots over-assigned"))
	require.Equal(t, 1, count("units whose slots_taken is not their ACTIVE and SUBMITTED assignments"))
	require.Equal(t, 1, count("ACTIVE assignments left"))
	require.Equal(t, 1, count("counters that differ from the tables"))
	exec(`DELETE FROM docket_judgments WHERE id = (SELECT id FROM docket_judgments WHERE pool_id = ? LIMIT 1)`, pool.String())
	require.Equal(t, 1, count("units without exactly the target of judgments"))
	require.Equal(t, 1, count("SUBMITTED assignments without a judgment"))
	exec(`INSERT INTO docket_judgments (id, assignment_id, unit_id, pool_id, contributor_id, data, started_at, submitted_at)
		SELECT ?, id, unit_id, pool_id, contributor_id, '{}', 0, 0 FROM docket_assignments
		WHERE pool_id = ? AND state = 'EXPIRED' LIMIT 1`, uuid.NewString(), pool.String())
	require.Equal(t, 1, count("judgments not tied to one SUBMITTED assignment of their unit and contributor"))
}
