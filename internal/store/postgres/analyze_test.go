package postgres

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// TestAnalyzeGrown: a statement prepared on a fresh table gets a generic
// plan that reads the table whole, and keeps it as the table grows
// (PostgreSQL replans a prepared statement only when the table's
// statistics change); AnalyzeGrown analyzes the grown table, and the
// same statement is planned again with its index. Then nothing is
// analyzed again until the table doubles.
func TestAnalyzeGrown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Autovacuum analyzing the table first (its next visit is up to a
	// minute away, but it may fall inside the test) would leave nothing
	// to do.
	_, err := b.s.Pool().Exec(b.ctx, `ALTER TABLE docket_jobs SET (autovacuum_enabled = off)`)
	require.NoError(t, err)
	conn, err := b.s.Pool().Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	// The acquisition's shape: the rows picked by a subquery, taken by ctid.
	_, err = conn.Exec(b.ctx, `PREPARE by_ctid(text, int) AS SELECT id FROM docket_jobs
		WHERE ctid = ANY(ARRAY(SELECT ctid FROM docket_jobs WHERE queue = $1 LIMIT $2))`)
	require.NoError(t, err)
	defer conn.Exec(b.ctx, `DEALLOCATE by_ctid`) //nolint:errcheck // the connection goes back to the pool
	plan := func() string {
		t.Helper()
		rs, err := conn.Query(b.ctx, `EXPLAIN EXECUTE by_ctid('default', 10)`)
		require.NoError(t, err)
		var lines []string
		for rs.Next() {
			var l string
			require.NoError(t, rs.Scan(&l))
			lines = append(lines, l)
		}
		require.NoError(t, rs.Err())
		return strings.Join(lines, "\n")
	}
	for range 6 { // the sixth execution makes the generic plan
		_, err := conn.Exec(b.ctx, `EXECUTE by_ctid('default', 10)`)
		require.NoError(t, err)
	}

	tables, err := b.s.AnalyzeGrown(b.ctx)
	require.NoError(t, err)
	require.Empty(t, tables, "empty tables are not analyzed")

	for range 4 {
		_, err = b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: newJobs("default", 500), Now: testBase})
		require.NoError(t, err)
	}
	if p := plan(); !strings.HasPrefix(p, "Seq Scan on docket_jobs ") {
		// The connection dropped its cached plans meanwhile: a backend
		// that falls behind the invalidation messages of other sessions'
		// DDL (other tests making and dropping their schemas in this
		// database) resets its caches, and the plan is made again from the
		// table's real size. What follows still checks AnalyzeGrown.
		t.Logf("the generic plan was made again before the analyze (a cache reset under concurrent DDL):\n%s", p)
	}

	tables, err = b.s.AnalyzeGrown(b.ctx)
	require.NoError(t, err)
	require.Contains(t, tables, "docket_jobs")
	var pages int
	require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT relpages FROM pg_class WHERE oid = 'docket_jobs'::regclass`).Scan(&pages))
	require.GreaterOrEqual(t, pages, 8, "analyzed: its statistics count the table's pages")
	require.True(t, strings.HasPrefix(plan(), "Tid Scan on docket_jobs "), "planned again after the analyze:\n%s", plan())

	tables, err = b.s.AnalyzeGrown(b.ctx)
	require.NoError(t, err)
	require.Empty(t, tables, "nothing grew since")
}

// TestAnalyzeGrownQuotedSchema: a schema whose name needs quoting (mixed
// case) is found and its tables analyzed (current_schema()::regnamespace
// folded the name to lower case and failed on every call).
func TestAnalyzeGrownQuotedSchema(t *testing.T) {
	t.Parallel()
	base := testdb.ServerURL(t)
	ctx := context.Background()
	schema := fmt.Sprintf("Docket_Mixed_%d", time.Now().UnixNano())
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err == nil {
			_, _ = c.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
			_ = c.Close(context.Background())
		}
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", pgx.Identifier{schema}.Sanitize())
	u.RawQuery = q.Encode()
	s := openAt(t, u.String())
	_, err = s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)
	_, err = s.Pool().Exec(ctx, `ALTER TABLE docket_jobs SET (autovacuum_enabled = off)`)
	require.NoError(t, err)
	for range 4 {
		_, err = s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: newJobs("default", 500), Now: testBase})
		require.NoError(t, err)
	}
	tables, err := s.AnalyzeGrown(ctx)
	require.NoError(t, err)
	require.Contains(t, tables, "docket_jobs")
	var pages int
	require.NoError(t, s.Pool().QueryRow(ctx, `SELECT relpages FROM pg_class WHERE oid = 'docket_jobs'::regclass`).Scan(&pages))
	require.Greater(t, pages, 0, "analyzed in the quoted schema")
}

// TestAnalyzeGrownRefresh: a table doubles, and is analyzed whole while
// its statistics counted fewer rows than a full sample (300 × the
// statistics target: 3,000 here, the session's target set to 10); once
// they counted as many, a doubling gets a size refresh: its pages, rows
// and its primary key's rows counted again, its other columns'
// statistics left as the last full ANALYZE made them (a full one would
// now find the third queue the most common), its changes since that
// ANALYZE still counted for autovacuum.
func TestAnalyzeGrownRefresh(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := openAtStatisticsTarget10(t, b)
	var err error
	// Autovacuum on (a size refresh is only for a table autovacuum
	// analyzes whole), but not coming during the test.
	_, err = s.Pool().Exec(b.ctx, `ALTER TABLE docket_jobs SET (autovacuum_analyze_threshold = 2000000000,
		autovacuum_vacuum_threshold = 2000000000, autovacuum_vacuum_insert_threshold = 2000000000)`)
	require.NoError(t, err)
	queueMCV := func() string { return jobsQueueMCV(t, b, s) }
	size := func() (pages int, rows float64) {
		t.Helper()
		require.NoError(t, s.Pool().QueryRow(b.ctx, `SELECT relpages, reltuples FROM pg_class WHERE oid = 'docket_jobs'::regclass`).Scan(&pages, &rows))
		return pages, rows
	}
	insert := func(queue string, n int) { insertJobs(t, b, s, queue, n) }
	grown := func() {
		t.Helper()
		tables, err := s.AnalyzeGrown(b.ctx)
		require.NoError(t, err)
		require.Contains(t, tables, "docket_jobs")
	}

	insert("first", 2000)
	grown()
	require.Equal(t, "{first}", queueMCV(), "analyzed whole")
	_, rows := size()
	require.InDelta(t, 2000, rows, 1)

	insert("second", 2500)
	grown()
	require.Contains(t, queueMCV(), "second", "analyzed whole again: 2,000 rows are fewer than a full sample")
	mcv := queueMCV()
	pages0, rows0 := size()
	require.InDelta(t, 4500, rows0, 1)

	insert("third", 10000)
	// The inserting backends' counts flushed first: a count flushed after
	// the analysis would reach 10,000 even after a full ANALYZE's reset.
	nMod := func() int64 {
		t.Helper()
		var n int64
		require.NoError(t, s.Pool().QueryRow(b.ctx, `SELECT n_mod_since_analyze FROM pg_stat_user_tables
			WHERE schemaname = current_schema() AND relname = 'docket_jobs'`).Scan(&n))
		return n
	}
	// A backend that flushed its counts less than a second before going
	// idle keeps the rest pending until its idle timeout, 10 s
	// (PGSTAT_IDLE_INTERVAL; 60 s, PGSTAT_MAX_INTERVAL, at most): a
	// 10 s window was no wider than that timeout, and could run out when the
	// last counts waited for it on a loaded machine.
	require.Eventually(t, func() bool { return nMod() >= 10000 }, 90*time.Second, 100*time.Millisecond,
		"the inserts' counts flushed")
	grown()
	pages1, rows1 := size()
	require.GreaterOrEqual(t, pages1, 2*pages0, "its pages counted again")
	require.InDelta(t, 14500, rows1, 1450, "its rows counted again")
	require.Equal(t, mcv, queueMCV(), "a size refresh leaves the other columns' statistics")
	var idx float64
	require.NoError(t, s.Pool().QueryRow(b.ctx, `SELECT c.reltuples FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'docket_jobs'::regclass AND i.indisprimary`).Scan(&idx))
	require.InDelta(t, 14500, idx, 1450, "its primary key's rows counted again")

	// The changes since the last full ANALYZE still count: autovacuum's
	// next analysis is not put off. (Other sessions' counts reach the view
	// when those flush them, within a second or so.)
	require.GreaterOrEqual(t, nMod(), int64(10000))

	tables, err := s.AnalyzeGrown(b.ctx)
	require.NoError(t, err)
	require.Empty(t, tables, "nothing grew since")
}

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
	s := openAtStatisticsTarget10(t, b)
	_, err := s.Pool().Exec(b.ctx, `ALTER TABLE docket_jobs SET (autovacuum_enabled = off)`)
	require.NoError(t, err)
	insert := func(queue string, n int) { insertJobs(t, b, s, queue, n) }
	mcv := func() string { return jobsQueueMCV(t, b, s) }
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

// openAtStatisticsTarget10 is a second store on b's schema whose
// sessions analyze at statistics target 10 (a full sample: 3,000 rows).
func openAtStatisticsTarget10(t *testing.T, b *bundle) *Store {
	t.Helper()
	u, err := url.Parse(b.url)
	require.NoError(t, err)
	q := u.Query()
	q.Set("default_statistics_target", "10")
	u.RawQuery = q.Encode()
	return openAt(t, u.String())
}

// insertJobs inserts n jobs (a multiple of 500) of queue.
func insertJobs(t *testing.T, b *bundle, s *Store, queue string, n int) {
	t.Helper()
	for range n / 500 {
		_, err := s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: newJobs(queue, 500), Now: testBase})
		require.NoError(t, err)
	}
}

// jobsQueueMCV is the most common queues of docket_jobs' statistics.
func jobsQueueMCV(t *testing.T, b *bundle, s *Store) string {
	t.Helper()
	var v string
	require.NoError(t, s.Pool().QueryRow(b.ctx, `SELECT coalesce(most_common_vals::text, '') FROM pg_stats
		WHERE schemaname = current_schema() AND tablename = 'docket_jobs' AND attname = 'queue'`).Scan(&v))
	return v
}
