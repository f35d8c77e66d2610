package postgres

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// TestAnalyzeGrownVacuumedSmall: with autovacuum off for a table,
// AnalyzeGrown analyzes it whole at every doubling, even when a VACUUM
// (or CREATE INDEX) since its last ANALYZE counted enough rows in pg_class
// for a size refresh: the statistics of its first 2,000 rows would
// otherwise stay for good, nothing else analyzing it. (With autovacuum
// on, such a table gets a size refresh and autovacuum's next analysis
// refreshes the columns: AnalyzeGrown's comment.)
func TestAnalyzeGrownVacuumedSmall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse(b.url)
	require.NoError(t, err)
	q := u.Query()
	q.Set("default_statistics_target", "10")
	u.RawQuery = q.Encode()
	s := openAt(t, u.String())
	_, err = s.Pool().Exec(b.ctx, `ALTER TABLE docket_jobs SET (autovacuum_enabled = off)`)
	require.NoError(t, err)
	insert := func(queue string, n int) {
		for range n / 500 {
			_, err := s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: newJobs(queue, 500), Now: testBase})
			require.NoError(t, err)
		}
	}
	mcv := func() string {
		var v string
		require.NoError(t, s.Pool().QueryRow(b.ctx, `SELECT coalesce(most_common_vals::text, '') FROM pg_stats
			WHERE schemaname = current_schema() AND tablename = 'docket_jobs' AND attname = 'queue'`).Scan(&v))
		return v
	}
	insert("first", 2000)
	_, err = s.AnalyzeGrown(b.ctx)
	require.NoError(t, err)
	require.Equal(t, "{first}", mcv())
	insert("second", 2000)
	_, err = s.Pool().Exec(b.ctx, `VACUUM docket_jobs`)
	require.NoError(t, err)
	insert("third", 8000)
	tables, err := s.AnalyzeGrown(b.ctx)
	require.NoError(t, err)
	require.Contains(t, tables, "docket_jobs")
	require.Contains(t, mcv(), "third", "statistics from 2,000 rows are made again whole")
}
