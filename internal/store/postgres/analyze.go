package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Thresholds of AnalyzeGrown (store.StatsRefresher): a table is analyzed
// once its file holds at least analyzeMinPages pages and analyzeGrowth
// times the pages its statistics counted (pg_class.relpages: 0 before the
// first ANALYZE or VACUUM).
const (
	analyzeMinPages = 8
	analyzeGrowth   = 2
)

// analyzeBackoff is how long a table whose ANALYZE failed (a
// statement_timeout shorter than its sampling, a migration dropping it)
// is left alone before it is tried again: every call would otherwise redo
// the failing work and log it once more.
const analyzeBackoff = time.Minute

// analyzeState remembers the tables whose ANALYZE failed, until when
// they are left alone. Only the maintenance leader calls AnalyzeGrown,
// but nothing stops two callers.
type analyzeState struct {
	mu    sync.Mutex
	until map[string]time.Time
}

func (a *analyzeState) skip(name string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return now.Before(a.until[name])
}

func (a *analyzeState) failed(name string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.until == nil {
		a.until = map[string]time.Time{}
	}
	a.until[name] = now.Add(analyzeBackoff)
}

// AnalyzeGrown implements store.Store. It compares each docket table's
// file size (an lseek, not the statistics collector, which lags) with
// pg_class.relpages, so a fresh table is caught within one call of
// reaching the thresholds.
//
// Only tables of the current schema that this role may analyze are
// looked at (ANALYZE by another role is a warning, not an error, and
// would be reported as done for ever). ANALYZE (SKIP_LOCKED) does not
// wait for the table's lock: autovacuum holding it (it is analyzing or
// vacuuming the table, which counts its pages too) or a migration
// waiting for it, the table is left for the next call, and never queues
// DDL behind a sampling pass. Whether it was analyzed is read back from
// relpages. A table that fails is left alone for analyzeBackoff; the
// others are still analyzed, and the errors are returned together.
func (s *Store) AnalyzeGrown(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT c.oid, c.relname, c.oid::regclass::text, c.relpages FROM pg_class c
		WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
			AND c.relkind = 'r' AND c.relname LIKE 'docket\_%'
			AND pg_has_role(c.relowner, 'USAGE')
			AND pg_relation_size(c.oid) >= $1 * current_setting('block_size')::bigint
			AND pg_relation_size(c.oid) >= $2 * greatest(c.relpages, 1)::bigint * current_setting('block_size')::bigint
		ORDER BY c.relname`, analyzeMinPages, analyzeGrowth)
	if err != nil {
		return nil, fmt.Errorf("find tables to analyze: %w", err)
	}
	type grown struct {
		oid             uint32
		name, qualified string
		pages           int32
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (grown, error) {
		var g grown
		err := r.Scan(&g.oid, &g.name, &g.qualified, &g.pages)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("find tables to analyze: %w", err)
	}
	var (
		done []string
		errs []error
	)
	for _, g := range tables {
		now := time.Now()
		if s.analyze.skip(g.name, now) {
			continue
		}
		// qualified is regclass's text: quoted where the names need it.
		if _, err := s.pool.Exec(ctx, `ANALYZE (SKIP_LOCKED) `+g.qualified); err != nil {
			if ctx.Err() != nil {
				return done, ctx.Err()
			}
			s.analyze.failed(g.name, now)
			errs = append(errs, fmt.Errorf("analyze %s: %w", g.name, err))
			continue
		}
		var pages int32
		if err := s.pool.QueryRow(ctx, `SELECT relpages FROM pg_class WHERE oid = $1`, g.oid).Scan(&pages); err != nil {
			errs = append(errs, fmt.Errorf("analyze %s: read its pages: %w", g.name, err))
			continue
		}
		if pages != g.pages { // else skipped: its lock was taken
			done = append(done, g.name)
		}
	}
	return done, errors.Join(errs...)
}
