package postgres

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// TestBatchStateLockPlansCached: a judgment alone (the piped
// transaction) locks, or makes, its contributor's quality state with a
// scalar statement (judgmentStateLockOneSQL) that is planned five times on
// a connection and then runs on its cached generic plan, in a pool of
// 3,000 states as in a small one. (The batch's statement for many
// contributors, judgmentStatesLockSQL, is custom-planned at every
// execution in a pool that large, as its plain-array form was before it
// made states too: PostgreSQL prices the generic plan of `contributor_id
// = ANY($2)` above a custom one for a few ids. Left as it is; in the crowd
// benchmark's pools of 500 states it stays generic.)
func TestBatchStateLockPlansCached(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pools := planPools(t, b, 100, func(int, int) *store.UnitInsertParams {
		return &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}
	})
	_, err := b.s.Pool().Exec(b.ctx, `
		INSERT INTO docket_contributors (id, external_id, state, created_at, updated_at)
			SELECT gen_random_uuid(), 'x' || g, 'active', now(), now() FROM generate_series(0, 2999) AS g`)
	require.NoError(t, err)
	_, err = b.s.Pool().Exec(b.ctx, `INSERT INTO docket_pool_contributors (pool_id, contributor_id, updated_at)
		SELECT $1, c.id, now() FROM docket_contributors c`, pools[0])
	require.NoError(t, err)
	_, err = b.s.Pool().Exec(b.ctx, `ANALYZE docket_pool_contributors; ANALYZE docket_contributors`)
	require.NoError(t, err)
	ids := func(n int) []uuid.UUID {
		rs, err := b.s.Pool().Query(b.ctx, `SELECT id FROM docket_contributors ORDER BY random() LIMIT $1`, n)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rs, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		return out
	}
	const runs = 24
	generic, custom := preparedPlans(t, b, judgmentStateLockOneSQL.sql, runs, func(int) []any {
		return judgmentStateLockOneSQL.args(pgx.NamedArgs{"pool": pools[0], "id": ids(1)[0], "now": testBase, "assignment": uuid.Nil})
	})
	t.Logf("alone (piped): %d generic, %d custom plans of %d runs", generic, custom, runs)
	assert.Equal(t, int64(5), custom, "custom plans")
	assert.Equal(t, int64(runs-5), generic, "generic plans")
}
