package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/storetest"
	"github.com/docket-run/docket/internal/testdb"
)

// testBase is the suite's fixed "now".
var testBase = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// openAt opens a store on url, closed when the test ends.
func openAt(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// bundle is what the postgres-specific tests work with.
type bundle struct {
	ctx context.Context
	s   *Store
	url string
}

// setup opens a migrated store on a fresh schema.
func setup(t testing.TB) *bundle {
	t.Helper()
	u := testdb.PostgresURL(t)
	s := openAt(t, u)
	ctx := context.Background()
	_, err := s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)
	return &bundle{ctx: ctx, s: s, url: u}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return setup(t).s
	})
}

func newJob(queue string) *store.JobInsertParams {
	return &store.JobInsertParams{
		ID:          uuid.Must(uuid.NewV7()),
		Type:        "email",
		Queue:       queue,
		Payload:     json.RawMessage(`{"to":"a@example.com"}`),
		State:       job.StateQueued,
		MaxAttempts: 3,
	}
}

func newJobs(queue string, n int) []*store.JobInsertParams {
	ps := make([]*store.JobInsertParams, n)
	for i := range ps {
		ps[i] = newJob(queue)
	}
	return ps
}

func (b *bundle) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.s.Pool().QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

func (b *bundle) outbox(t testing.TB) []*store.OutboxEvent {
	t.Helper()
	evs, err := b.s.OutboxList(b.ctx, &store.OutboxListParams{Limit: 1000})
	require.NoError(t, err)
	return evs
}

// TestInsertCopyAndUnnest inserts a batch large enough for COPY and a small
// one through the unnest INSERT and checks both store the same thing.
func TestInsertCopyAndUnnest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// 1200 rows take several of copyReader's chunks.
	for _, n := range []int{copyMinJobs + 150, 1200, 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			q := "q" + fmt.Sprint(n)
			ps := newJobs(q, n)
			ps[1].Priority, ps[1].RunAt, ps[1].Timeout = 3, testBase.Add(time.Hour), 1500*time.Millisecond
			ps[2].State = job.StateCreated
			before := b.outbox(t)
			res, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: testBase})
			require.NoError(t, err)
			require.Len(t, res, n)
			for i, r := range res {
				require.False(t, r.Duplicate)
				require.Equal(t, ps[i].ID, r.Job.ID)
				got, err := b.s.JobGet(b.ctx, ps[i].ID)
				require.NoError(t, err)
				require.JSONEq(t, string(got.Payload), string(r.Job.Payload))
				got.Payload, r.Job.Payload = nil, nil
				require.Equal(t, got, r.Job, "returned row %d differs from the stored one", i)
			}
			row := res[1].Job
			require.Equal(t, 3, row.Priority)
			require.Equal(t, testBase.Add(time.Hour), row.RunAt)
			require.Equal(t, 1500*time.Millisecond, row.Timeout)
			require.Equal(t, job.StateCreated, res[2].Job.State)
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM docket_jobs WHERE id = $1 AND sort_at = $2`,
				row.ID, row.RunAt.Add(3*store.PriorityAgingDefault)))

			evs := b.outbox(t)[len(before):]
			require.Len(t, evs, 1)
			var d job.StateChangedData
			require.NoError(t, json.Unmarshal(evs[0].Data, &d))
			require.Len(t, d.Transitions, n)
		})
	}
}

// TestInsertCopyAtomic: a COPY batch in its own transaction (its BEGIN sent
// with the COPY, its COMMIT with the outbox row) writes nothing when the
// COPY fails or when the outbox row does, and leaves its connection usable.
func TestInsertCopyAtomic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// One connection, so a connection left in a transaction would fail the
	// next insert instead of being replaced.
	s := openAt(t, b.url+"&pool_max_conns=1")
	n := copyMinJobs + 10
	stored := func(ps []*store.JobInsertParams) int {
		ids := make([]uuid.UUID, len(ps))
		for i, p := range ps {
			ids[i] = p.ID
		}
		return b.count(t, `SELECT count(*) FROM docket_jobs WHERE id = ANY($1)`, ids)
	}
	outboxBefore := len(b.outbox(t))
	// The failed batches roll back on their connection, which the pool
	// keeps (pgxpool would replace one left in a transaction, even at one
	// connection: the same backend afterwards shows it was left clean).
	backend := func() int {
		var pid int
		require.NoError(t, s.Pool().QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		return pid
	}
	pid := backend()

	// The COPY fails on its last row: a primary key taken by its first.
	ps := newJobs("atomic", n)
	ps[n-1].ID = ps[0].ID
	_, err := s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: testBase})
	require.ErrorContains(t, err, "insert jobs: copy")
	require.Zero(t, stored(ps[:n-1]))
	require.Equal(t, pid, backend(), "the connection was kept after a failed COPY")

	// A job of a streamed batch fails its preparation after the first
	// chunks were sent: the COPY is abandoned on the same connection.
	ps = newJobs("atomic", 3000)
	refused := errors.New("refused")
	_, err = s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: testBase, Prepare: func(i int) error {
		if i == 2500 {
			return refused
		}
		return nil
	}})
	require.ErrorIs(t, err, refused)
	require.Zero(t, stored(ps))
	require.Equal(t, pid, backend(), "the connection was kept after an abandoned COPY")

	// The outbox row fails after a COPY that succeeded.
	_, err = b.s.Pool().Exec(b.ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'outbox refused'; END$$;
		CREATE TRIGGER refuse BEFORE INSERT ON docket_outbox FOR EACH ROW EXECUTE FUNCTION refuse()`)
	require.NoError(t, err)
	ps = newJobs("atomic", n)
	_, err = s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: testBase})
	require.ErrorContains(t, err, "outbox refused")
	require.Zero(t, stored(ps))
	require.Len(t, b.outbox(t), outboxBefore)
	require.Equal(t, pid, backend(), "the connection was kept after a failed outbox row")

	_, err = b.s.Pool().Exec(b.ctx, `DROP TRIGGER refuse ON docket_outbox`)
	require.NoError(t, err)
	res, err := s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: testBase})
	require.NoError(t, err)
	require.Len(t, res, n)
	require.Equal(t, n, stored(ps))
	require.Len(t, b.outbox(t), outboxBefore+1)
}

// TestCopyColumnTypes: copyReader writes each column in the binary form of
// the type it expects; a migration that changes one must change both.
func TestCopyColumnTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := map[string]string{
		"id": "uuid", "job_type": "text", "queue": "text", "priority": "smallint", "payload": "jsonb",
		"state": "text", "max_attempts": "integer", "run_at": "timestamp with time zone",
		"sort_at": "timestamp with time zone", "timeout_ms": "bigint",
		"created_at": "timestamp with time zone", "updated_at": "timestamp with time zone",
	}
	require.Len(t, copyColumns, len(want))
	for _, col := range copyColumns {
		var typ string
		require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT data_type FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = 'docket_jobs' AND column_name = $1`, col).Scan(&typ), col)
		require.Equal(t, want[col], typ, col)
	}
	// Values the columns cannot hold are refused, not wrapped.
	ps := newJobs("range", copyMinJobs+1)
	ps[3].Priority = 1 << 15
	_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: testBase})
	require.ErrorContains(t, err, "priority 32768 out of range")
}

// TestInsertTx inserts in a caller's transaction, pgx and database/sql,
// small (unnest) and large (COPY, pgx only) batches.
func TestInsertTx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db, err := sql.Open("pgx", b.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	type txer struct {
		begin    func(t *testing.T) any
		rollback func(tx any) error
		commit   func(tx any) error
	}
	kinds := map[string]txer{
		"pgx": {
			begin: func(t *testing.T) any {
				tx, err := b.s.Pool().Begin(b.ctx)
				require.NoError(t, err)
				return tx
			},
			rollback: func(tx any) error { return tx.(pgx.Tx).Rollback(b.ctx) },
			commit:   func(tx any) error { return tx.(pgx.Tx).Commit(b.ctx) },
		},
		"sql": {
			begin: func(t *testing.T) any {
				tx, err := db.BeginTx(b.ctx, nil)
				require.NoError(t, err)
				return tx
			},
			rollback: func(tx any) error { return tx.(*sql.Tx).Rollback() },
			commit:   func(tx any) error { return tx.(*sql.Tx).Commit() },
		},
	}
	for name, k := range kinds {
		for _, n := range []int{3, copyMinJobs + 10} {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				q := fmt.Sprintf("%s-%d", name, n)
				insert := func(tx any, ps []*store.JobInsertParams) []*store.JobInsertResult {
					res, err := b.s.JobInsertManyTx(b.ctx, tx, &store.JobInsertManyParams{Jobs: ps, Now: testBase})
					require.NoError(t, err)
					require.Len(t, res, len(ps))
					return res
				}
				jobsIn := func() int {
					return b.count(t, `SELECT count(*) FROM docket_jobs WHERE queue = $1`, q)
				}
				outboxBefore := len(b.outbox(t))

				tx := k.begin(t)
				res := insert(tx, newJobs(q, n))
				require.Equal(t, job.StateQueued, res[0].Job.State)
				require.NoError(t, k.rollback(tx))
				require.Zero(t, jobsIn(), "rolled back")
				require.Len(t, b.outbox(t), outboxBefore, "rolled back outbox")

				tx = k.begin(t)
				ps := newJobs(q, n)
				ps[0].IdempotencyKey = q + "-key"
				dup := newJob(q)
				dup.IdempotencyKey = ps[0].IdempotencyKey
				res = insert(tx, append(ps, dup))
				require.False(t, res[0].Duplicate)
				require.True(t, res[n].Duplicate)
				require.Equal(t, ps[0].ID, res[n].Job.ID)
				require.NoError(t, k.commit(tx))
				require.Equal(t, n, jobsIn(), "committed")
				require.Len(t, b.outbox(t), outboxBefore+1, "committed outbox")
			})
		}
	}

	t.Run("Unsupported", func(t *testing.T) {
		_, err := b.s.JobInsertManyTx(b.ctx, "not a tx", &store.JobInsertManyParams{Jobs: newJobs("x", 1), Now: testBase})
		require.ErrorIs(t, err, store.ErrUnsupportedTx)
	})
}

// TestIdempotencyKeyRace: concurrent inserters of one key make one row and
// all get it back.
func TestIdempotencyKeyRace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 100
	var (
		wg      sync.WaitGroup
		results = make([]*store.JobInsertResult, n)
		errs    = make([]error, n)
		start   = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			p := newJob("race")
			p.IdempotencyKey = "the-key"
			<-start
			res, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{p}, Now: testBase})
			if err == nil {
				results[i] = res[0]
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	var fresh int
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, results[0].Job.ID, results[i].Job.ID)
		if !results[i].Duplicate {
			fresh++
		}
	}
	require.Equal(t, 1, fresh, "exactly one inserter inserted")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM docket_jobs WHERE idempotency_key = 'the-key'`))
	require.Len(t, b.outbox(t), 1)
}

// waitFor reads ch until want arrives, failing after a deadline; it returns
// the payloads seen before it.
func waitFor(t *testing.T, ch <-chan string, want string) []string {
	t.Helper()
	var seen []string
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == want {
				return seen
			}
			seen = append(seen, got)
		case <-deadline:
			t.Fatalf("no wakeup %q within 10s; saw %q", want, seen)
		}
	}
}

// TestListen: wakeups arrive after commit, not before; cancel requests wake
// the holder; a lost listener connection reconnects and says so.
func TestListen(t *testing.T) {
	b := setup(t)
	avail, stop := b.s.Subscribe(store.TopicJobAvailable)
	defer stop()
	cancels, stopCancels := b.s.Subscribe(store.TopicJobCancel)
	defer stopCancels()
	q := "listen-" + uuid.NewString()
	marker := func(payload string) {
		_, err := b.s.Pool().Exec(b.ctx, `SELECT pg_notify($1, $2)`, channelJobAvailable, payload)
		require.NoError(t, err)
	}

	tx, err := b.s.Pool().Begin(b.ctx)
	require.NoError(t, err)
	_, err = b.s.JobInsertManyTx(b.ctx, tx, &store.JobInsertManyParams{Jobs: newJobs(q, 2), Now: testBase})
	require.NoError(t, err)
	// Notifications arrive in commit order: the marker, committed after the
	// insert but before its commit, comes first.
	m := "marker-" + uuid.NewString()
	marker(m)
	require.NotContains(t, waitFor(t, avail, m), q, "wakeup before commit")
	require.NoError(t, tx.Commit(b.ctx))
	waitFor(t, avail, q)

	rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: q, Max: 1, Owner: "n", LeaseDuration: time.Minute, Now: testBase})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	_, err = b.s.JobCancel(b.ctx, &store.JobCancelParams{ID: rows[0].ID, Now: testBase})
	require.NoError(t, err)
	waitFor(t, cancels, rows[0].ID.String())

	// Kill the listener's connection: it comes back and publishes "".
	pid := b.s.listenerPID()
	require.NotZero(t, pid)
	_, err = b.s.Pool().Exec(b.ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	waitFor(t, avail, "")
	waitFor(t, cancels, "")
	require.NotEqual(t, pid, b.s.listenerPID())
	_, err = b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: newJobs(q, 1), Now: testBase})
	require.NoError(t, err)
	waitFor(t, avail, q)
}

// TestAcquirePlan checks at ~100k rows that acquisition walks the acquire
// index and updates the rows it locked by their ctid, and that finishing a
// batch joins through the primary key.
func TestAcquirePlan(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 100k jobs")
	}
	t.Parallel()
	b := setup(t)
	const total, batch = 100_000, 5_000
	queues := []string{"default", "other", "third", "fourth"}
	for i := range total / batch {
		ps := newJobs(queues[i%len(queues)], batch)
		for j, p := range ps {
			p.Priority = j % 4
		}
		_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: testBase})
		require.NoError(t, err)
	}
	_, err := b.s.Pool().Exec(b.ctx, `ANALYZE docket_jobs`)
	require.NoError(t, err)

	plan := b.explain(t, acquireSQL, "default", testBase, 100, "node", testBase.Add(time.Minute))
	t.Logf("acquire plan:\n%s", plan)
	require.Contains(t, plan, "docket_jobs_acquire")
	require.Contains(t, plan, "Tid Scan on docket_jobs")
	require.NotContains(t, plan, "Seq Scan on docket_jobs")
	require.NotContains(t, plan, "Hash Join")

	// Acquire and finish a batch of 2,000 for real, and look at the
	// finishing plan.
	start := time.Now()
	rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "default", Max: 2000, Owner: "node", LeaseDuration: time.Minute, Now: testBase})
	require.NoError(t, err)
	require.Len(t, rows, 2000)
	acquired := time.Since(start)
	fs := make([]*store.JobFinishParams, len(rows))
	for i, r := range rows {
		fs[i] = &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess}
	}
	start = time.Now()
	ok, err := b.s.JobFinishMany(b.ctx, &store.JobFinishManyParams{Jobs: fs, Now: testBase})
	require.NoError(t, err)
	finished := time.Since(start)
	for _, to := range ok {
		require.Equal(t, job.StateSuccess, to)
	}
	t.Logf("acquire 2000: %v, finish 2000: %v", acquired, finished)

	// The finishing statement reaches each job through the primary key,
	// in the custom plan and in the generic one prepared statements
	// switch to.
	rows, err = b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "other", Max: 2000, Owner: "node", LeaseDuration: time.Minute, Now: testBase})
	require.NoError(t, err)
	require.Len(t, rows, 2000)
	finishArgs := func() []any {
		n := len(rows)
		var (
			ids      = make([]uuid.UUID, n)
			attempts = make([]int, n)
			states   = make([]string, n)
			outcomes = make([]string, n)
			results  = make([]*string, n)
			errs     = make([]string, n)
			times    = make([]time.Time, n)
		)
		for i, r := range rows {
			ids[i], attempts[i], states[i], outcomes[i], times[i] = r.ID, r.Attempt, "SUCCESS", "success", testBase
		}
		return []any{ids, attempts, states, outcomes, results, errs, times, times, testBase}
	}
	for _, mode := range []string{"auto", "force_generic_plan"} {
		tx, err := b.s.Pool().Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		_, err = tx.Exec(b.ctx, "SET LOCAL plan_cache_mode = "+mode)
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, "PREPARE finish_plan AS "+finishAnySQL)
		require.NoError(t, err)
		plan := explainTx(t, tx, "EXECUTE finish_plan", finishArgs()...)
		_, err = tx.Exec(b.ctx, "DEALLOCATE finish_plan")
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(b.ctx))
		t.Logf("finish plan (%s):\n%s", mode, plan)
		require.Contains(t, plan, "docket_jobs_pkey")
		require.NotContains(t, plan, "Seq Scan on docket_jobs")
		require.NotContains(t, plan, "docket_jobs_state_id")
		require.NotContains(t, plan, "docket_jobs_lease_expiry")
		require.NotContains(t, plan, "Hash Join")
	}
}

// explainTx returns the EXPLAIN text of EXECUTE name(args), the arguments
// spelled as literals (EXPLAIN EXECUTE takes no bind parameters).
func explainTx(t *testing.T, tx pgx.Tx, execute string, args ...any) string {
	t.Helper()
	lits := make([]string, len(args))
	for i, a := range args {
		var lit string
		require.NoError(t, tx.QueryRow(context.Background(), "SELECT quote_nullable($1::text)", textOf(a)).Scan(&lit))
		lits[i] = lit
	}
	rs, err := tx.Query(context.Background(), "EXPLAIN "+execute+"("+strings.Join(lits, ", ")+")")
	require.NoError(t, err)
	var lines []string
	for rs.Next() {
		var line string
		require.NoError(t, rs.Scan(&line))
		lines = append(lines, line)
	}
	require.NoError(t, rs.Err())
	return strings.Join(lines, "\n")
}

// textOf spells a finish argument in PostgreSQL's text input syntax.
func textOf(a any) string {
	list := func(n int, elem func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = elem(i)
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	ts := func(t time.Time) string { return t.Format(time.RFC3339Nano) }
	switch v := a.(type) {
	case []uuid.UUID:
		return list(len(v), func(i int) string { return v[i].String() })
	case []int:
		return list(len(v), func(i int) string { return fmt.Sprint(v[i]) })
	case []string:
		return list(len(v), func(i int) string { return `"` + v[i] + `"` })
	case []*string:
		return list(len(v), func(i int) string { return "NULL" })
	case []time.Time:
		return list(len(v), func(i int) string { return ts(v[i]) })
	case time.Time:
		return ts(v)
	}
	panic(fmt.Sprintf("textOf %T", a))
}

// explain returns the EXPLAIN text of query with args.
func (b *bundle) explain(t *testing.T, query string, args ...any) string {
	t.Helper()
	rs, err := b.s.Pool().Query(b.ctx, "EXPLAIN "+query, args...)
	require.NoError(t, err)
	var lines []string
	for rs.Next() {
		var line string
		require.NoError(t, rs.Scan(&line))
		lines = append(lines, line)
	}
	require.NoError(t, rs.Err())
	return strings.Join(lines, "\n")
}

// TestMigrations: up, down (all), up again; concurrent migrators apply
// each migration once.
func TestMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openAt(t, testdb.PostgresURL(t))
	tableExists := func() bool {
		var ok bool
		require.NoError(t, s.Pool().QueryRow(ctx, `SELECT to_regclass('docket_jobs') IS NOT NULL`).Scan(&ok))
		return ok
	}
	status := func() []store.Migration {
		ms, err := s.MigrationStatus(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, ms)
		return ms
	}
	for _, m := range status() {
		require.False(t, m.Applied)
	}

	var wg sync.WaitGroup
	applied := make([][]store.Migration, 5)
	errs := make([]error, len(applied))
	for i := range applied {
		wg.Go(func() {
			applied[i], errs[i] = s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
		})
	}
	wg.Wait()
	var n int
	for i, ms := range applied {
		require.NoError(t, errs[i])
		n += len(ms)
	}
	require.Len(t, status(), n, "each migration applied exactly once")
	for _, m := range status() {
		require.True(t, m.Applied)
		require.False(t, m.AppliedAt.IsZero())
	}
	require.True(t, tableExists())

	down, err := s.Migrate(ctx, &store.MigrateParams{Direction: store.Down})
	require.NoError(t, err)
	require.Len(t, down, n)
	require.False(t, tableExists())
	for _, m := range status() {
		require.False(t, m.Applied)
	}

	up, err := s.Migrate(ctx, &store.MigrateParams{Direction: store.Up, Steps: 1})
	require.NoError(t, err)
	require.Len(t, up, 1)
	require.Equal(t, 1, up[0].Version)
	_, err = s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)
	require.True(t, tableExists())
	again, err := s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)
	require.Empty(t, again)
}

// BenchmarkBurnDown works 100k pre-inserted no-op jobs to zero with
// workers acquiring and finishing batches (the PERF-NOTES burn-down).
func BenchmarkBurnDown(b *testing.B) {
	for _, batch := range []int{100, 2000} {
		b.Run(fmt.Sprint(batch), func(b *testing.B) {
			const total, workers = 100_000, 2
			for b.Loop() {
				b.StopTimer()
				bu := setup(b)
				for range total / 5000 {
					_, err := bu.s.JobInsertMany(bu.ctx, &store.JobInsertManyParams{Jobs: newJobs("default", 5000), Now: testBase})
					require.NoError(b, err)
				}
				_, err := bu.s.Pool().Exec(bu.ctx, `ANALYZE docket_jobs`)
				require.NoError(b, err)
				b.StartTimer()
				start := time.Now()
				var wg sync.WaitGroup
				var acqDur, finDur atomic.Int64
				for w := range workers {
					wg.Go(func() {
						for {
							t0 := time.Now()
							rows, err := bu.s.JobAcquire(bu.ctx, &store.JobAcquireParams{
								Queue: "default", Max: batch, Owner: fmt.Sprint("w", w), LeaseDuration: time.Minute, Now: testBase,
							})
							if err != nil || len(rows) == 0 {
								if err != nil {
									b.Error(err)
								}
								return
							}
							fs := make([]*store.JobFinishParams, len(rows))
							for i, r := range rows {
								fs[i] = &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess}
							}
							t1 := time.Now()
							if _, err := bu.s.JobFinishMany(bu.ctx, &store.JobFinishManyParams{Jobs: fs, Now: testBase}); err != nil {
								b.Error(err)
								return
							}
							acqDur.Add(int64(t1.Sub(t0)))
							finDur.Add(int64(time.Since(t1)))
						}
					})
				}
				wg.Wait()
				b.Logf("time in acquire %v, in finish %v (summed over workers)",
					time.Duration(acqDur.Load()), time.Duration(finDur.Load()))
				b.ReportMetric(float64(total)/time.Since(start).Seconds(), "jobs/s")
			}
		})
	}
}

// TestBatchesDoNotDeadlock races batches over the same jobs in opposite
// orders: finish against finish (completer and rescuer) and against
// heartbeat, and inserts sharing idempotency keys. Rows are locked in a
// canonical order, so none of them may fail with a deadlock.
func TestBatchesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 200
	reversed := func(refs []job.Ref) []job.Ref {
		out := make([]job.Ref, len(refs))
		for i, r := range refs {
			out[len(refs)-1-i] = r
		}
		return out
	}
	finish := func(refs []job.Ref) func() error {
		return func() error {
			fs := make([]*store.JobFinishParams, len(refs))
			for i, r := range refs {
				fs[i] = &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: job.StateSuccess}
			}
			_, err := b.s.JobFinishMany(b.ctx, &store.JobFinishManyParams{Jobs: fs, Now: testBase})
			return err
		}
	}
	heartbeat := func(refs []job.Ref) func() error {
		return func() error {
			_, err := b.s.JobHeartbeat(b.ctx, &store.JobHeartbeatParams{Jobs: refs, LeaseDuration: time.Minute, Now: testBase})
			return err
		}
	}
	race := func(fs ...func() error) {
		var wg sync.WaitGroup
		errs := make([]error, len(fs))
		for i, f := range fs {
			wg.Go(func() { errs[i] = f() })
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
	}
	for round := range 5 {
		q := fmt.Sprint("deadlock-", round)
		_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: newJobs(q, n), Now: testBase})
		require.NoError(t, err)
		rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: q, Max: n, Owner: "n", LeaseDuration: time.Minute, Now: testBase})
		require.NoError(t, err)
		refs := make([]job.Ref, len(rows))
		for i, r := range rows {
			refs[i] = job.Ref{ID: r.ID, Attempt: r.Attempt}
		}
		race(heartbeat(refs), heartbeat(reversed(refs)), finish(reversed(refs)), finish(refs))

		keyed := func(reverse bool) func() error {
			return func() error {
				ps := newJobs(q, 50)
				for i, p := range ps {
					k := i
					if reverse {
						k = len(ps) - 1 - i
					}
					p.IdempotencyKey = fmt.Sprint(q, "-", k)
				}
				_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: ps, Now: testBase})
				return err
			}
		}
		race(keyed(false), keyed(true), keyed(false), keyed(true))
	}
}

// TestAttemptHistoryAfterManualRetry: a manual retry gives a fresh budget
// of attempts but attempt numbers keep counting (they fence leases); both
// runs are kept, oldest first.
func TestAttemptHistoryAfterManualRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newJob("history")
	_, err := b.s.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{p}, Now: testBase})
	require.NoError(t, err)
	run := func(now time.Time, owner string, to job.State, attempt int) {
		rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "history", Max: 1, Owner: owner, LeaseDuration: time.Minute, Now: now})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, attempt, rows[0].Attempt)
		require.Equal(t, 1, rows[0].AttemptsUsed())
		ok, err := b.s.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: now.Add(time.Second), Jobs: []*store.JobFinishParams{{
			ID: p.ID, Attempt: attempt, State: to, Error: string(to),
		}}})
		require.NoError(t, err)
		require.Equal(t, []job.State{to}, ok)
	}
	run(testBase, "node-a", job.StateDead, 1)
	_, err = b.s.JobRetry(b.ctx, &store.JobRetryParams{ID: p.ID, Now: testBase.Add(time.Minute)})
	require.NoError(t, err)
	run(testBase.Add(2*time.Minute), "node-b", job.StateSuccess, 2)

	attempts, err := b.s.JobAttemptList(b.ctx, p.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 2)
	require.Equal(t, "node-a", attempts[0].Node)
	require.Equal(t, job.OutcomeError, attempts[0].Outcome)
	require.Equal(t, "DEAD", attempts[0].Error)
	require.Equal(t, "node-b", attempts[1].Node)
	require.Equal(t, job.OutcomeSuccess, attempts[1].Outcome)
	require.Empty(t, attempts[1].Error)
	for i, a := range attempts {
		require.Equal(t, i+1, a.Attempt)
		require.Equal(t, time.Second, a.Duration())
	}
}

// TestQueryExecModes: the modes in which pgx does not ask the server for
// parameter types are refused at Open, naming the parameter and what to
// use instead; in the modes that describe, the statements whose
// parameters only the server's description types (COPY's outbox event as
// bytes, the finishing statement's arrays, a judgment's JSON) work. The
// whole conformance suite passes in describe_exec as well (run once by
// hand: storetest.Run with "&default_query_exec_mode=describe_exec").
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"exec", "simple_protocol"} {
		_, err := Open(context.Background(), testdb.PostgresURL(t)+"&default_query_exec_mode="+mode, store.Options{})
		require.Error(t, err, mode)
		require.ErrorContains(t, err, "default_query_exec_mode="+mode+" is not supported")
		require.ErrorContains(t, err, "describe_exec")
	}
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := openAt(t, testdb.PostgresURL(t)+"&default_query_exec_mode="+mode)
			_, err := s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
			require.NoError(t, err)
			// 1,200 jobs go through COPY, 3 through the unnest INSERT.
			_, err = s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: newJobs("modes", 1200), Now: testBase})
			require.NoError(t, err)
			_, err = s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: newJobs("modes", 3), Now: testBase})
			require.NoError(t, err)
			rows, err := s.JobAcquire(ctx, &store.JobAcquireParams{Queue: "modes", Max: 2000, Owner: "n1", Now: testBase, LeaseDuration: time.Minute})
			require.NoError(t, err)
			require.Len(t, rows, 1203)
			fins := make([]*store.JobFinishParams, len(rows))
			for i, r := range rows {
				fins[i] = &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: job.StateSuccess, Result: json.RawMessage(`{"ok":true}`)}
			}
			applied, err := s.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: fins, Now: testBase})
			require.NoError(t, err)
			for i, st := range applied {
				require.Equal(t, job.StateSuccess, st, "job %d", i)
			}
			evs, err := s.OutboxList(ctx, &store.OutboxListParams{Limit: 100})
			require.NoError(t, err)
			require.Len(t, evs, 4) // two inserts, the acquisition, the finish
		})
	}
}

// TestMigrateUnknownVersion: a database a newer docket migrated further
// (storetest.RunUnknownMigration).
func TestMigrateUnknownVersion(t *testing.T) {
	b := setup(t)
	storetest.RunUnknownMigration(t, b.s, func(version int, name string) {
		_, err := b.s.Pool().Exec(b.ctx,
			`INSERT INTO docket_migrations (version, name, applied_at) VALUES ($1, $2, now())`, version, name)
		require.NoError(t, err)
	})
}
