// Command postgres measures River on PostgreSQL with docket's bench harness:
//
//	go run . --database-url postgres://… --mode burn --jobs 100000
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

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
	pool, err := pgxpool.New(ctx, f.URL)
	if err != nil {
		return fmt.Errorf("open postgres: %w", err)
	}
	defer pool.Close()
	return riverbench.Run(ctx, f, "postgres", riverpgxv5.New(pool), func(ctx context.Context, q string) (int, error) {
		var n int
		err := pool.QueryRow(ctx, q).Scan(&n)
		return n, err
	})
}
