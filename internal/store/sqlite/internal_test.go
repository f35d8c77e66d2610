package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// TestQueryPlans checks with EXPLAIN QUERY PLAN that the hot and maintenance
// queries use the index meant for them and never scan docket_jobs.
func TestQueryPlans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "docket.db"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	_, err = s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)

	// Several finished states: one walk of the state index each, merged,
	// stopping at the limit (no sort of every entry of the states).
	statesSQL, statesArgs := jobListSQL(&store.JobListParams{
		States: []job.State{job.StateSuccess, job.StateDead}, Types: []string{"a"}, Queues: []string{"q"},
		BeforeID: uuid.Must(uuid.NewV7()), Limit: 10,
	})
	for _, tc := range []struct {
		name  string
		query string
		args  []any
		want  []string // each must appear in the plan
	}{
		{"ListFinishedStates", statesSQL, statesArgs,
			[]string{"MERGE (UNION ALL)", "USING INDEX docket_jobs_type_id (job_type=? AND id<?)"}},
		{"Acquire", acquireSQL, []any{"o", 1, 1, "q", 10},
			[]string{"USING COVERING INDEX docket_jobs_acquire (queue=?)", "SEARCH docket_jobs USING INTEGER PRIMARY KEY (rowid=?)"}},
		{"AnyDue", anyDueSQL, []any{"q", 1},
			[]string{"USING COVERING INDEX docket_jobs_acquire (queue=?)"}},
		{"FinishUpdate", finishUpdateSQL, []any{`[]`, 1, 0},
			[]string{"MATERIALIZE f", "SCAN jsonb_each", "SEARCH docket_jobs USING INTEGER PRIMARY KEY (rowid=?)"}},
		{"Schedule", scheduleSQL, []any{1, 1, 10},
			[]string{"USING INDEX docket_jobs_retry_due (run_at<?)"}},
		{"ListExpired", listExpiredSQL, []any{1, 10},
			[]string{"USING INDEX docket_jobs_lease_expiry (lease_expires_at<?)"}},
		{"DeleteFinished", deleteFinishedSQL, []any{1, 10},
			[]string{"USING INDEX docket_jobs_finished (finished_at<?)"}},
		// Listings of ended jobs, as JobList spells them: the partial
		// indexes leave out QUEUED and RUNNING.
		{"ListByType", `SELECT id FROM docket_jobs WHERE state IN (?) AND state NOT IN ('QUEUED', 'RUNNING') AND job_type IN (?) AND id < ? ORDER BY id DESC LIMIT 10`,
			[]any{"DEAD", "a", "x"}, []string{"USING INDEX docket_jobs_type_id (job_type=? AND id<?)"}},
		{"ListByState", `SELECT id FROM docket_jobs WHERE state IN (?) AND state NOT IN ('QUEUED', 'RUNNING') AND id < ? ORDER BY id DESC LIMIT 10`,
			[]any{"DEAD", "x"}, []string{"USING COVERING INDEX docket_jobs_state_id (state=? AND id<?)"}},
		{"Attempts", `SELECT attempt FROM docket_job_attempts WHERE job_id = ? ORDER BY id`, []any{"x"},
			[]string{"USING INDEX docket_job_attempts_job (job_id=?)"}},
		// Finding work walks the open pools in the answer's order and
		// stops at the limit: no sort of every open pool.
		{"PoolListEligible", poolEligibleSQL, []any{"c", 50},
			[]string{"SCAN p USING INDEX docket_pools_open_order", "SEARCH x USING COVERING INDEX"}},
	} {
		rows, err := s.writer.QueryContext(ctx, "EXPLAIN QUERY PLAN "+tc.query, tc.args...)
		require.NoError(t, err, tc.name)
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		text := strings.Join(plan, "\n")
		for _, w := range tc.want {
			require.Contains(t, text, w, "%s plan:\n%s", tc.name, text)
		}
		require.NotContains(t, text, "SCAN docket_jobs", "%s plan:\n%s", tc.name, text)
		require.NotContains(t, text, "USE TEMP B-TREE FOR ORDER BY", "%s plan:\n%s", tc.name, text)
	}
}

// TestPragmas checks the settings every connection, writer and reader, runs
// with.
func TestPragmas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "docket.db"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	want := map[string]string{
		"journal_mode": "wal",
		"synchronous":  "2", // FULL
		"foreign_keys": "1",
		"busy_timeout": "10000",
		"temp_store":   "2", // MEMORY
	}
	for name, db := range map[string]interface {
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}{"writer": s.writer, "reader": s.reader} {
		for pragma, v := range want {
			var got string
			require.NoError(t, db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got), "%s %s", name, pragma)
			require.Equal(t, v, got, "%s: PRAGMA %s", name, pragma)
		}
		var queryOnly string
		require.NoError(t, db.QueryRowContext(ctx, "PRAGMA query_only").Scan(&queryOnly))
		require.Equal(t, map[string]string{"writer": "0", "reader": "1"}[name], queryOnly, "%s query_only", name)
	}
}

// TestWriteBusyIsContention: a write that waited the whole busy timeout
// for another process's write lock (a user's transaction, a sqlite3 shell,
// another docket serve under load) wrote nothing and may be made again: it
// is store.ErrContention (the API's 503 with Retry-After), not an unknown
// error (a 500). Once the lock is released the same write succeeds.
func TestWriteBusyIsContention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "docket.db")
	s, err := open(ctx, path, store.Options{}, tuning{busy: 50 * time.Millisecond, walLimit: walSizeLimit})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	_, err = s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)

	other, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	holder, err := other.Conn(ctx)
	require.NoError(t, err)
	_, err = holder.ExecContext(ctx, `BEGIN IMMEDIATE`)
	require.NoError(t, err)

	insert := func() error {
		_, err := s.JobInsertMany(ctx, &store.JobInsertManyParams{Now: time.Now(), Jobs: []*store.JobInsertParams{{
			ID: uuid.Must(uuid.NewV7()), Type: "t", Queue: "q", Payload: []byte(`{}`), State: job.StateQueued, MaxAttempts: 1,
		}}})
		return err
	}
	err = insert()
	require.ErrorIs(t, err, store.ErrContention)
	require.ErrorContains(t, err, "SQLITE_BUSY", "the driver's error stays in the chain")

	_, err = holder.ExecContext(ctx, `ROLLBACK`)
	require.NoError(t, err)
	require.NoError(t, holder.Close())
	require.NoError(t, insert())
}

// TestWALShrinksAfterBurst: a burst of writes grows the WAL file past the
// size limit; once it has been checkpointed the next write truncates it
// back to the limit, instead of it keeping the burst's size for as long as
// the database is open (a docket serve's lifetime).
func TestWALShrinksAfterBurst(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "docket.db")
	const limit = 256 << 10
	s, err := open(ctx, path, store.Options{}, tuning{busy: busyTimeout, walLimit: limit})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	_, err = s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)

	insert := func(n int) {
		t.Helper()
		payload := []byte(`{"s":"` + strings.Repeat("x", 2000) + `"}`)
		jobs := make([]*store.JobInsertParams, n)
		for i := range jobs {
			jobs[i] = &store.JobInsertParams{ID: uuid.Must(uuid.NewV7()), Type: "t", Queue: "q", Payload: payload, State: job.StateQueued, MaxAttempts: 1}
		}
		_, err := s.JobInsertMany(ctx, &store.JobInsertManyParams{Now: time.Now(), Jobs: jobs})
		require.NoError(t, err)
	}
	walSize := func() int64 {
		t.Helper()
		st, err := os.Stat(path + "-wal")
		require.NoError(t, err)
		return st.Size()
	}
	// About 8 MB: past SQLite's automatic checkpoint (1,000 pages), which
	// the commit runs.
	insert(3000)
	require.Greater(t, walSize(), int64(4<<20), "the burst went through the WAL")
	insert(1)
	require.LessOrEqual(t, walSize(), int64(limit), "the WAL was truncated to the limit")
}

// TestPingStuckWriter: Ping lets the writer be busy while writes end (a
// steady load), but once it has been in use with none ended for longer
// than stuckAfter (a write that hangs) Ping waits for it and so fails
// within its context, where it answered at once for ever.
func TestPingStuckWriter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := open(ctx, filepath.Join(t.TempDir(), "docket.db"), store.Options{}, tuning{busy: time.Second, walLimit: walSizeLimit})
	require.NoError(t, err)
	defer s.Close()
	clock := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return clock }
	ping := func() error {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		return s.Ping(pctx)
	}
	// hold runs a write that waits until its channel is closed.
	hold := func() (chan struct{}, chan error) {
		release, done, started := make(chan struct{}), make(chan error, 1), make(chan struct{})
		go func() {
			done <- s.write(ctx, func(tx *sql.Tx) error {
				close(started)
				<-release
				return nil
			})
		}()
		<-started
		return release, done
	}

	release, done := hold()
	require.NoError(t, ping(), "busy, first seen")
	clock = clock.Add(2 * time.Second)
	require.NoError(t, ping(), "busy for stuckAfter, not longer")
	close(release)
	require.NoError(t, <-done)
	release, done = hold()
	clock = clock.Add(time.Hour)
	require.NoError(t, ping(), "a write ended meanwhile: a steady load, not a stuck writer")
	clock = clock.Add(2*time.Second + time.Millisecond)
	require.ErrorIs(t, ping(), context.DeadlineExceeded, "no write ended for longer than stuckAfter")
	close(release)
	require.NoError(t, <-done)
	require.NoError(t, ping(), "idle again")
}
