package postgres

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/migration"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// createMigrationsTable makes the tracking table in the current schema.
const createMigrationsTable = `
CREATE TABLE IF NOT EXISTS docket_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL
)`

// lockMigrations serialises migrators of one schema until the transaction
// ends. The key is per schema so that schemas migrate independently.
const lockMigrations = `SELECT pg_advisory_xact_lock(hashtext('docket_migrate:' || current_schema()))`

func loadMigrations() ([]migration.File, error) {
	return migration.Load(migrationFS, "migrations")
}

// Migrate implements store.Store. Each migration runs in its own
// transaction together with its tracking row, under an advisory lock, so
// concurrent migrators apply each migration once. It returns the migrations
// it applied (Up) or reverted (Down), in the order it did so.
func (s *Store) Migrate(ctx context.Context, p *store.MigrateParams) ([]store.Migration, error) {
	files, err := loadMigrations()
	if err != nil {
		return nil, err
	}
	if p.Direction != store.Up && p.Direction != store.Down {
		return nil, fmt.Errorf("migrate: unknown direction %q", p.Direction)
	}
	if p.Steps < 0 {
		return nil, fmt.Errorf("migrate: steps must not be negative, got %d", p.Steps)
	}
	var done []store.Migration
	for p.Steps == 0 || len(done) < p.Steps {
		m, err := s.migrateStep(ctx, files, p.Direction)
		if err != nil {
			return done, err
		}
		if m == nil {
			break
		}
		done = append(done, *m)
	}
	return done, nil
}

// migrateStep applies the next migration up or the last one down in one
// transaction. It returns nil when there is nothing left to do.
func (s *Store) migrateStep(ctx context.Context, files []migration.File, dir store.Direction) (*store.Migration, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	if _, err := tx.Exec(ctx, lockMigrations); err != nil {
		return nil, fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, createMigrationsTable); err != nil {
		return nil, fmt.Errorf("migrate: create docket_migrations: %w", err)
	}
	applied, err := appliedMigrations(ctx, tx)
	if err != nil {
		return nil, err
	}

	if dir == store.Down {
		if unknown := store.UnknownMigrations(migration.Versions(files), applied); len(unknown) > 0 {
			return nil, &store.UnknownMigrationsError{Migrations: unknown}
		}
	}
	var f *migration.File
	if dir == store.Up {
		for i := range files {
			if _, ok := applied[files[i].Version]; !ok {
				f = &files[i]
				break
			}
		}
	} else {
		for i := len(files) - 1; i >= 0; i-- {
			if _, ok := applied[files[i].Version]; ok {
				f = &files[i]
				break
			}
		}
	}
	if f == nil {
		return nil, nil
	}

	m := &store.Migration{Version: f.Version, Name: f.Name}
	if dir == store.Up {
		if _, err := tx.Exec(ctx, f.Up, pgx.QueryExecModeSimpleProtocol); err != nil {
			return nil, fmt.Errorf("migrate up %04d_%s: %w", f.Version, f.Name, err)
		}
		m.Applied = true
		m.AppliedAt = time.Now().UTC().Truncate(time.Microsecond)
		if _, err := tx.Exec(ctx,
			`INSERT INTO docket_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
			f.Version, f.Name, m.AppliedAt); err != nil {
			return nil, fmt.Errorf("migrate up %04d_%s: record: %w", f.Version, f.Name, err)
		}
	} else {
		if _, err := tx.Exec(ctx, f.Down, pgx.QueryExecModeSimpleProtocol); err != nil {
			return nil, fmt.Errorf("migrate down %04d_%s: %w", f.Version, f.Name, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM docket_migrations WHERE version = $1`, f.Version); err != nil {
			return nil, fmt.Errorf("migrate down %04d_%s: record: %w", f.Version, f.Name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("migrate %s %04d_%s: commit: %w", dir, f.Version, f.Name, err)
	}
	return m, nil
}

// appliedMigrations reads the tracking table: version → its name and
// time.
func appliedMigrations(ctx context.Context, q pgx.Tx) (map[int]store.Migration, error) {
	rows, err := q.Query(ctx, `SELECT version, name, applied_at FROM docket_migrations`)
	if err != nil {
		return nil, fmt.Errorf("read docket_migrations: %w", err)
	}
	defer rows.Close()
	applied := map[int]store.Migration{}
	for rows.Next() {
		var m store.Migration
		if err := rows.Scan(&m.Version, &m.Name, &m.AppliedAt); err != nil {
			return nil, fmt.Errorf("read docket_migrations: %w", err)
		}
		m.Applied, m.AppliedAt = true, m.AppliedAt.UTC()
		applied[m.Version] = m
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read docket_migrations: %w", err)
	}
	return applied, nil
}

// MigrationStatus implements store.Store: every known migration, oldest
// first, with whether (and when) it was applied, then any applied
// migration this binary does not know (Unknown).
func (s *Store) MigrationStatus(ctx context.Context) ([]store.Migration, error) {
	files, err := loadMigrations()
	if err != nil {
		return nil, err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("migration status: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('docket_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	applied := map[int]store.Migration{}
	if exists {
		if applied, err = appliedMigrations(ctx, tx); err != nil {
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
