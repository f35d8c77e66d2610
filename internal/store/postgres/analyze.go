package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Thresholds of AnalyzeGrown (store.StatsRefresher): a table is analyzed
// once its file holds at least analyzeMinPages pages and analyzeGrowth
// times the pages its statistics counted (pg_class.relpages: 0 before the
// first ANALYZE or VACUUM).
const (
	analyzeMinPages = 8
	analyzeGrowth   = 2
)

// analyzeLockTimeout: ANALYZE waits this long for the table's lock
// (SHARE UPDATE EXCLUSIVE, which DML does not take). Autovacuum holds it
// while it analyzes the table (a few milliseconds at the sizes that
// matter: the analysis is then made twice) or vacuums it (maybe long:
// the table is skipped until the next look).
const analyzeLockTimeout = "1s"

// AnalyzeGrown implements store.Store. It compares each docket table's
// file size (an lseek, not the statistics collector, which lags) with
// pg_class.relpages, so a fresh table is caught within one call of
// reaching the thresholds.
func (s *Store) AnalyzeGrown(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT c.relname FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
			AND c.relname LIKE 'docket\_%'
			AND pg_relation_size(c.oid) >= $1 * current_setting('block_size')::bigint
			AND pg_relation_size(c.oid) >= $2 * greatest(c.relpages, 1)::bigint * current_setting('block_size')::bigint
		ORDER BY c.relname`, analyzeMinPages, analyzeGrowth)
	if err != nil {
		return nil, fmt.Errorf("find tables to analyze: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find tables to analyze: %w", err)
	}
	var done []string
	for _, name := range names {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+analyzeLockTimeout+`'`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `ANALYZE `+pgx.Identifier{name}.Sanitize())
			return err
		})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: autovacuum has it
			continue
		}
		if err != nil {
			return done, fmt.Errorf("analyze %s: %w", name, err)
		}
		done = append(done, name)
	}
	return done, nil
}
