package postgres

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/storetest"
)

// TestTakePlan: on a pool of 20,000 units (plus another pool's 20,000),
// a third of them full (40,000 assignments), every take strategy walks its partial index of
// open units (docket_units_open, docket_units_open_pick) or the primary
// key, never a sequential scan of the units, and probes the contributor's
// assignments once per unit walked (no anti-join), in custom and generic plans;
// the reaper walks docket_assignments_active_expiry. Plans are in
// docs/store-plans.md.
func TestTakePlan(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 40k units")
	}
	t.Parallel()
	b := setup(t)
	pools := planPools(t, b, 20_000, func(int, int) *store.UnitInsertParams {
		return &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), RunID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}
	})
	// A third of the units are full: three SUBMITTED assignments each, by
	// 1,000 contributors.
	_, err := b.s.Pool().Exec(b.ctx, `
		UPDATE docket_units SET slots_taken = 3 WHERE pick_key % 3 = 0;
		INSERT INTO docket_contributors (id, external_id, state, created_at, updated_at)
			SELECT gen_random_uuid(), 'x' || g, 'active', now(), now() FROM generate_series(0, 999) AS g;
		INSERT INTO docket_assignments (id, unit_id, pool_id, contributor_id, state, started_at, expires_at, heartbeat_at)
			SELECT gen_random_uuid(), u.id, u.pool_id, c.id, 'SUBMITTED', now(), now(), now()
			FROM (SELECT id, pool_id, row_number() OVER () AS rn FROM docket_units WHERE slots_taken = 3) u
			JOIN (SELECT id, row_number() OVER () - 1 AS cn FROM docket_contributors) c
				ON c.cn IN (u.rn % 1000, (u.rn + 1) % 1000, (u.rn + 2) % 1000);`)
	require.NoError(t, err)
	c, err := b.s.ContributorCreate(b.ctx, &store.ContributorCreateParams{ID: uuid.Must(uuid.NewV7()), ExternalID: "c", Now: testBase})
	require.NoError(t, err)
	for range 50 {
		_, err := b.s.AssignmentTake(b.ctx, &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: pools[0],
			ContributorID: c.ID, Duration: time.Minute, Strategy: crowd.StrategyRandom, Now: testBase})
		require.NoError(t, err)
	}
	_, err = b.s.Pool().Exec(b.ctx, `ANALYZE docket_units; ANALYZE docket_assignments`)
	require.NoError(t, err)

	cands, err := b.s.UnitListAvailable(b.ctx, &store.UnitListAvailableParams{PoolID: pools[0], Limit: 16})
	require.NoError(t, err)
	args := pgx.NamedArgs{"id": uuid.Must(uuid.NewV7()), "pool": pools[0], "contributor": c.ID, "now": testBase,
		"expires": testBase.Add(time.Minute), "shard": 0, "key": int64(1) << 61, "candidates": cands}
	for _, mode := range []string{"auto", "force_generic_plan"} {
		for _, tc := range []struct{ name, sql, index string }{
			{"ordered", fmt.Sprintf(takeOrderedSQL, openUnit), "docket_units_open "},
			{"random", fmt.Sprintf(takeRandomSQL, openUnit), "docket_units_open_pick"},
			{"candidates", fmt.Sprintf(takeCandidatesSQL, openUnit), "docket_units_open"},
			{"golden", fmt.Sprintf(takeOrderedSQL, pickGolden), "docket_units_golden"},
			// A batch's statements (crowd_take_group.go): the same, without the count.
			{"ordered batched", fmt.Sprintf(takeBatchSQL[takeOrderedSQL], openUnit), "docket_units_open "},
			{"random batched", fmt.Sprintf(takeBatchSQL[takeRandomSQL], openUnit), "docket_units_open_pick"},
			{"candidates batched", fmt.Sprintf(takeBatchSQL[takeCandidatesSQL], openUnit), "docket_units_open"},
		} {
			tx, err := b.s.Pool().Begin(b.ctx)
			require.NoError(t, err)
			_, err = tx.Exec(b.ctx, "SET LOCAL plan_cache_mode = "+mode)
			require.NoError(t, err)
			plan := explainIn(t, tx, tc.sql, args)
			require.NoError(t, tx.Rollback(b.ctx))
			t.Logf("take %s (%s):\n%s", tc.name, mode, plan)
			require.Contains(t, plan, tc.index, "take %s (%s)", tc.name, mode)
			require.NotContains(t, plan, "Seq Scan on docket_units", "take %s (%s)", tc.name, mode)
			require.NotContains(t, plan, "Seq Scan on docket_assignments", "take %s (%s)", tc.name, mode)
			// Whether the contributor had a unit is one probe per unit
			// walked, never a join reading their whole history.
			require.NotContains(t, plan, "Anti Join", "take %s (%s)", tc.name, mode)
			require.NotContains(t, plan, "Bitmap Heap Scan on docket_assignments", "take %s (%s)", tc.name, mode)
		}
		// The random pick's two scans (from the key, then wrapped around)
		// are in the plan once each: a plan that copies coalesce(…) into
		// a filter runs each scan, its anti-join probes and its row locks
		// twice per take.
		tx, err := b.s.Pool().Begin(b.ctx)
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, "SET LOCAL plan_cache_mode = "+mode)
		require.NoError(t, err)
		plan := explainIn(t, tx, fmt.Sprintf(takeRandomSQL, openUnit), args)
		require.NoError(t, tx.Rollback(b.ctx))
		require.Equal(t, 2, strings.Count(plan, "using docket_units_open_pick on docket_units"), "take random (%s):\n%s", mode, plan)
	}
	// A batch's count finds its assignments by primary key.
	for _, mode := range []string{"auto", "force_generic_plan"} {
		plan := explainMode(t, b, mode, takeCountSQL.sql, takeCountSQL.args(pgx.NamedArgs{
			"ids": []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())}, "pool": pools[0], "shard": 0})...)
		t.Logf("batch count (%s):\n%s", mode, plan)
		require.Contains(t, plan, "docket_assignments_pkey", mode)
		// The assignments' scan is what this pins; the pool's counter row
		// (a few rows a pool) is read as the planner likes, by a
		// sequential scan once autovacuum's ANALYZE has seen how small
		// the table is.
		require.NotContains(t, plan, "Seq Scan on docket_assignments", mode)
	}
	// Whether the pool has judgable golden units (asked before a take
	// schedules a test question) is docket_units_golden's, in a generic
	// plan too: with golden and the state as parameters it walked the
	// pool's units.
	yes := true
	goldenSQL, goldenArgs := unitListSQL(&store.UnitListParams{PoolID: pools[0], Golden: &yes,
		States: []crowd.UnitState{crowd.UnitJudgable}, Limit: 1})
	for _, mode := range []string{"auto", "force_generic_plan"} {
		plan := explainMode(t, b, mode, goldenSQL, goldenArgs...)
		t.Logf("golden units (%s):\n%s", mode, plan)
		require.Contains(t, plan, "docket_units_golden ", mode)
	}

	// A judgment finds its assignment by primary key, never through the
	// reaper's partial index (every ACTIVE assignment not yet expired),
	// even when that index looks empty, as it does after a vacuum.
	_, err = b.s.Pool().Exec(b.ctx, `UPDATE docket_assignments SET state = 'SUBMITTED' WHERE state = 'ACTIVE'`)
	require.NoError(t, err)
	_, err = b.s.Pool().Exec(b.ctx, `VACUUM ANALYZE docket_assignments`)
	require.NoError(t, err)
	for _, mode := range []string{"auto", "force_generic_plan"} {
		tx, err := b.s.Pool().Begin(b.ctx)
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, "SET LOCAL plan_cache_mode = "+mode)
		require.NoError(t, err)
		plan := explainIn(t, tx, judgmentInsertSQL, pgx.NamedArgs{"id": uuid.Must(uuid.NewV7()), "assignment": uuid.Must(uuid.NewV7()),
			"contributor": c.ID, "data": `{}`, "trust": nil, "now": testBase, "shard": 0})
		require.NoError(t, tx.Rollback(b.ctx))
		t.Logf("judgment insert (%s):\n%s", mode, plan)
		require.Contains(t, plan, "docket_assignments_pkey", mode)
		require.NotContains(t, plan, "docket_assignments_active_expiry", mode)
	}

	// A batch's judgments (crowd_judgment_group.go) find their
	// assignments by primary key from the unnest, in the arrays' order (a
	// nested loop whose outer side is the unnest: a hash join would lock
	// them in the table's order), and lock their units in unit order (a
	// sort under the lock) before the update, in custom and generic plans.
	_, err = b.s.Pool().Exec(b.ctx, `
		INSERT INTO docket_pool_contributors (pool_id, contributor_id, updated_at)
			SELECT p, c.id, now() FROM docket_contributors c, unnest($1::uuid[]) AS p ON CONFLICT DO NOTHING`, pools)
	require.NoError(t, err)
	_, err = b.s.Pool().Exec(b.ctx, `ANALYZE docket_pool_contributors`)
	require.NoError(t, err)
	var ids, assignments, contributors [3]uuid.UUID
	for k := range ids {
		ids[k], assignments[k], contributors[k] = uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), c.ID
	}
	for _, mode := range []string{"auto", "force_generic_plan"} {
		plan := explainMode(t, b, mode, judgmentInsertBatchSQL.sql, judgmentInsertBatchSQL.args(pgx.NamedArgs{
			"ids": ids[:], "assignments": assignments[:], "contributors": contributors[:], "data": []string{`{}`, `{}`, `{}`},
			"now": []time.Time{testBase, testBase, testBase}, "pool": pools[0], "shard": 0})...)
		t.Logf("judgment batch (%s):\n%s", mode, plan)
		require.Contains(t, plan, "docket_assignments_pkey", mode)
		require.NotContains(t, plan, "docket_assignments_active_expiry", mode)
		require.NotContains(t, plan, "Seq Scan", mode)
		require.NotContains(t, plan, "Hash Join", mode)
		require.Regexp(t, `(?s)Update on docket_assignments s .*?Nested Loop .*?->  Function Scan on i .*?->  Index Scan using docket_assignments_pkey on docket_assignments s .*?CTE l`, plan, mode)
		require.Regexp(t, `(?s)CTE l\s+->  LockRows .*?Sort Key: (a\.unit_id|u\.id)\s.*?CTE u`, plan, mode)
		require.Regexp(t, `docket_pool_contributors_pkey on docket_pool_contributors pc  \([^)]*\)\s+Index Cond: \(\(pool_id = s\.pool_id\) AND \(contributor_id = [si]\.contributor_id\)\)`, plan, mode)
		if mode == "force_generic_plan" {
			require.NotContains(t, plan, pools[0].String(), "a generic plan knows no parameter's value")
		}
	}

	plan := b.explain(t, expireLockAssignmentsSQL, pgx.NamedArgs{"now": testBase, "max": 100})
	t.Logf("expire:\n%s", plan)
	require.Contains(t, plan, "docket_assignments_active_expiry")
	require.NotContains(t, plan, "Seq Scan on docket_assignments")
}

// explainMode is the EXPLAIN text of query with positional args, planned
// with plan_cache_mode = mode (auto, force_generic_plan) in a transaction
// rolled back after, even when the test fails. The query is prepared and
// explained through EXECUTE, so the mode applies: an EXPLAIN of the query
// itself with bound parameters is planned with their values whatever the
// mode says (a custom plan), where a prepared statement under
// force_generic_plan is planned without them, as the server's cached
// statements are once PostgreSQL settles on a generic plan.
func explainMode(t *testing.T, b *bundle, mode, query string, args ...any) string {
	t.Helper()
	name := fmt.Sprintf("explain_mode_%d", explainModeSeq.Add(1))
	tx, err := b.s.Pool().Begin(b.ctx)
	require.NoError(t, err)
	defer func() {
		// a prepared statement outlives the transaction: its connection
		// goes back to the pool
		_ = tx.Conn().Deallocate(b.ctx, name)
		_ = tx.Rollback(b.ctx)
	}()
	_, err = tx.Exec(b.ctx, "SET LOCAL plan_cache_mode = "+mode)
	require.NoError(t, err)
	sd, err := tx.Conn().Prepare(b.ctx, name, query)
	require.NoError(t, err)
	require.Len(t, args, len(sd.ParamOIDs), "arguments")
	// EXECUTE's arguments are no parameters of the EXPLAIN (PostgreSQL
	// analyzes no utility statement's): each is written in as a literal
	// of its parameter's text form
	lits := make([]string, len(args))
	for i, a := range args {
		buf, err := tx.Conn().TypeMap().Encode(sd.ParamOIDs[i], pgtype.TextFormatCode, a, nil)
		require.NoError(t, err, "argument %d", i+1)
		lits[i] = "NULL"
		if buf != nil {
			lits[i] = "'" + strings.ReplaceAll(string(buf), "'", "''") + "'"
		}
	}
	rs, err := tx.Query(b.ctx, "EXPLAIN EXECUTE "+name+"("+strings.Join(lits, ", ")+")")
	require.NoError(t, err)
	lines, err := collect(rs, func(r rowScanner) (string, error) {
		var line string
		return line, r.Scan(&line)
	})
	require.NoError(t, err)
	return strings.Join(lines, "\n") + "\n"
}

// explainModeSeq numbers explainMode's prepared statements.
var explainModeSeq atomic.Int64

// explainIn is the EXPLAIN text of query in tx.
func explainIn(t *testing.T, tx pgx.Tx, query string, args pgx.NamedArgs) string {
	t.Helper()
	rs, err := tx.Query(t.Context(), "EXPLAIN "+query, args)
	require.NoError(t, err)
	out, err := collect(rs, func(r rowScanner) (string, error) {
		var line string
		return line, r.Scan(&line)
	})
	require.NoError(t, err)
	var s string
	for _, l := range out {
		s += l + "\n"
	}
	return s
}

// TestFindWorkPlan: among 10,000 pools (storetest.SeedFindWork's data,
// written in bulk: seedFindWork), 2,000 of them then completed, with
// 10,000 assignments, finding work
// (PoolListEligible) finds the pools through the partial GIN index of the
// open pools' skills (the channels are checked on the few rows it finds),
// in custom and generic plans, and reads no table of pools, units or
// assignments sequentially. The plan is in docs/store-plans.md.
func TestFindWorkPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 10k pools")
	}
	t.Parallel()
	b := setup(t)
	ids := seedFindWork(t, b, storetest.FindWorkShape{Pools: 10_000, UnitsPerPool: 1, Contributors: 200})
	var open int
	require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT count(*) FROM docket_pools p WHERE status = 'OPEN'
		AND EXISTS (SELECT 1 FROM docket_units u WHERE u.pool_id = p.id AND `+openUnit+`)
		AND (SELECT sum(units_judgable) FROM docket_pool_counters c WHERE c.pool_id = p.id) = 1`).Scan(&open))
	require.Equal(t, 10_000, open, "every pool seeded OPEN with its open unit, counted")
	c, err := b.s.ContributorGet(b.ctx, ids[0])
	require.NoError(t, err)
	require.NotEmpty(t, c.Skills, "the contributor has skills: the skills index is what finds their pools")
	var eligible int
	require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT count(*) FROM docket_pools p, docket_contributors c
		WHERE c.id = $1 AND p.skills <@ c.skills AND (p.channels && c.channels OR p.channels = '{}')`, ids[0]).Scan(&eligible))
	require.Equal(t, 2559, eligible, "the first contributor's pools, as storetest.FindWorkShape tells of SeedFindWork's data")
	_, err = b.s.Pool().Exec(b.ctx, `
		UPDATE docket_pools SET status = 'COMPLETED' WHERE id IN (SELECT id FROM docket_pools ORDER BY id LIMIT 2000);
		INSERT INTO docket_assignments (id, unit_id, pool_id, contributor_id, state, started_at, expires_at, heartbeat_at)
			SELECT gen_random_uuid(), u.id, u.pool_id, c.id, 'SUBMITTED', now(), now(), now()
			FROM (SELECT id, pool_id, row_number() OVER () % 200 AS cn FROM docket_units) u
			JOIN (SELECT id, row_number() OVER () - 1 AS cn FROM docket_contributors) c ON c.cn = u.cn;
		ANALYZE docket_pools; ANALYZE docket_units; ANALYZE docket_assignments; ANALYZE docket_contributors`)
	require.NoError(t, err)
	args := pgx.NamedArgs{"contributor": ids[0], "limit": 50}
	for _, mode := range []string{"auto", "force_generic_plan"} {
		tx, err := b.s.Pool().Begin(b.ctx)
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, "SET LOCAL plan_cache_mode = "+mode)
		require.NoError(t, err)
		plan := explainIn(t, tx, poolEligibleSQL, args)
		require.NoError(t, tx.Rollback(b.ctx))
		t.Logf("find work (%s):\n%s", mode, plan)
		for _, index := range []string{"docket_pools_open_skills", "docket_units_open"} {
			require.Contains(t, plan, index, mode)
		}
		for _, table := range []string{"docket_pools", "docket_units", "docket_assignments", "docket_pool_contributors"} {
			require.NotContains(t, plan, "Seq Scan on "+table+" ", mode)
		}
	}
	// The plan's answer is the store's.
	ps, err := b.s.PoolListEligible(b.ctx, &store.PoolListEligibleParams{ContributorID: ids[0], Limit: 50})
	require.NoError(t, err)
	require.NotEmpty(t, ps)
}

// seedFindWork writes storetest.SeedFindWork's data (storetest.DrawFindWork:
// the same pools, units and contributors) in a few statements instead of
// through the store pool by pool, five round trips each (a pool, its
// read-back, and its units' lock, insert and count) and contributor by
// contributor: the same rows, a pool's counter shards and pool.updated
// outbox row included, with each pool's units counted on shard 0. It
// returns the contributors' ids.
func seedFindWork(t *testing.T, b *bundle, shape storetest.FindWorkShape) []uuid.UUID {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Second)
	require.NoError(t, storetest.SeedFindWorkDefinitions(b.ctx, b.s, now))
	d := storetest.DrawFindWork(shape, now)
	var (
		pools, units, unitPools, unitRuns, ids []uuid.UUID
		steps, skills, channels, externals     []string
		cSkills, cChannels                     []string
		priorities, unitCounts                 []int32
		created                                []time.Time
		keys                                   []int64
	)
	for _, fp := range d.Pools {
		p := fp.Pool
		pools = append(pools, p.ID)
		steps = append(steps, p.Step)
		priorities = append(priorities, int32(p.Priority))
		skills = append(skills, strings.Join(p.Skills, ","))
		channels = append(channels, strings.Join(p.Channels, ","))
		created = append(created, dbTime(p.Now))
		unitCounts = append(unitCounts, int32(len(fp.Units)))
		for _, u := range fp.Units {
			units = append(units, u.ID)
			unitPools = append(unitPools, p.ID)
			unitRuns = append(unitRuns, u.RunID)
			keys = append(keys, rand.Int64())
		}
	}
	for _, c := range d.Contributors {
		ids = append(ids, c.ID)
		externals = append(externals, c.ExternalID)
		cSkills = append(cSkills, strings.Join(c.Skills, ","))
		cChannels = append(cChannels, strings.Join(c.Channels, ","))
	}
	tx, err := b.s.Pool().Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		// string_to_array('', ',') is the empty array, as a pool without
		// skills or channels has.
		{`INSERT INTO docket_pools (id, workflow, workflow_version, step, task, task_version, status, priority,
			skills, channels, judgments_per_unit, assignment_seconds, settings, created_at, updated_at)
		SELECT id, 'findwork', 1, step, 'findwork', 1, 'OPEN', priority,
			string_to_array(skills, ','), string_to_array(channels, ','), 3, 900, '{}', created, created
		FROM unnest($1::uuid[], $2::text[], $3::integer[], $4::text[], $5::text[], $6::timestamptz[])
			AS p(id, step, priority, skills, channels, created)`, []any{pools, steps, priorities, skills, channels, created}},
		{`INSERT INTO docket_pool_counters (pool_id, shard, units_judgable)
		SELECT p.id, g, CASE WHEN g = 0 THEN p.n ELSE 0 END
		FROM unnest($1::uuid[], $2::integer[]) AS p(id, n), generate_series(0, ` + fmt.Sprint(poolShards-1) + `) AS g`,
			[]any{pools, unitCounts}},
		{`INSERT INTO docket_outbox (event_type, data, created_at)
		SELECT 'pool.updated', json_build_object('poolId', id, 'to', 'OPEN'), created
		FROM unnest($1::uuid[], $2::timestamptz[]) AS p(id, created)`, []any{pools, created}},
		{`INSERT INTO docket_units (id, pool_id, run_id, step_index, input, state, golden, pick_key, judgments_per_unit,
			created_at, updated_at)
		SELECT id, pool_id, run_id, 0, '{}', 'JUDGABLE', false, pick_key, 3, $5, $5
		FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::bigint[]) AS u(id, pool_id, run_id, pick_key)`,
			[]any{units, unitPools, unitRuns, keys, dbTime(now)}},
		{`INSERT INTO docket_contributors (id, external_id, skills, channels, state, created_at, updated_at)
		SELECT id, external_id, string_to_array(skills, ','), string_to_array(channels, ','), 'active', $5, $5
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS c(id, external_id, skills, channels)`,
			[]any{ids, externals, cSkills, cChannels, dbTime(now)}},
	} {
		_, err := tx.Exec(b.ctx, q.sql, q.args...)
		require.NoError(t, err, q.sql)
	}
	requireSeedAsStore(t, b, tx, d.Pools[0], now)
	require.NoError(t, tx.Commit(b.ctx))
	return ids
}

// requireSeedAsStore fails unless seedFindWork wrote fp (in tx) as the
// store writes a pool and its units: the same pool made through the store
// (PoolCreate, UnitInsertMany, as storetest.SeedFindWork makes it; in a
// savepoint rolled back after) must have the same pool row but for its id
// and step, the same counters summed over its shards, the same units but
// for their ids and pick keys, and the same outbox events but for the
// pool's id. So the hand-written statements cannot drift from the store's.
func requireSeedAsStore(t *testing.T, b *bundle, tx pgx.Tx, fp storetest.FindWorkPool, now time.Time) {
	t.Helper()
	ref, err := tx.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, ref.Rollback(b.ctx)) }()
	st := &storeTx{s: b.s, tx: ref}
	params := *fp.Pool
	params.ID, params.Step = uuid.Must(uuid.NewV7()), "seed-reference"
	p, _, err := st.PoolCreate(b.ctx, &params)
	require.NoError(t, err)
	units := make([]*store.UnitInsertParams, len(fp.Units))
	for i := range units {
		units[i] = &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), RunID: uuid.Must(uuid.NewV7()), Input: fp.Units[i].Input}
	}
	_, err = st.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable, Units: units, Now: now})
	require.NoError(t, err)
	for _, q := range []struct{ what, sql string }{
		{"pool", `SELECT to_jsonb(p) - 'id' - 'step' FROM docket_pools p WHERE id = $1`},
		{"counters", `SELECT to_jsonb(c) FROM (SELECT count(*) AS shards, sum(units_new) AS new, sum(units_judgable) AS judgable,
			sum(units_paused) AS paused, sum(units_finalized) AS finalized, sum(units_canceled) AS canceled,
			sum(units_golden) AS golden, sum(judgments) AS judgments, sum(active_assignments) AS active
			FROM docket_pool_counters WHERE pool_id = $1) c`},
		{"units", `SELECT coalesce(jsonb_agg(to_jsonb(u) - 'id' - 'pool_id' - 'run_id' - 'pick_key'), '[]') FROM docket_units u WHERE pool_id = $1`},
		{"outbox", `SELECT coalesce(jsonb_agg(jsonb_build_object('type', event_type, 'data', data::jsonb - 'poolId') ORDER BY id), '[]')
			FROM docket_outbox WHERE data::jsonb ->> 'poolId' = $1::text`},
	} {
		var want, got string
		require.NoError(t, ref.QueryRow(b.ctx, q.sql, p.ID).Scan(&want), q.what)
		require.NoError(t, ref.QueryRow(b.ctx, q.sql, fp.Pool.ID).Scan(&got), q.what)
		require.JSONEq(t, want, got, "%s: seedFindWork's rows differ from the store's", q.what)
	}
}

// planPools makes the two pools the plan tests share (workflows wf0 and
// wf1, task t, 3 judgments per unit), each with n JUDGABLE units made by
// unit(pool index, unit index), and returns their ids.
func planPools(t *testing.T, b *bundle, n int, unit func(pool, j int) *store.UnitInsertParams) []uuid.UUID {
	t.Helper()
	var pools []uuid.UUID
	for i := range 2 {
		name := fmt.Sprintf("wf%d", i)
		_, _, err := b.s.WorkflowPut(b.ctx, &store.WorkflowPutParams{Name: name, Definition: json.RawMessage(`{}`), Hash: "h", Now: testBase})
		require.NoError(t, err)
		if i == 0 {
			_, _, err = b.s.TaskPut(b.ctx, &store.TaskPutParams{Name: "t", Definition: json.RawMessage(`{}`), Hash: "h", Now: testBase})
			require.NoError(t, err)
		}
		p, _, err := b.s.PoolCreate(b.ctx, &store.PoolCreateParams{ID: uuid.Must(uuid.NewV7()), Workflow: name, WorkflowVersion: 1,
			Step: "s", Task: "t", TaskVersion: 1, JudgmentsPerUnit: 3, AssignmentSeconds: 60, Now: testBase})
		require.NoError(t, err)
		ps := make([]*store.UnitInsertParams, n)
		for j := range ps {
			ps[j] = unit(i, j)
		}
		_, err = b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable, Units: ps, Now: testBase})
		require.NoError(t, err)
		pools = append(pools, p.ID)
	}
	return pools
}
