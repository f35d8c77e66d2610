// Package storeurl opens the store a database URL names: postgres:// (or
// postgresql://) for PostgreSQL, sqlite:PATH for SQLite. It is the one
// place that reads the scheme, for the Client, the tests' stores and the
// chaos run.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/postgres"
	"github.com/docket-run/docket/internal/store/sqlite"
)

// Open opens the store url names with opts (defaults filled). It does not
// migrate.
func Open(ctx context.Context, url string, opts store.Options) (store.Store, error) {
	opts = opts.WithDefaults()
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		st, err := postgres.Open(ctx, url, opts)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		return st, nil
	case strings.HasPrefix(url, "sqlite:"):
		path, _, err := SQLitePath(url)
		if err != nil {
			return nil, err
		}
		st, err := sqlite.Open(ctx, path, opts)
		if err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", path, err)
		}
		return st, nil
	}
	return nil, fmt.Errorf("database url %q: scheme must be postgres://, postgresql:// or sqlite:PATH", redact(url))
}

// SQLitePath is the file a sqlite: URL names (sqlite:PATH or
// sqlite://PATH), and whether url is one. A URL with nothing after the
// scheme is refused, and so are options: a file: URI (sqlite:file:…) and a
// query string (sqlite:docket.db?mode=ro), which docket would otherwise
// take as part of the file's name and open, or create, another database
// than the one meant. docket sets SQLite's options itself.
func SQLitePath(url string) (path string, ok bool, err error) {
	rest, ok := strings.CutPrefix(url, "sqlite:")
	if !ok {
		return "", false, nil
	}
	path = strings.TrimPrefix(rest, "//")
	switch {
	case path == "":
		return "", true, errors.New(`database url "sqlite:" needs a file path, e.g. sqlite:docket.db`)
	case strings.HasPrefix(path, "file:"):
		return "", true, fmt.Errorf("database url %q: write a file path after sqlite:, not a file: URI (docket sets SQLite's options itself), e.g. sqlite:docket.db", url)
	case strings.Contains(path, "?"):
		return "", true, fmt.Errorf("database url %q: sqlite:PATH takes no options after ? (docket sets SQLite's options itself; a file name with ? is not supported)", url)
	}
	return path, true, nil
}

// redact hides a password in a URL for error messages.
func redact(url string) string {
	at := strings.LastIndex(url, "@")
	scheme := strings.Index(url, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return url
	}
	if colon := strings.Index(url[scheme+3:at], ":"); colon >= 0 {
		return url[:scheme+3+colon] + ":xxxxx" + url[at:]
	}
	return url
}
