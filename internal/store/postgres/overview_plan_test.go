package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// TestOverviewPlan: each of JobOverview's reads goes through the index its
// bound relies on (the acquire index for the queues and their QUEUED
// counts, the partial indexes for RUNNING and RETRY, the state index for
// DEAD, the finished index for the newest finished jobs) and never scans
// the table, behind 40,000 jobs spread over the states
// (docs/benchmarks.md, "Web pages at 1,000,000 jobs").
func TestOverviewPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 40k jobs")
	}
	t.Parallel()
	b := setup(t)
	queues := []string{"default", "mail", "images", "reports"}
	for i := range 8 {
		_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: newJobs(queues[i%len(queues)], 5_000), Now: testBase})
		require.NoError(t, err)
	}
	// Oldest 70 % SUCCESS, 10 % DEAD, 5 % RETRY, 5 % RUNNING, the newest
	// 10 % QUEUED.
	_, err := b.s.Pool().Exec(b.ctx, `WITH r AS (SELECT id, ntile(20) OVER (ORDER BY id) AS p FROM docket_jobs)
		UPDATE docket_jobs j SET state = CASE WHEN r.p <= 14 THEN 'SUCCESS' WHEN r.p <= 16 THEN 'DEAD' WHEN r.p = 17 THEN 'RETRY' ELSE 'RUNNING' END,
			finished_at = CASE WHEN r.p <= 16 THEN j.created_at + r.p * interval '1 minute' END,
			attempted_at = j.created_at + interval '1 second',
			lease_expires_at = CASE WHEN r.p = 18 THEN j.created_at + interval '1 hour' END
		FROM r WHERE j.id = r.id AND r.p <= 18`)
	require.NoError(t, err)
	_, err = b.s.Pool().Exec(b.ctx, `VACUUM ANALYZE docket_jobs`)
	require.NoError(t, err)

	// A cap below what it counts, as at scale (10,000 of 140,000 QUEUED):
	// 500 of 1,000 QUEUED a queue, of 2,000 RUNNING, RETRY, of 4,000 DEAD.
	const limit = 501
	for _, tc := range []struct {
		name, query string
		args        []any
		uses        []string
	}{
		{"queued", overviewQueuedSQL, []any{limit}, []string{"Index Only Scan using docket_jobs_acquire"}},
		{"active", overviewActiveSQL, []any{limit}, []string{"docket_jobs_lease_expiry", "docket_jobs_retry_due"}},
		{"dead", overviewDeadSQL, []any{limit}, []string{"Index Only Scan using docket_jobs_state_id"}},
		{"finished", overviewFinishedSQL, []any{testBase, limit}, []string{"Index Scan Backward using docket_jobs_finished"}},
	} {
		rs, err := b.s.Pool().Query(b.ctx, "EXPLAIN "+tc.query, tc.args...)
		require.NoError(t, err)
		var lines []string
		for rs.Next() {
			var line string
			require.NoError(t, rs.Scan(&line))
			lines = append(lines, line)
		}
		require.NoError(t, rs.Err())
		rs.Close()
		plan := strings.Join(lines, "\n")
		t.Logf("%s:\n%s", tc.name, plan)
		for _, u := range tc.uses {
			require.Contains(t, plan, u, tc.name)
		}
		require.NotContains(t, plan, "Seq Scan on docket_jobs", tc.name)
	}

	o, err := b.s.JobOverview(b.ctx, &store.JobOverviewParams{Cap: 1_000, Since: testBase, FinishedCap: 3_000, LatencyOf: 100})
	require.NoError(t, err)
	var queued int
	for _, q := range o.Queues {
		require.LessOrEqual(t, q.Queued, 1_001, q.Name)
		queued += q.Queued
	}
	require.Equal(t, 1_001, queued, "the 4,000 QUEUED jobs (the newest, one queue) counted up to 1,001")
	require.True(t, o.RunningCut)
	require.True(t, o.RetryCut)
	require.Equal(t, 1_001, o.Dead)
	require.True(t, o.FinishedCut)
	require.Len(t, o.Waits, 100)
	require.Equal(t, time.Second, o.Waits[0])
}
