package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"time"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/migration"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

const createMigrationsTableSQL = `CREATE TABLE IF NOT EXISTS docket_migrations (
	version    INTEGER NOT NULL PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
) STRICT`

// migrations returns the embedded schema migrations.
func migrations() ([]migration.File, error) {
	return migration.Load(migrationFS, "migrations")
}

// Migrate implements store.Store. Each migration runs in its own write
// transaction together with its docket_migrations row, and re-checks whether
// it is applied inside that transaction, so concurrent migrators (in several
// processes) apply each migration once. It returns the migrations it applied
// (Up) or reverted (Down), in the order it did so.
func (s *Store) Migrate(ctx context.Context, p *store.MigrateParams) ([]store.Migration, error) {
	files, err := migrations()
	if err != nil {
		return nil, err
	}
	if p.Direction != store.Up && p.Direction != store.Down {
		return nil, fmt.Errorf("migrate: unknown direction %q", p.Direction)
	}
	if p.Steps < 0 {
		return nil, fmt.Errorf("migrate: steps must not be negative, got %d", p.Steps)
	}
	if _, err := s.writer.ExecContext(ctx, createMigrationsTableSQL); err != nil {
		return nil, fmt.Errorf("create docket_migrations: %w", err)
	}
	todo := files
	if p.Direction == store.Down {
		todo = make([]migration.File, len(files))
		for i, f := range files {
			todo[len(files)-1-i] = f
		}
	}
	known := migration.Versions(files)
	var done []store.Migration
	for _, f := range todo {
		if p.Steps > 0 && len(done) == p.Steps {
			break
		}
		m, changed, err := s.migrateOne(ctx, f, known, p.Direction)
		if err != nil {
			return done, err
		}
		if changed {
			done = append(done, m)
		}
	}
	return done, nil
}

// migrateOne applies (up) or reverts (down) f if it is not already so.
// known lists this binary's versions: down refuses while the database has
// others (store.UnknownMigrationsError).
func (s *Store) migrateOne(ctx context.Context, f migration.File, known []int, dir store.Direction) (store.Migration, bool, error) {
	m := store.Migration{Version: f.Version, Name: f.Name}
	changed := false
	err := s.write(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx,
			`SELECT count(*) FROM docket_migrations WHERE version = ?`, f.Version).Scan(&n); err != nil {
			return fmt.Errorf("read migration %d: %w", f.Version, err)
		}
		applied := n > 0
		if dir == store.Down && applied {
			all, err := appliedMigrations(ctx, tx)
			if err != nil {
				return err
			}
			if unknown := store.UnknownMigrations(known, all); len(unknown) > 0 {
				return &store.UnknownMigrationsError{Migrations: unknown}
			}
		}
		switch {
		case dir == store.Up && !applied:
			if _, err := tx.ExecContext(ctx, f.Up); err != nil {
				return fmt.Errorf("migrate up %04d_%s: %w", f.Version, f.Name, err)
			}
			now := time.Now().UTC()
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO docket_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				f.Version, f.Name, micros(now)); err != nil {
				return fmt.Errorf("record migration %d: %w", f.Version, err)
			}
			m.Applied, m.AppliedAt = true, fromMicros(micros(now))
			changed = true
		case dir == store.Down && applied:
			if _, err := tx.ExecContext(ctx, f.Down); err != nil {
				return fmt.Errorf("migrate down %04d_%s: %w", f.Version, f.Name, err)
			}
			if _, err := tx.ExecContext(ctx,
				`DELETE FROM docket_migrations WHERE version = ?`, f.Version); err != nil {
				return fmt.Errorf("unrecord migration %d: %w", f.Version, err)
			}
			changed = true
		}
		return nil
	})
	if err != nil {
		return m, false, err
	}
	// Cached prepared statements need no reset: SQLite recompiles them
	// when the schema changes.
	return m, changed, nil
}

// MigrationStatus implements store.Store: every known migration, with
// whether and when it was applied, then any applied migration this binary
// does not know (Unknown).
func (s *Store) MigrationStatus(ctx context.Context) ([]store.Migration, error) {
	files, err := migrations()
	if err != nil {
		return nil, err
	}
	applied := map[int]store.Migration{}
	var exists int
	if err := s.reader.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'docket_migrations'`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("read migration status: %w", err)
	}
	if exists > 0 {
		if applied, err = appliedMigrations(ctx, s.reader); err != nil {
			return nil, err
		}
	}
	out := make([]store.Migration, len(files))
	for i, f := range files {
		a, ok := applied[f.Version]
		out[i] = store.Migration{Version: f.Version, Name: f.Name, Applied: ok, AppliedAt: a.AppliedAt}
	}
	return append(out, store.UnknownMigrations(migration.Versions(files), applied)...), nil
}

// appliedMigrations reads the tracking table: version → its name and
// time.
func appliedMigrations(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (map[int]store.Migration, error) {
	rows, err := q.QueryContext(ctx, `SELECT version, name, applied_at FROM docket_migrations`)
	if err != nil {
		return nil, fmt.Errorf("read migration status: %w", err)
	}
	defer rows.Close()
	applied := map[int]store.Migration{}
	for rows.Next() {
		var (
			m  store.Migration
			at int64
		)
		if err := rows.Scan(&m.Version, &m.Name, &at); err != nil {
			return nil, fmt.Errorf("scan migration status: %w", err)
		}
		m.Applied, m.AppliedAt = true, fromMicros(at)
		applied[m.Version] = m
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read migration status: %w", err)
	}
	return applied, nil
}
