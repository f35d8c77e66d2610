package postgres

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// TestQualityPlan: with 2,000 golden and 20,000 regular units in two
// pools, 30,000 assignments (10,000 of golden units) and their judgments,
// quality control's queries walk their indexes, in custom and generic
// plans: the test-question pick docket_units_golden (ordered) or
// docket_units_golden_pick (random), the count of test questions
// docket_assignments_golden, the taint docket_judgments_pool_contributor;
// none reads units, assignments or judgments sequentially.
func TestQualityPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 22k units")
	}
	t.Parallel()
	b := setup(t)
	pools := planPools(t, b, 10_000, func(i, j int) *store.UnitInsertParams {
		if i == 0 && j%5 == 0 {
			return &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`), Golden: true, Answer: json.RawMessage(`{}`)}
		}
		return &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), RunID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}
	})
	// 500 contributors; each unit gets three assignments and judgments.
	_, err := b.s.Pool().Exec(b.ctx, `
		INSERT INTO docket_contributors (id, external_id, state, created_at, updated_at)
			SELECT gen_random_uuid(), 'x' || g, 'active', now(), now() FROM generate_series(0, 499) AS g;
		INSERT INTO docket_assignments (id, unit_id, pool_id, contributor_id, state, started_at, expires_at, heartbeat_at, golden)
			SELECT gen_random_uuid(), u.id, u.pool_id, c.id, 'SUBMITTED', now(), now(), now(), u.golden
			FROM (SELECT id, pool_id, golden, row_number() OVER () AS rn FROM docket_units) u
			JOIN (SELECT id, row_number() OVER () - 1 AS cn FROM docket_contributors) c
				ON c.cn IN (u.rn % 500, (u.rn + 1) % 500, (u.rn + 2) % 500)
			WHERE u.rn % 3 = 0 OR u.id IN (SELECT id FROM docket_units WHERE golden);
		INSERT INTO docket_judgments (id, assignment_id, unit_id, pool_id, contributor_id, data, started_at, submitted_at)
			SELECT gen_random_uuid(), a.id, a.unit_id, a.pool_id, a.contributor_id, '{}', now(), now() FROM docket_assignments a;
		ANALYZE docket_units; ANALYZE docket_assignments; ANALYZE docket_judgments; ANALYZE docket_contributors`)
	require.NoError(t, err)
	var golden int
	require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT count(*) FROM docket_assignments WHERE golden`).Scan(&golden))
	require.Equal(t, 6_000, golden, "the test questions are marked")
	var c uuid.UUID
	require.NoError(t, b.s.Pool().QueryRow(b.ctx, `SELECT contributor_id FROM docket_assignments LIMIT 1`).Scan(&c))

	taintSQL := `WITH t AS (UPDATE docket_judgments SET tainted = $3 WHERE pool_id = $1 AND contributor_id = $2 AND tainted <> $3
		RETURNING unit_id) SELECT u.id FROM t JOIN docket_units u ON u.id = t.unit_id`
	for _, mode := range []string{"auto", "force_generic_plan"} {
		for _, tc := range []struct {
			name, sql, index string
			args             []any
		}{
			{"pick ordered", pickGoldenOrderedSQL, "docket_units_golden ", []any{pools[0], c}},
			{"pick random", pickGoldenRandomSQL, "docket_units_golden_pick", []any{pools[0], c, int64(1) << 61}},
			{"count golden", `SELECT count(*) FROM docket_assignments WHERE pool_id = $1 AND contributor_id = $2 AND golden`,
				"docket_assignments_golden", []any{pools[0], c}},
			{"taint", taintSQL, "docket_judgments_pool_contributor", []any{pools[0], c, true}},
		} {
			plan := explainMode(t, b, mode, tc.sql, tc.args...)
			t.Logf("%s (%s):\n%s", tc.name, mode, plan)
			require.Contains(t, plan, tc.index, "%s (%s)", tc.name, mode)
			for _, table := range []string{"docket_units", "docket_assignments", "docket_judgments"} {
				require.NotContains(t, plan, "Seq Scan on "+table, "%s (%s)", tc.name, mode)
			}
		}
	}
}
