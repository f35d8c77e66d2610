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

// analyzeRefreshTarget is the statistics target of a size refresh
// (analyzeTable): its sample is 300 times as many rows, 3,000, where a
// full ANALYZE at PostgreSQL's default target samples 30,000 (and the
// pages they are on) and sorts each column's values. At the crowd
// benchmark's sizes (20,000 units, 60,000 assignments and judgments,
// ~80,000 outbox rows) a full ANALYZE of one table held a core of
// PostgreSQL for 100-450 ms; a refresh of its key, 9-17 ms.
const analyzeRefreshTarget = 10

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
//
// A full ANALYZE of docket_jobs samples only the columns plans read: the
// others have statistics target 0 (migration 0023), which cut the first
// pass over a fresh table of a 200,000-job burn by about 40 %.
//
// A table analyzed whole before (a column besides its one-column primary
// key has statistics) that pg_class counts at least as many rows in as a
// full ANALYZE samples (300 × default_statistics_target: 30,000 by
// default) gets a size refresh instead (analyzeTable): what the doubling
// is for is the plans' idea of the table's size, its columns' statistics
// already come from a full sample, and a full ANALYZE of a table of tens
// of thousands of rows holds a core for a few hundred milliseconds, a
// pause for every statement waiting for that core (the crowd benchmark's
// submit p99 bursts, docs/benchmarks.md, "Seventh round: the submit
// bursts"). Its columns' statistics are then autovacuum's to refresh, as
// they were before this pass existed — so only when autovacuum analyzes
// the table (autovacuum and track_counts on, autovacuum_enabled not off
// for it); with autovacuum off, a full ANALYZE at each doubling is the
// only one the table gets, as before. A smaller table is analyzed whole
// at each doubling, as before: statistics from its first few hundred
// rows would be a poor guide for long (with them left, the outbox's
// marks read a fifth more buffers a judgment in the crowd benchmark).
// The row count read is pg_class's, which a VACUUM or CREATE INDEX sets
// too: a table analyzed whole at 2,000 rows and vacuumed at 40,000 gets
// a size refresh at its next doubling, and keeps the columns' statistics
// of 2,000 rows until autovacuum's next analysis, which its changes since
// then (not reset by the refresh) make due.
func (s *Store) AnalyzeGrown(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT c.oid, c.relname, c.oid::regclass::text, c.relpages,
			coalesce((SELECT a.attname FROM pg_index i
				JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
				WHERE i.indrelid = c.oid AND i.indisprimary AND i.indnatts = 1
					AND c.reltuples >= 300 * current_setting('default_statistics_target')::real
					-- autovacuum will analyze it whole: else each doubling does
					AND current_setting('autovacuum')::bool AND current_setting('track_counts')::bool
					AND NOT EXISTS (SELECT 1 FROM pg_options_to_table(c.reloptions) o
						WHERE o.option_name = 'autovacuum_enabled' AND NOT o.option_value::bool)
					AND EXISTS (SELECT 1 FROM pg_stats s WHERE s.schemaname = current_schema()
						AND s.tablename = c.relname AND s.attname <> a.attname)), '') AS refresh
		FROM pg_class c
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
		refresh         string // the column a size refresh analyzes; "" for a full ANALYZE
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (grown, error) {
		var g grown
		err := r.Scan(&g.oid, &g.name, &g.qualified, &g.pages, &g.refresh)
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
		if err := s.analyzeTable(ctx, g.qualified, g.refresh); err != nil {
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

// analyzeTable analyzes table (regclass's text: quoted where the names
// need it) whole, or, when refresh names a column, refreshes its size:
// ANALYZE of that column alone, from a sample of analyzeRefreshTarget
// × 300 rows. The size refresh counts the table's pages and rows
// (pg_class) as a full ANALYZE does, which makes the cached plans that
// read the table be planned again, and leaves every other column's
// statistics as they were. It does not reset the table's count of
// changes since its last analysis either (PostgreSQL resets it only
// for an ANALYZE of every column), so autovacuum analyzes the table
// whole on its own schedule, now reckoned from the refreshed row
// count.
func (s *Store) analyzeTable(ctx context.Context, table, refresh string) error {
	if refresh == "" {
		_, err := s.pool.Exec(ctx, `ANALYZE (SKIP_LOCKED) `+table)
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL default_statistics_target = %d`, analyzeRefreshTarget)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `ANALYZE (SKIP_LOCKED) `+table+` (`+pgx.Identifier{refresh}.Sanitize()+`)`)
		return err
	})
}
