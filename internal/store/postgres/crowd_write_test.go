package postgres

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// TestJudgmentIndexEntries: a judgment enters four indexes (migration
// 0022: UNIQUE (unit_id, assignment_id) in place of UNIQUE (assignment_id)
// and (unit_id, id)); the database still refuses a second judgment of one
// assignment; and the resend of a judgment finds the stored one through
// the new index (the same data: that judgment, nothing written; other
// data: a conflict naming it). An index added to docket_judgments shows
// here with its cost.
func TestJudgmentIndexEntries(t *testing.T) {
	t.Parallel()
	g := setupJudge(t, 1, 1, 3)
	a := g.assign(t, g.contributors[0], g.units[0].ID)
	p := &store.JudgmentInsertParams{ID: uuid.Must(uuid.NewV7()), AssignmentID: a.ID, ContributorID: a.ContributorID,
		Data: json.RawMessage(`{"a":1}`), Now: testBase.Add(time.Second)}
	ins, err := g.s.JudgmentInsert(g.ctx, p)
	require.NoError(t, err)
	require.True(t, ins.Created)

	rs, err := g.s.Pool().Query(g.ctx, `SELECT c.relname, coalesce(pg_get_expr(i.indpred, i.indrelid), 'true')
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'docket_judgments'::regclass ORDER BY c.relname`)
	require.NoError(t, err)
	var matched []string
	for rs.Next() {
		var name, pred string
		require.NoError(t, rs.Scan(&name, &pred))
		matched = append(matched, name+" WHERE "+pred)
	}
	require.NoError(t, rs.Err())
	require.Equal(t, []string{
		"docket_judgments_pkey WHERE true",
		"docket_judgments_pool WHERE true",
		"docket_judgments_pool_contributor WHERE true",
		"docket_judgments_unit_assignment WHERE true",
	}, matched)

	// The database's own check of one judgment per assignment.
	_, err = g.s.Pool().Exec(g.ctx, `INSERT INTO docket_judgments (id, assignment_id, unit_id, pool_id, contributor_id,
		data, started_at, submitted_at)
		SELECT $1, assignment_id, unit_id, pool_id, contributor_id, data, started_at, submitted_at
		FROM docket_judgments WHERE id = $2`, uuid.Must(uuid.NewV7()), ins.Judgment.ID)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "a second judgment of the assignment was stored: %v", err)
	require.Equal(t, "23505", pgErr.Code)
	require.Equal(t, "docket_judgments_unit_assignment", pgErr.ConstraintName)

	// The resend.
	again := *p
	again.ID = uuid.Must(uuid.NewV7())
	got, err := g.s.JudgmentInsert(g.ctx, &again)
	require.NoError(t, err)
	require.False(t, got.Created)
	require.Equal(t, ins.Judgment.ID, got.Judgment.ID)
	again.Data = json.RawMessage(`{"a":2}`)
	_, err = g.s.JudgmentInsert(g.ctx, &again)
	var conflict *crowd.JudgmentConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, ins.Judgment.ID, conflict.JudgmentID)
	require.Equal(t, 1, g.count(t, `SELECT count(*) FROM docket_judgments`))
}

// TestRoomForUpdates: the row a judgment's path updates next finds room
// for its new version on its own page (migration 0023: fillfactor), where
// a page filled to the brim sends it to another page (a WAL record of
// its own for the old version's lock, a second buffer). Each table's page
// 0 is filled, then its first row updated as the hot path updates it.
func TestRoomForUpdates(t *testing.T) {
	t.Parallel()
	g := setupCrowdPool(t, crowdPoolParams{Units: 400, Slots: 3, Contributors: 1})
	block := func(table string, where string, args ...any) int {
		t.Helper()
		return g.count(t, `SELECT (ctid::text::point)[0]::int FROM `+table+` WHERE `+where, args...)
	}
	// at least two pages of each table, so page 0 holds all it takes
	require.Positive(t, g.count(t, `SELECT max((ctid::text::point)[0])::int FROM docket_units`))

	// units: a judgment's count, HOT
	unit := g.units[0].ID
	require.Equal(t, 0, block("docket_units", "id = $1", unit))
	_, err := g.s.Pool().Exec(g.ctx, `UPDATE docket_units SET judgment_count = judgment_count + 1, updated_at = now() WHERE id = $1`, unit)
	require.NoError(t, err)
	require.Equal(t, 0, block("docket_units", "id = $1", unit), "a unit's update left its page")

	// assignments: the submit
	_, err = g.s.Pool().Exec(g.ctx, `INSERT INTO docket_assignments (id, unit_id, pool_id, contributor_id, state,
			started_at, expires_at, heartbeat_at)
		SELECT gen_random_uuid(), u.id, u.pool_id, $1, 'ACTIVE', now(), now() + interval '1 minute', now()
		FROM docket_units u`, g.contributors[0])
	require.NoError(t, err)
	var first uuid.UUID
	require.NoError(t, g.s.Pool().QueryRow(g.ctx, `SELECT id FROM docket_assignments ORDER BY ctid LIMIT 1`).Scan(&first))
	require.Positive(t, g.count(t, `SELECT max((ctid::text::point)[0])::int FROM docket_assignments`))
	_, err = g.s.Pool().Exec(g.ctx, `UPDATE docket_assignments SET state = 'SUBMITTED', finished_at = now() WHERE id = $1`, first)
	require.NoError(t, err)
	require.Equal(t, 0, block("docket_assignments", "id = $1", first), "a submit left its assignment's page")

	// outbox: the relay's mark
	_, err = g.s.Pool().Exec(g.ctx, `INSERT INTO docket_outbox (event_type, data, created_at)
		SELECT 'judgment.received', json_build_object('judgmentId', gen_random_uuid(), 'assignmentId', gen_random_uuid(),
			'unitId', gen_random_uuid(), 'poolId', gen_random_uuid(), 'contributorId', gen_random_uuid(), 'golden', false,
			'judgmentCount', 1, 'judgmentsPerUnit', 3), now()
		FROM generate_series(1, 400)`)
	require.NoError(t, err)
	var row int64
	require.NoError(t, g.s.Pool().QueryRow(g.ctx, `SELECT id FROM docket_outbox ORDER BY ctid LIMIT 1`).Scan(&row))
	require.Positive(t, g.count(t, `SELECT max((ctid::text::point)[0])::int FROM docket_outbox`))
	n, err := g.s.OutboxMarkPublished(g.ctx, &store.OutboxMarkPublishedParams{IDs: []int64{row}, Now: testBase})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 0, block("docket_outbox", "id = $1", row), "the relay's mark left the row's page")
}
