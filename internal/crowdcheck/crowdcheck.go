// Package crowdcheck checks the invariants of human work on one pool
// straight on the tables, after a benchmark or a race test: no slot
// assigned twice, no contributor twice on a unit, every unit FINALIZED
// with exactly its target of judgments, every judgment tied to its
// submitted assignment, and the pool's counters equal to what the tables
// hold. Each check is one SQL query counting violations; the queries run
// unchanged on PostgreSQL and SQLite.
package crowdcheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/docket-run/docket/internal/store/sqlite"
	"github.com/docket-run/docket/internal/store/storeurl"
)

// Check is one invariant: Query counts the rows that violate it.
type Check struct {
	Name  string
	Query string
}

// Result is a check with its count of violations (0: it holds).
type Result struct {
	Name       string `json:"name"`
	Violations int    `json:"violations"`
}

// Checks are the invariants of a pool whose every unit should have been
// judged perUnit times and finalized, with no assignment left ACTIVE.
// Golden units (test questions) have no target: any number of
// contributors may hold one.
func Checks(poolID uuid.UUID, perUnit int) []Check {
	return checks(poolID, perUnit, false)
}

// QualityChecks are Checks for a pool under quality control
// (docs/quality.md), whose units may hold tainted judgments beside their
// clean ones — a flagged contributor's — and more clean ones than
// perUnit after a forgiveness un-tainted them: every unit FINALIZED with
// at least perUnit clean judgments and judgment_count its judgments
// stored, clean or not, instead of exactly perUnit of both; and no
// ACTIVE assignment left of a regular unit (a test question's may be).
func QualityChecks(poolID uuid.UUID, perUnit int) []Check {
	return checks(poolID, perUnit, true)
}

func checks(poolID uuid.UUID, perUnit int, quality bool) []Check {
	pool := "'" + poolID.String() + "'" // a uuid: safe to inline
	count := Check{fmt.Sprintf("units without exactly %d judgments", perUnit), fmt.Sprintf(`SELECT count(*) FROM docket_units u
			WHERE u.pool_id = %s AND NOT u.golden AND (u.judgment_count <> %d
				OR (SELECT count(*) FROM docket_judgments j WHERE j.unit_id = u.id) <> %d)`, pool, perUnit, perUnit)}
	active := Check{"ACTIVE assignments left", `SELECT count(*) FROM docket_assignments WHERE pool_id = ` + pool + ` AND state = 'ACTIVE'`}
	if quality {
		// A test question stays judgable: a contributor stopped in the
		// middle of one leaves its assignment to the reaper, and no
		// unit waits for it.
		active = Check{"ACTIVE assignments of regular units left", `SELECT count(*) FROM docket_assignments a JOIN docket_units u ON u.id = a.unit_id
			WHERE a.pool_id = ` + pool + ` AND a.state = 'ACTIVE' AND NOT u.golden`}
		count = Check{fmt.Sprintf("units with fewer than %d clean judgments, or a judgment_count other than their judgments", perUnit), fmt.Sprintf(`SELECT count(*) FROM docket_units u
			WHERE u.pool_id = %s AND NOT u.golden
				AND (u.judgment_count <> (SELECT count(*) FROM docket_judgments j WHERE j.unit_id = u.id)
				OR (SELECT count(*) FROM docket_judgments j WHERE j.unit_id = u.id AND NOT j.tainted) < %d)`, pool, perUnit)}
	}
	return []Check{
		{"slots assigned twice (more ACTIVE and SUBMITTED assignments than judgments_per_unit)", `SELECT count(*) FROM docket_units u
			WHERE u.pool_id = ` + pool + ` AND NOT u.golden AND (SELECT count(*) FROM docket_assignments a
				WHERE a.unit_id = u.id AND a.state IN ('ACTIVE', 'SUBMITTED')) > u.judgments_per_unit`},
		{"same contributor twice on one unit (assignments)", `SELECT count(*) FROM (SELECT unit_id, contributor_id
			FROM docket_assignments WHERE pool_id = ` + pool + ` GROUP BY unit_id, contributor_id HAVING count(*) > 1) x`},
		{"same contributor twice on one unit (judgments)", `SELECT count(*) FROM (SELECT unit_id, contributor_id
			FROM docket_judgments WHERE pool_id = ` + pool + ` GROUP BY unit_id, contributor_id HAVING count(*) > 1) x`},
		count,
		{"units not FINALIZED", `SELECT count(*) FROM docket_units WHERE pool_id = ` + pool + ` AND NOT golden AND state <> 'FINALIZED'`},
		{"units whose slots_taken is not their ACTIVE and SUBMITTED assignments", `SELECT count(*) FROM docket_units u
			WHERE u.pool_id = ` + pool + ` AND u.slots_taken <> (SELECT count(*) FROM docket_assignments a
				WHERE a.unit_id = u.id AND a.state IN ('ACTIVE', 'SUBMITTED'))`},
		{"judgments not tied to one SUBMITTED assignment of their unit and contributor", `SELECT count(*) FROM docket_judgments j
			WHERE j.pool_id = ` + pool + ` AND NOT EXISTS (SELECT 1 FROM docket_assignments a WHERE a.id = j.assignment_id
				AND a.state = 'SUBMITTED' AND a.unit_id = j.unit_id AND a.contributor_id = j.contributor_id)`},
		{"SUBMITTED assignments without a judgment", `SELECT count(*) FROM docket_assignments a
			WHERE a.pool_id = ` + pool + ` AND a.state = 'SUBMITTED'
				AND NOT EXISTS (SELECT 1 FROM docket_judgments j WHERE j.assignment_id = a.id)`},
		active,
		{"pool counters that differ from the tables (judgments, active assignments, judgable and finalized units)", `SELECT
			CASE WHEN (SELECT coalesce(sum(judgments), 0) FROM docket_pool_counters WHERE pool_id = ` + pool + `)
				= (SELECT count(*) FROM docket_judgments WHERE pool_id = ` + pool + `) THEN 0 ELSE 1 END
			+ CASE WHEN (SELECT coalesce(sum(active_assignments), 0) FROM docket_pool_counters WHERE pool_id = ` + pool + `)
				= (SELECT count(*) FROM docket_assignments WHERE pool_id = ` + pool + ` AND state = 'ACTIVE') THEN 0 ELSE 1 END
			+ CASE WHEN (SELECT coalesce(sum(units_judgable), 0) FROM docket_pool_counters WHERE pool_id = ` + pool + `)
				= (SELECT count(*) FROM docket_units WHERE pool_id = ` + pool + ` AND state = 'JUDGABLE' AND NOT golden) THEN 0 ELSE 1 END
			+ CASE WHEN (SELECT coalesce(sum(units_finalized), 0) FROM docket_pool_counters WHERE pool_id = ` + pool + `)
				= (SELECT count(*) FROM docket_units WHERE pool_id = ` + pool + ` AND state = 'FINALIZED' AND NOT golden) THEN 0 ELSE 1 END`},
	}
}

// Open opens the database of a docket database URL (postgres://… or
// sqlite:PATH) for the checks.
func Open(databaseURL string) (*sql.DB, error) {
	switch {
	case strings.HasPrefix(databaseURL, "postgres://"), strings.HasPrefix(databaseURL, "postgresql://"):
		// Parsed as the server parses it, so that its pool settings
		// (pool_max_conns, …) are not sent to the database as parameters.
		cfg, err := pgxpool.ParseConfig(databaseURL)
		if err != nil {
			return nil, fmt.Errorf("crowdcheck: %w", err)
		}
		return stdlib.OpenDB(*cfg.ConnConfig), nil
	}
	// The path as the server reads it (storeurl.SQLitePath: options and
	// file: URIs refused), escaped as the store escapes it: a '#' or '%'
	// in a file name opened another file.
	if path, ok, err := storeurl.SQLitePath(databaseURL); ok {
		if err != nil {
			return nil, fmt.Errorf("crowdcheck: %w", err)
		}
		return sql.Open("sqlite", sqlite.FileURI(path)+"?_pragma=busy_timeout(10000)")
	}
	return nil, errors.New("crowdcheck: database url must be postgres://, postgresql:// or sqlite:PATH")
}

// Run runs every check on db.
func Run(ctx context.Context, db *sql.DB, poolID uuid.UUID, perUnit int) ([]Result, error) {
	return RunChecks(ctx, db, Checks(poolID, perUnit))
}

// RunChecks runs the checks on db.
func RunChecks(ctx context.Context, db *sql.DB, checks []Check) ([]Result, error) {
	var out []Result
	for _, c := range checks {
		var n int
		if err := db.QueryRowContext(ctx, c.Query).Scan(&n); err != nil {
			return nil, fmt.Errorf("check %q: %w", c.Name, err)
		}
		out = append(out, Result{Name: c.Name, Violations: n})
	}
	return out, nil
}

// Failed lists the checks that found violations.
func Failed(results []Result) []Result {
	var bad []Result
	for _, r := range results {
		if r.Violations != 0 {
			bad = append(bad, r)
		}
	}
	return bad
}
