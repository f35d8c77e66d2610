package postgres

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// TestCheckDomainsKeepStatistics: migration 0022 changes the type of
// eleven columns, and ALTER COLUMN TYPE drops their statistics
// (pg_statistic); the take's and the judgment's plans read those of
// docket_units.state and slots_taken. Until autovacuum analyzes the table
// again (on a large, mostly settled table: not soon) the planner guesses.
// A migration that retypes columns should leave them analyzed.
func TestCheckDomainsKeepStatistics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	planPools(t, b, 200, func(int, int) *store.UnitInsertParams {
		return &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}
	})
	stats := func() int {
		var n int
		require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT count(*) FROM pg_stats
			WHERE schemaname = current_schema() AND tablename = 'docket_units'
				AND attname IN ('state', 'slots_taken', 'judgments_per_unit')`).Scan(&n))
		return n
	}
	down, err := b.s.Migrate(b.ctx, &store.MigrateParams{Direction: store.Down, Steps: stepsDownTo(t, b, 22)})
	require.NoError(t, err)
	require.Equal(t, "crowd_check_domains", down[len(down)-1].Name, "migration 0022 reverted")
	b.s.Pool().Reset()
	_, err = b.s.Pool().Exec(b.ctx, `ANALYZE docket_units`)
	require.NoError(t, err)
	require.Equal(t, 3, stats(), "analyzed before the migration")
	_, err = b.s.Migrate(b.ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)
	b.s.Pool().Reset()
	require.Equal(t, 3, stats(), "statistics after migration 0022")
}
