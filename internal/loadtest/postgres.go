package loadtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// IsPostgres reports whether databaseURL names a PostgreSQL database.
func IsPostgres(databaseURL string) bool {
	return strings.HasPrefix(databaseURL, "postgres://") || strings.HasPrefix(databaseURL, "postgresql://")
}

// NewPostgresSchema creates a schema of its own for one run on the
// PostgreSQL at base (as internal/testdb does for tests) and returns a URL
// whose search_path is that schema, and a function that drops it.
func NewPostgresSchema(ctx context.Context, base string) (string, func(context.Context) error, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, fmt.Errorf("parse the database URL: %w", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "docket_load_" + hex.EncodeToString(b[:])
	exec := func(ctx context.Context, sql string) error {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return fmt.Errorf("connect to %s: %w", u.Redacted(), err)
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, fmt.Errorf("create schema %s: %w", schema, err)
	}
	drop := func(ctx context.Context) error {
		if err := exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
		return nil
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}
