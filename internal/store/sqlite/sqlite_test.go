package sqlite_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/sqlite"
	"github.com/docket-run/docket/internal/store/storetest"
	"github.com/docket-run/docket/internal/testdb"
)

// openPath opens a store on path (not migrated) and closes it at cleanup.
func openPath(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// migrated opens and migrates a store on path.
func migrated(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	s := openPath(t, path)
	_, err := s.Migrate(context.Background(), &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)
	return s
}

// open makes a migrated, empty store on a file of its own: a copy of a
// migrated database (testdb.SQLiteMigratedFile), since migrating costs
// 0.6–0.8 s under the race detector and the conformance suite opens
// hundreds. Migrating from an empty file is tested by TestMigrateUpDownUp
// (and testdb's TestSQLiteMigratedFile compares a copy with it); the
// suite's Store/Migration group starts from the copy, then goes down and
// up again.
func open(t *testing.T) store.Store {
	path := filepath.Join(t.TempDir(), "docket.db")
	testdb.SQLiteMigratedFile(t, path)
	return openPath(t, path)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, open)
}

var base = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func newJob(queue string) *store.JobInsertParams {
	return &store.JobInsertParams{
		ID:          uuid.Must(uuid.NewV7()),
		Type:        "email",
		Queue:       queue,
		Payload:     json.RawMessage(`{"n":1}`),
		State:       job.StateQueued,
		MaxAttempts: 3,
	}
}

func TestOpenPath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, bad := range []string{"", ":memory:", "file:x.db"} {
		_, err := sqlite.Open(ctx, bad, store.Options{})
		require.Error(t, err, "path %q", bad)
	}
	// Characters that mean something in a URI are part of the file name.
	path := filepath.Join(t.TempDir(), "a dir?#%", "docket 1.db")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	s := migrated(t, path)
	_, err := s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{newJob("q")}, Now: base})
	require.NoError(t, err)
	_, err = os.Stat(path)
	require.NoError(t, err, "the database is at the path given")
	_, err = os.Stat(path + "-wal")
	require.NoError(t, err, "WAL mode")
}

func TestInsertTx(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t).(*sqlite.Store)

	insertIn := func(p *store.JobInsertParams) (*sql.Tx, []*store.JobInsertResult) {
		tx, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		res, err := s.JobInsertManyTx(ctx, tx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{p}, Now: base})
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.Equal(t, p.ID, res[0].Job.ID)
		return tx, res
	}

	rolledBack := newJob("tx")
	tx, _ := insertIn(rolledBack)
	require.NoError(t, tx.Rollback())
	_, err := s.JobGet(ctx, rolledBack.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	evs, err := s.OutboxList(ctx, &store.OutboxListParams{})
	require.NoError(t, err)
	require.Empty(t, evs, "the outbox row rolls back with the job")

	committed := newJob("tx")
	tx, res := insertIn(committed)
	require.NoError(t, tx.Commit())
	got, err := s.JobGet(ctx, committed.ID)
	require.NoError(t, err)
	require.Equal(t, res[0].Job, got)
	evs, err = s.OutboxList(ctx, &store.OutboxListParams{})
	require.NoError(t, err)
	require.Len(t, evs, 1)

	_, err = s.JobInsertManyTx(ctx, (*sql.Tx)(nil), &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{newJob("tx")}, Now: base})
	require.ErrorIs(t, err, store.ErrUnsupportedTx)
}

func TestInsertIdempotencyRace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t)
	const n = 100
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		got  []*store.JobInsertResult
		errs []error
	)
	for range n {
		wg.Go(func() {
			p := newJob("idem")
			p.IdempotencyKey = "the-one"
			res, err := s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{p}, Now: base})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			got = append(got, res[0])
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, got, n)
	inserted := 0
	for _, r := range got {
		require.Equal(t, got[0].Job.ID, r.Job.ID, "every caller gets the one row")
		if !r.Duplicate {
			inserted++
		}
	}
	require.Equal(t, 1, inserted)
	counts, err := s.JobCount(ctx)
	require.NoError(t, err)
	require.Equal(t, []*store.JobCount{{Queue: "idem", State: job.StateQueued, Count: 1}}, counts)
}

func TestHubWakeupAfterInsert(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t)
	ch, cancel := s.Subscribe(store.TopicJobAvailable)
	defer cancel()

	future := newJob("later")
	future.RunAt = base.Add(time.Hour)
	_, err := s.JobInsertMany(ctx, &store.JobInsertManyParams{
		Jobs: []*store.JobInsertParams{newJob("a"), newJob("a"), newJob("b"), future}, Now: base,
	})
	require.NoError(t, err)
	var woke []string
	for len(woke) < 2 {
		select {
		case q := <-ch:
			woke = append(woke, q)
		case <-time.After(5 * time.Second):
			t.Fatalf("no wakeup after insert; got %q", woke)
		}
	}
	require.ElementsMatch(t, []string{"a", "b"}, woke, "one wakeup per queue with due work")
	select {
	case q := <-ch:
		t.Fatalf("unexpected wakeup %q", q)
	default:
	}
}

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openPath(t, filepath.Join(t.TempDir(), "docket.db"))
	tables := func() []string {
		rows, err := s.DB().QueryContext(ctx,
			`SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'docket_%' ORDER BY name`)
		require.NoError(t, err)
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			require.NoError(t, rows.Scan(&n))
			names = append(names, n)
		}
		require.NoError(t, rows.Err())
		return names
	}
	all := []string{"docket_api_keys", "docket_assignments", "docket_contributors", "docket_dead_letters", "docket_inbox",
		"docket_job_attempts", "docket_jobs", "docket_judgments", "docket_leader", "docket_migrations",
		"docket_nodes", "docket_outbox", "docket_pool_contributors", "docket_pool_counters", "docket_pool_models", "docket_pools",
		"docket_queues", "docket_runs", "docket_secrets", "docket_steps", "docket_task_versions", "docket_tasks", "docket_trust_history",
		"docket_unit_audits", "docket_units",
		"docket_webhook_deliveries", "docket_webhooks", "docket_workflow_versions", "docket_workflows"}

	ms, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	for _, m := range ms {
		require.False(t, m.Applied)
	}
	for range 2 {
		done, err := s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
		require.NoError(t, err)
		require.Len(t, done, len(ms))
		require.True(t, done[0].Applied)
		require.Equal(t, all, tables())
		_, err = s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{newJob("m")}, Now: base})
		require.NoError(t, err)

		done, err = s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
		require.NoError(t, err)
		require.Empty(t, done, "up when current does nothing")

		done, err = s.Migrate(ctx, &store.MigrateParams{Direction: store.Down})
		require.NoError(t, err)
		require.Len(t, done, len(ms))
		require.Equal(t, []string{"docket_migrations"}, tables())
		status, err := s.MigrationStatus(ctx)
		require.NoError(t, err)
		for _, m := range status {
			require.False(t, m.Applied)
		}
	}
}

// acquireAll drains queue with s in batches, finishing each batch, and
// returns the ids it got.
func acquireAll(ctx context.Context, s store.Store, queue, owner string, batch int) ([]uuid.UUID, error) {
	var got []uuid.UUID
	for {
		rows, err := s.JobAcquire(ctx, &store.JobAcquireParams{
			Queue: queue, Max: batch, Owner: owner, LeaseDuration: time.Minute, Now: base.Add(time.Second),
		})
		if err != nil {
			return got, err
		}
		if len(rows) == 0 {
			return got, nil
		}
		fs := make([]*store.JobFinishParams, len(rows))
		for i, r := range rows {
			got = append(got, r.ID)
			fs[i] = &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: job.StateSuccess}
		}
		ok, err := s.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: fs, Now: base.Add(2 * time.Second)})
		if err != nil {
			return got, err
		}
		for i, to := range ok {
			if to == "" {
				return got, fmt.Errorf("finish of %s not applied", fs[i].ID)
			}
		}
	}
}

func insertN(t testing.TB, s store.Store, queue string, n int) {
	t.Helper()
	for i := 0; i < n; i += 1000 {
		ps := make([]*store.JobInsertParams, min(1000, n-i))
		for j := range ps {
			ps[j] = newJob(queue)
		}
		_, err := s.JobInsertMany(context.Background(), &store.JobInsertManyParams{Jobs: ps, Now: base})
		require.NoError(t, err)
	}
}

// requireEachOnce asserts every acquired id is distinct and there are n.
func requireEachOnce(t *testing.T, n int, lists ...[]uuid.UUID) {
	t.Helper()
	seen := map[uuid.UUID]bool{}
	for _, l := range lists {
		for _, id := range l {
			require.False(t, seen[id], "job %s handed out twice", id)
			seen[id] = true
		}
	}
	require.Len(t, seen, n)
}

func TestTwoStoresAcquireConcurrently(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "docket.db")
	s1 := migrated(t, path)
	s2 := openPath(t, path)
	// Small batches, so that the stores contend on every few jobs. Writers
	// of different connections wait in SQLite's busy handler (sleeps of
	// 1ms and up), so this is slow per job: keep n modest.
	const n = 600
	insertN(t, s1, "shared", n)

	var wg sync.WaitGroup
	lists := make([][]uuid.UUID, 4)
	errs := make([]error, 4)
	for i := range lists {
		s := store.Store(s1)
		if i%2 == 1 {
			s = s2
		}
		wg.Go(func() { lists[i], errs[i] = acquireAll(ctx, s, "shared", fmt.Sprintf("w%d", i), 3+i) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	requireEachOnce(t, n, lists...)
	counts, err := s2.JobCount(ctx)
	require.NoError(t, err)
	require.Equal(t, []*store.JobCount{{Queue: "shared", State: job.StateSuccess, Count: n}}, counts)
}

// TestHelperAcquireProcess is the child of TestProcessesAcquireConcurrently.
func TestHelperAcquireProcess(t *testing.T) {
	path := os.Getenv("DOCKET_SQLITE_HELPER_DB")
	if path == "" {
		t.Skip("helper process only")
	}
	s := openPath(t, path)
	ids, err := acquireAll(t.Context(), s, "shared", "pid-"+strconv.Itoa(os.Getpid()), 10)
	require.NoError(t, err)
	for _, id := range ids {
		fmt.Println("ACQUIRED", id)
	}
}

func TestProcessesAcquireConcurrently(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "docket.db")
	s := migrated(t, path)
	const n = 1200
	insertN(t, s, "shared", n)

	const procs = 3
	lists := make([][]uuid.UUID, procs+1)
	var wg sync.WaitGroup
	errs := make([]error, procs+1)
	for i := range procs {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperAcquireProcess$", "-test.v")
			cmd.Env = append(os.Environ(), "DOCKET_SQLITE_HELPER_DB="+path)
			out, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("helper %d: %w\n%s", i, err, out)
				return
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				var id string
				if _, err := fmt.Sscanf(sc.Text(), "ACQUIRED %s", &id); err == nil {
					lists[i] = append(lists[i], uuid.MustParse(id))
				}
			}
		})
	}
	wg.Go(func() { lists[procs], errs[procs] = acquireAll(ctx, s, "shared", "parent", 10) })
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	requireEachOnce(t, n, lists...)
	t.Logf("jobs per process: parent %d, children %d %d %d", len(lists[procs]), len(lists[0]), len(lists[1]), len(lists[2]))
}

// TestMigrateUnknownVersion: a database a newer docket migrated further
// (storetest.RunUnknownMigration).
func TestMigrateUnknownVersion(t *testing.T) {
	t.Parallel()
	s := open(t).(*sqlite.Store)
	storetest.RunUnknownMigration(t, s, func(version int, name string) {
		_, err := s.DB().ExecContext(t.Context(),
			`INSERT INTO docket_migrations (version, name, applied_at) VALUES (?, ?, ?)`, version, name, time.Now().UnixMicro())
		require.NoError(t, err)
	})
}

// TestOpenSaysWhyItCannot: SQLite's own message for a file it cannot open
// is "unable to open database file (14)", whatever the reason; Open adds
// the reason (a directory that does not exist, a directory given as the
// file). A directory that cannot be written is the third (checked by
// hand on a read-only mount: root writes any mode, so a test cannot).
func TestOpenSaysWhyItCannot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for path, want := range map[string]string{
		filepath.Join(dir, "no", "such", "docket.db"): "directory " + filepath.Join(dir, "no", "such") + ": no such file or directory",
		dir: dir + " is a directory, not a database file",
	} {
		_, err := sqlite.Open(t.Context(), path, store.Options{})
		require.ErrorContains(t, err, want, path)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "the checks left a file behind")
}

// TestOpenWhileAnotherWrites: the first open of a new file turns it to
// WAL mode, which takes SQLite's exclusive lock. While another connection
// holds the write lock of a file still in rollback mode (another process
// starting on the same new file: two docket serve, or a serve and docket
// migrate up, started together), SQLite refuses that at once with
// SQLITE_BUSY, without waiting in its busy handler (a one-in-a-few-hundred
// failure of such starts, "database is locked"). Open waits for the
// write to end instead.
func TestOpenWhileAnotherWrites(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "docket.db")
	other, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	_, err = other.ExecContext(ctx, `CREATE TABLE t (x INTEGER)`)
	require.NoError(t, err)
	tx, err := other.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `INSERT INTO t VALUES (1)`)
	require.NoError(t, err)

	opened := make(chan error, 1)
	go func() {
		s, err := sqlite.Open(ctx, path, store.Options{})
		if err == nil {
			err = s.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		t.Fatalf("Open returned while another connection held the write lock: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, tx.Commit())
	require.NoError(t, <-opened)
	require.NoError(t, other.Close())
	s := openPath(t, path)
	var mode string
	require.NoError(t, s.DB().QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode))
	require.Equal(t, "wal", mode)
}

// TestPingWhileWriting: Ping answers at once while a write transaction
// holds the writer (its one connection): the database answers, it is
// busy. Ping waited for the writer, so under a steady write load /healthz
// (2 s) said "unreachable" and answered 503 on a working server. A closed
// store still fails it.
func TestPingWhileWriting(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "docket.db")
	s, err := sqlite.Open(context.Background(), path, store.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "CREATE TABLE ping_hold (x INTEGER)")
	require.NoError(t, err)
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	require.NoError(t, s.Ping(pctx), "the writer is busy, not gone")
	require.NoError(t, tx.Rollback())
	require.NoError(t, s.Ping(ctx))
	require.NoError(t, s.Close())
	require.Error(t, s.Ping(ctx))
}
