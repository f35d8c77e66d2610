// Command sqlite measures River on SQLite (riversqlite) with docket's bench
// harness:
//
//	go run . --database-url sqlite:/tmp/river.db --mode burn --jobs 100000
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/riverqueue/river/riverdriver/riversqlite"
	_ "modernc.org/sqlite"

	"github.com/docket-run/docket/bench/river"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	f, err := riverbench.ParseFlags()
	if err != nil {
		return err
	}
	path, ok := strings.CutPrefix(f.URL, "sqlite:")
	if !ok || path == "" {
		return errors.New("--database-url: want sqlite:PATH")
	}
	// The durability of docket's SQLite backend: WAL with synchronous FULL.
	// One connection, as River advises for SQLite.
	db, err := sql.Open("sqlite", "file:"+path+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return fmt.Errorf("open sqlite: %w", err)
	}
	db.SetMaxOpenConns(1)
	defer db.Close()
	return riverbench.Run(ctx, f, "sqlite", riversqlite.New(db), func(ctx context.Context, q string) (int, error) {
		var n int
		err := db.QueryRowContext(ctx, q).Scan(&n)
		return n, err
	})
}
