package postgres

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// TestBatchPlansCached: the statements a batch of takes or judgments
// sends with its rows' own (the pool counter's count of the batch, the
// batch's judgments, the judgments of the units it brought to their
// target) are planned five times on a connection and then run on one
// cached generic plan under plan_cache_mode auto, for batches of any
// size. (Not the locks of its quality states and runs, which keep plain
// arrays: on this test's tables both were planned at all 24 of 24
// executions.) A statement whose custom plan sees how many ids
// the batch has costs a small batch below the generic plan (planned for
// ten), and PostgreSQL keeps planning it: the take's count and the
// reached units' judgments were planned at about a third of their
// executions in the crowd benchmark (docs/benchmarks.md, "Seventh round:
// PostgreSQL's executor per judgment").
func TestBatchPlansCached(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pools := planPools(t, b, 3_000, func(int, int) *store.UnitInsertParams {
		return &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}
	})
	// A third of the units judged three times, by 300 of 3,000 contributors.
	_, err := b.s.Pool().Exec(b.ctx, `
		UPDATE docket_units SET slots_taken = 3, judgment_count = 3 WHERE pick_key % 3 = 0;
		INSERT INTO docket_contributors (id, external_id, state, created_at, updated_at)
			SELECT gen_random_uuid(), 'x' || g, 'active', now(), now() FROM generate_series(0, 2999) AS g;
		INSERT INTO docket_assignments (id, unit_id, pool_id, contributor_id, state, started_at, expires_at, heartbeat_at)
			SELECT gen_random_uuid(), u.id, u.pool_id, c.id, 'SUBMITTED', now(), now(), now()
			FROM (SELECT id, pool_id, row_number() OVER () AS rn FROM docket_units WHERE slots_taken = 3) u
			JOIN (SELECT id, row_number() OVER () - 1 AS cn FROM docket_contributors) c
				ON c.cn IN (u.rn % 300, (u.rn + 1) % 300, (u.rn + 2) % 300);
		INSERT INTO docket_judgments (id, assignment_id, unit_id, pool_id, contributor_id, data, golden, started_at, submitted_at)
			SELECT gen_random_uuid(), id, unit_id, pool_id, contributor_id, '{}', false, started_at, now() FROM docket_assignments;
		ANALYZE docket_units; ANALYZE docket_assignments; ANALYZE docket_judgments`)
	require.NoError(t, err)
	_, err = b.s.Pool().Exec(b.ctx, `INSERT INTO docket_pool_contributors (pool_id, contributor_id, updated_at)
		SELECT p, c.id, now() FROM docket_contributors c, unnest($1::uuid[]) AS p`, pools)
	require.NoError(t, err)
	_, err = b.s.Pool().Exec(b.ctx, `ANALYZE docket_pool_contributors`)
	require.NoError(t, err)
	ids := func(table string, n int) []uuid.UUID {
		rs, err := b.s.Pool().Query(b.ctx, `SELECT id FROM `+table+` ORDER BY random() LIMIT $1`, n)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rs, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		return out
	}

	for _, tc := range []struct {
		name    string
		sql     positional
		indexes []string // the plan's
		args    func(n int) pgx.NamedArgs
	}{
		{"take count", takeCountSQL, []string{"docket_assignments_pkey"}, func(n int) pgx.NamedArgs {
			return pgx.NamedArgs{"ids": ids("docket_assignments", n), "pool": pools[0], "shard": 0}
		}},
		// The judgment batch's one statement (its arrays as (SELECT @x)
		// already), on ids that match nothing.
		{"judgment batch", judgmentInsertBatchSQL, []string{"docket_assignments_pkey"}, func(n int) pgx.NamedArgs {
			ids, assignments, contributors := make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n)
			data, now := make([]string, n), make([]time.Time, n)
			for k := range n {
				ids[k], assignments[k], contributors[k] = uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
				data[k], now[k] = `{}`, testBase
			}
			return pgx.NamedArgs{"ids": ids, "assignments": assignments, "contributors": contributors, "data": data,
				"now": now, "pool": pools[0], "shard": 0}
		}},
		{"judgments reached", judgmentsReachedSQL, []string{"docket_units_pkey", "docket_judgments_unit"}, func(n int) pgx.NamedArgs {
			return pgx.NamedArgs{"units": ids("docket_units", n)}
		}},
	} {
		// The plan walks primary keys (and a unit's judgments by unit),
		// custom and generic.
		for _, mode := range []string{"auto", "force_generic_plan"} {
			plan := explainMode(t, b, mode, tc.sql.sql, tc.sql.args(tc.args(3))...)
			t.Logf("%s (%s):\n%s", tc.name, mode, plan)
			for _, index := range tc.indexes {
				require.Contains(t, plan, index, "%s (%s)", tc.name, mode)
			}
			for _, table := range []string{"docket_units", "docket_assignments", "docket_judgments", "docket_pool_contributors"} {
				require.NotContains(t, plan, "Seq Scan on "+table+" ", "%s (%s)", tc.name, mode)
			}
		}
		// Batches of 1 to 8 rows.
		const runs = 24
		generic, custom := preparedPlans(t, b, tc.sql.sql, runs, func(i int) []any { return tc.sql.args(tc.args(1 + i%8)) })
		t.Logf("%s: %d generic, %d custom plans of %d runs", tc.name, generic, custom, runs)
		assert.Equal(t, int64(5), custom, "%s: custom plans", tc.name)
		assert.Equal(t, int64(runs-5), generic, "%s: generic plans", tc.name)
	}
}

// preparedPlans runs stmt runs times, with args(i) the i-th time, on a
// connection of its own (a prepared statement's plans are its
// connection's) in a transaction rolled back, and returns how many
// generic and custom plans PostgreSQL made for it there.
func preparedPlans(t *testing.T, b *bundle, stmt string, runs int, args func(i int) []any) (generic, custom int64) {
	t.Helper()
	conn, err := pgx.Connect(b.ctx, b.url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(b.ctx) }()
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	for i := range runs {
		rs, err := tx.Query(b.ctx, stmt, args(i)...)
		require.NoError(t, err, "run %d", i)
		rs.Close()
		require.NoError(t, rs.Err(), "run %d", i)
	}
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
		stmt).Scan(&generic, &custom))
	return generic, custom
}
