package postgres

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// TestReviewAnalyzeGrownVacuumedSmall: statistics made from 2,000 rows
// (fewer than a full sample, 3,000 at target 10) are to be made again
// whole at the next doubling (AnalyzeGrown's comment). A VACUUM in
// between (manual, or autovacuum's insert-driven vacuum; CREATE INDEX
// too) sets reltuples without touching the statistics, and the gate reads
// reltuples: the doubling gets a size refresh and the 2,000-row
// statistics stay; with autovacuum off, for good.
func TestReviewAnalyzeGrownVacuumedSmall(t *testing.T) {
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
