package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// domainCase is one column migration 0022 moved from a table CHECK into
// a domain: the values the database must refuse and some it must take.
type domainCase struct {
	table, column, key, base string
	bad, good                []any
}

// TestCheckDomains: migration 0022 turned the single-column checks of
// docket_units, docket_assignments and docket_pool_contributors into
// domains. On the migrated schema and on the one before it (one step
// down), the database refuses every value the checks refused, with
// check_violation, whether the value comes as a parameter PostgreSQL
// types as the column (pgx sends it as text: it does not know the
// domain), as a parameter of the base type (sent binary) or as a
// literal of a simple-protocol statement, written by an UPDATE or an
// INSERT; and it takes the edge values. The two checks that name two
// columns are still table checks. Rows written before the migration come
// through it, down and up, unchanged.
func TestCheckDomains(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	pools := planPools(t, b, 1, func(int, int) *store.UnitInsertParams {
		return &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}
	})
	c, err := b.s.ContributorCreate(ctx, &store.ContributorCreateParams{ID: uuid.Must(uuid.NewV7()), ExternalID: "c", Now: testBase})
	require.NoError(t, err)
	_, err = b.s.Pool().Exec(ctx, `INSERT INTO docket_pool_contributors (pool_id, contributor_id, updated_at)
		VALUES ($1, $2, now()) ON CONFLICT DO NOTHING`, pools[0], c.ID)
	require.NoError(t, err)
	a, err := b.s.AssignmentTake(ctx, &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: pools[0],
		ContributorID: c.ID, Duration: time.Minute, Strategy: crowd.StrategyOrdered, Now: testBase})
	require.NoError(t, err)
	unit, assignment := a.Unit.ID, a.Assignment.ID
	_, err = b.s.Pool().Exec(ctx, fmt.Sprintf(`UPDATE docket_units SET step_index = 2 WHERE id = '%s';
		UPDATE docket_pool_contributors SET trust = 0.25, taken = 1, tests_taken = 2, too_fast = 3, agreed = 4, judged = 5`,
		unit))
	require.NoError(t, err)
	rows := func() string {
		var s string
		require.NoError(t, b.s.Pool().QueryRow(ctx, `SELECT concat_ws('|',
			(SELECT row(state, step_index, slots_taken, judgments_per_unit, has_slot)::text FROM docket_units WHERE id = $1),
			(SELECT row(state)::text FROM docket_assignments WHERE id = $2),
			(SELECT row(trust, taken, tests_taken, too_fast, agreed, judged)::text FROM docket_pool_contributors WHERE contributor_id = $3))`,
			unit, assignment, c.ID).Scan(&s))
		return s
	}
	before := rows()
	require.Equal(t, "(JUDGABLE,2,1,3,t)|(ACTIVE)|(0.25,1,2,3,4,5)", before)

	unitKey, assignmentKey, contributorKey := fmt.Sprintf("id = '%s'", unit), fmt.Sprintf("id = '%s'", assignment),
		fmt.Sprintf("contributor_id = '%s'", c.ID)
	cases := []domainCase{
		{"docket_units", "state", unitKey, "text", []any{"BOGUS", "", "judgable", "JUDGABLE "}, []any{"PAUSED", "JUDGABLE"}},
		{"docket_units", "step_index", unitKey, "integer", []any{-1, -1 << 31}, []any{nil, 0, 2}},
		{"docket_units", "slots_taken", unitKey, "integer", []any{-1}, []any{0, 1}},
		{"docket_units", "judgments_per_unit", unitKey, "integer", []any{0, -2}, []any{1, 3}},
		{"docket_assignments", "state", assignmentKey, "text", []any{"BOGUS", "active"}, []any{"SUBMITTED", "ACTIVE"}},
		{"docket_pool_contributors", "trust", contributorKey, "double precision", []any{-0.001, 1.001, math.NaN(), math.Inf(1), math.Inf(-1)}, []any{nil, 0.0, 1.0, 0.25}},
		{"docket_pool_contributors", "taken", contributorKey, "integer", []any{-1}, []any{0, 1}},
		{"docket_pool_contributors", "tests_taken", contributorKey, "integer", []any{-1}, []any{0, 2}},
		{"docket_pool_contributors", "too_fast", contributorKey, "integer", []any{-1}, []any{0, 3}},
		{"docket_pool_contributors", "agreed", contributorKey, "integer", []any{-1}, []any{0, 4}},
		{"docket_pool_contributors", "judged", contributorKey, "integer", []any{-1}, []any{0, 5}},
	}
	// The checks that name two columns, on a regular unit.
	tableChecks := []string{
		`UPDATE docket_units SET answer = '{}' WHERE ` + unitKey,
		`UPDATE docket_units SET feedback = 'f' WHERE ` + unitKey,
		`UPDATE docket_units SET golden = true WHERE ` + unitKey,
	}

	refuses := func(schema string) {
		for _, tc := range cases {
			for _, v := range tc.bad {
				for _, w := range writes(tc, v) {
					err := w.exec(ctx, b.s.Pool())
					var pgErr *pgconn.PgError
					require.True(t, errors.As(err, &pgErr), "%s: %s %v (%s): %v", schema, tc.column, v, w.name, err)
					require.Equal(t, "23514", pgErr.Code, "%s: %s %v (%s): %v", schema, tc.column, v, w.name, err)
				}
			}
			for _, v := range tc.good {
				for _, w := range writes(tc, v) {
					if w.insert {
						continue // a second row of the same key: not what is checked here
					}
					require.NoError(t, w.exec(ctx, b.s.Pool()), "%s: %s %v (%s)", schema, tc.column, v, w.name)
				}
			}
		}
		for _, q := range tableChecks {
			_, err := b.s.Pool().Exec(ctx, q)
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "%s: %s: %v", schema, q, err)
			require.Equal(t, "23514", pgErr.Code, "%s: %s", schema, q)
		}
		require.Equal(t, before, rows(), schema)
	}
	refuses("migrated")

	steps := stepsDownTo(t, b, 22)
	down, err := b.s.Migrate(ctx, &store.MigrateParams{Direction: store.Down, Steps: steps})
	require.NoError(t, err)
	require.Len(t, down, steps)
	require.Equal(t, "crowd_check_domains", down[len(down)-1].Name)
	// The pool's connections prepared statements whose parameters are of
	// the dropped domains (a server's would fail the same way after a
	// migration down under it).
	b.s.Pool().Reset()
	require.Equal(t, before, rows(), "after the migration down")
	refuses("before the migration")
	_, err = b.s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)
	b.s.Pool().Reset()
	require.Equal(t, before, rows(), "after the migration up again")
	refuses("migrated again")

	// The columns are domains now, and checked nowhere else.
	var domains []string
	rs, err := b.s.Pool().Query(ctx, `SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_type ty ON ty.oid = a.atttypid
		WHERE c.relname IN ('docket_units', 'docket_assignments', 'docket_pool_contributors') AND ty.typtype = 'd'
			AND c.relnamespace = to_regnamespace(current_schema()) ORDER BY 1`)
	require.NoError(t, err)
	domains, err = pgx.CollectRows(rs, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, domains, len(cases), "%v", domains)
	var checks int
	require.NoError(t, b.s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_constraint
		WHERE conrelid IN ('docket_units'::regclass, 'docket_assignments'::regclass, 'docket_pool_contributors'::regclass)
			AND contype = 'c'`).Scan(&checks))
	require.Equal(t, 2, checks, "the two checks of docket_units that name two columns")
}

// domainWrite is one way to write a value into a column.
type domainWrite struct {
	name   string
	insert bool
	exec   func(ctx context.Context, p execer) error
}

type execer interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}

// writes are the ways TestCheckDomains writes v into tc's column of the
// row of tc.key: an UPDATE with an untyped parameter (PostgreSQL types it
// as the column's domain; pgx, not knowing that type, sends the value as
// text), with a parameter of the base type (binary), with a literal over
// the simple protocol, and an INSERT of a copy of the row with v.
func writes(tc domainCase, v any) []domainWrite {
	update := func(name, set string, args ...any) domainWrite {
		return domainWrite{name: name, exec: func(ctx context.Context, p execer) error {
			tag, err := p.Exec(ctx, fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s", tc.table, tc.column, set, tc.key), args...)
			if err == nil && tag.RowsAffected() != 1 {
				return fmt.Errorf("%d rows updated", tag.RowsAffected())
			}
			return err
		}}
	}
	literal := v
	if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		literal = fmt.Sprint(f) // quoted by pgx, as 'NaN' and '+Inf' are written in SQL
		if math.IsInf(f, 1) {
			literal = "Infinity"
		}
	}
	ws := []domainWrite{
		update("untyped parameter", "$1", v),
		update("parameter of the base type", "$1::"+tc.base, v),
		update("literal", "$1", pgx.QueryExecModeSimpleProtocol, literal),
	}
	cols := map[string][]string{
		"docket_units": {"id", "pool_id", "input", "state", "golden", "pick_key", "slots_taken", "judgments_per_unit",
			"created_at", "updated_at", "step_index"},
		"docket_assignments": {"id", "unit_id", "pool_id", "contributor_id", "state", "started_at", "expires_at", "heartbeat_at"},
	}[tc.table]
	if cols != nil {
		// Another row like it, with v: the key's unique indexes would
		// refuse it too, but only after the value is checked.
		sel := append([]string{"gen_random_uuid()"}, cols[1:]...)
		for i, c := range sel {
			if c == tc.column {
				sel[i] = "$1"
			}
		}
		q := fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s", tc.table, strings.Join(cols, ", "),
			strings.Join(sel, ", "), tc.table, tc.key)
		ws = append(ws, domainWrite{name: "insert", insert: true, exec: func(ctx context.Context, p execer) error {
			_, err := p.Exec(ctx, q, v)
			return err
		}})
	}
	return ws
}

// TestCheckDomainsPgx: pgx reads the domain-typed columns into the Go
// types the store scans them into, in binary (the extended protocol:
// PostgreSQL describes a domain's column as its base type) and in text
// (the simple protocol), writes them from those types, and needs no
// round trip of its own to do so (no statement but the test's reaches
// the server).
func TestCheckDomainsPgx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	pools := planPools(t, b, 1, func(int, int) *store.UnitInsertParams {
		return &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}
	})
	var unit uuid.UUID
	require.NoError(t, b.s.Pool().QueryRow(ctx, `SELECT id FROM docket_units WHERE pool_id = $1`, pools[0]).Scan(&unit))
	c, err := b.s.ContributorCreate(ctx, &store.ContributorCreateParams{ID: uuid.Must(uuid.NewV7()), ExternalID: "c", Now: testBase})
	require.NoError(t, err)
	_, err = b.s.Pool().Exec(ctx, `INSERT INTO docket_pool_contributors (pool_id, contributor_id, updated_at) VALUES ($1, $2, now())`,
		pools[0], c.ID)
	require.NoError(t, err)

	cfg, err := pgx.ParseConfig(b.url)
	require.NoError(t, err)
	tracer := &countingTracer{}
	cfg.Tracer = tracer
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		n := tracer.queries.Load()
		state, stepIndex, slots, per := crowd.UnitPaused, int32(4), 2, 5
		trust, taken := 0.125, int32(7)
		_, err := conn.Exec(ctx, `UPDATE docket_units SET state = $1, step_index = $2, slots_taken = $3, judgments_per_unit = $4
			WHERE id = $5`, mode, state, stepIndex, slots, per, unit)
		require.NoError(t, err, "%v", mode)
		_, err = conn.Exec(ctx, `UPDATE docket_pool_contributors SET trust = $1, taken = $2, judged = $3 WHERE contributor_id = $4`,
			mode, &trust, taken, int64(9), c.ID)
		require.NoError(t, err, "%v", mode)

		var (
			gotState       crowd.UnitState
			gotStep        *int
			gotSlots, per2 int
			gotTrust       *float64
			gotTaken       int32
			gotJudged      int64
		)
		rs, err := conn.Query(ctx, `SELECT u.state, u.step_index, u.slots_taken, u.judgments_per_unit, pc.trust, pc.taken, pc.judged
			FROM docket_units u, docket_pool_contributors pc WHERE u.id = $1 AND pc.contributor_id = $2`, mode, unit, c.ID)
		require.NoError(t, err, "%v", mode)
		require.True(t, rs.Next(), "%v", mode)
		if mode != pgx.QueryExecModeSimpleProtocol {
			// Described as the base types, so pgx decodes them as it
			// always did (binary where it asks for binary).
			var oids []uint32
			for _, f := range rs.FieldDescriptions() {
				oids = append(oids, f.DataTypeOID)
			}
			require.Equal(t, []uint32{pgtype.TextOID, pgtype.Int4OID, pgtype.Int4OID, pgtype.Int4OID, pgtype.Float8OID,
				pgtype.Int4OID, pgtype.Int4OID}, oids, "%v", mode)
			if mode == pgx.QueryExecModeCacheStatement {
				for _, f := range rs.FieldDescriptions()[1:] {
					require.Equal(t, int16(pgtype.BinaryFormatCode), f.Format, "%v: %s", mode, f.Name)
				}
			}
		}
		require.NoError(t, rs.Scan(&gotState, &gotStep, &gotSlots, &per2, &gotTrust, &gotTaken, &gotJudged), "%v", mode)
		rs.Close()
		require.NoError(t, rs.Err())
		require.Equal(t, state, gotState, "%v", mode)
		require.NotNil(t, gotStep)
		require.Equal(t, 4, *gotStep, "%v", mode)
		require.Equal(t, []any{slots, per, trust, taken, int64(9)}, []any{gotSlots, per2, *gotTrust, gotTaken, gotJudged}, "%v", mode)
		require.Equal(t, int64(3), tracer.queries.Load()-n, "%v: only the test's statements reached the server", mode)

		// Back, for the next mode.
		_, err = conn.Exec(ctx, `UPDATE docket_units SET state = 'JUDGABLE', step_index = NULL, slots_taken = 0, judgments_per_unit = 3
			WHERE id = $1`, unit)
		require.NoError(t, err)
	}
}

// countingTracer counts the statements a connection sends.
type countingTracer struct{ queries atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// stepsDownTo is how many steps down revert migration version and every
// later one.
func stepsDownTo(t *testing.T, b *bundle, version int) int {
	t.Helper()
	ms, err := b.s.MigrationStatus(b.ctx)
	require.NoError(t, err)
	n := 0
	for _, m := range ms {
		if m.Version >= version && m.Applied {
			n++
		}
	}
	require.NotZero(t, n, "migration %d is applied", version)
	return n
}
