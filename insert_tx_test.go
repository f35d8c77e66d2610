package docket_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// Jobs inserted in the caller's transaction exist if and only if it commits.
func TestInsertInCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("sqlite *sql.Tx", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testdb.Backend{Name: "sqlite", URL: testdb.SQLiteURL}, fastConfig())
		db, err := sql.Open("sqlite", strings.TrimPrefix(b.url, "sqlite:")+"?_pragma=busy_timeout(10000)")
		require.NoError(t, err)
		defer db.Close()
		checkSQLTx(t, b, db)
	})
	t.Run("postgres *sql.Tx", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testdb.Backend{Name: "postgres", URL: testdb.PostgresURL}, fastConfig())
		db, err := sql.Open("pgx", b.url)
		require.NoError(t, err)
		defer db.Close()
		checkSQLTx(t, b, db)
	})
	t.Run("postgres pgx.Tx", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testdb.Backend{Name: "postgres", URL: testdb.PostgresURL}, fastConfig())
		conn, err := pgx.Connect(ctx, b.url)
		require.NoError(t, err)
		defer conn.Close(ctx)

		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		rolled, err := b.client.InsertTx(ctx, tx, echoArgs{N: 1}, nil)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		_, err = b.client.Get(ctx, rolled.Job.ID)
		require.ErrorIs(t, err, docket.ErrNotFound)

		tx, err = conn.Begin(ctx)
		require.NoError(t, err)
		res, err := b.client.InsertManyTx(ctx, tx, []docket.InsertParams{{Args: echoArgs{N: 2}}, {Args: echoArgs{N: 3}}})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		for _, r := range res {
			got, err := b.client.Get(ctx, r.Job.ID)
			require.NoError(t, err)
			require.Equal(t, docket.JobStateQueued, got.State)
		}
	})
}

func checkSQLTx(t *testing.T, b *bundle, db *sql.DB) {
	ctx := context.Background()
	// No transaction is refused as InsertTx refuses one, on both backends
	// (PostgreSQL's store used to panic on a nil *sql.Tx).
	_, err := b.client.InsertSQLTx(ctx, nil, echoArgs{N: 1}, nil)
	require.EqualError(t, err, "insert in transaction: tx is nil")

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	rolled, err := b.client.InsertSQLTx(ctx, tx, echoArgs{N: 1}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	_, err = b.client.Get(ctx, rolled.Job.ID)
	require.ErrorIs(t, err, docket.ErrNotFound)

	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	res, err := b.client.InsertSQLTx(ctx, tx, echoArgs{N: 2}, &docket.InsertOpts{IdempotencyKey: "k"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	got, err := b.client.Get(ctx, res.Job.ID)
	require.NoError(t, err)
	require.Equal(t, docket.JobStateQueued, got.State)
	dup, err := b.client.Insert(ctx, echoArgs{N: 2}, &docket.InsertOpts{IdempotencyKey: "k"})
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.Equal(t, res.Job.ID, dup.Job.ID)

	// Many jobs in one *sql.Tx: all of them or none.
	_, err = b.client.InsertManySQLTx(ctx, nil, []docket.InsertParams{{Args: echoArgs{N: 1}}})
	require.EqualError(t, err, "insert in transaction: tx is nil")
	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	many, err := b.client.InsertManySQLTx(ctx, tx, []docket.InsertParams{{Args: echoArgs{N: 3}}, {Args: echoArgs{N: 4}}})
	require.NoError(t, err)
	require.Len(t, many, 2)
	require.NoError(t, tx.Rollback())
	for _, r := range many {
		_, err = b.client.Get(ctx, r.Job.ID)
		require.ErrorIs(t, err, docket.ErrNotFound)
	}
	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	many, err = b.client.InsertManySQLTx(ctx, tx, []docket.InsertParams{
		{Args: echoArgs{N: 5}},
		{Args: echoArgs{N: 2}, Opts: &docket.InsertOpts{IdempotencyKey: "k"}}, // committed above
		{Args: echoArgs{N: 6}, Opts: &docket.InsertOpts{Queue: "other"}},
	})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.Len(t, many, 3)
	require.False(t, many[0].Duplicate)
	require.True(t, many[1].Duplicate)
	require.Equal(t, res.Job.ID, many[1].Job.ID)
	for _, r := range many {
		got, err := b.client.Get(ctx, r.Job.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateQueued, got.State)
	}
	require.Equal(t, "other", many[2].Job.Queue)
}

// TestNotifyInsertedWakesWorkers: on SQLite nothing tells the workers
// about jobs inserted in the caller's *sql.Tx when it commits (docket
// cannot see that commit); they waited for their next poll. NotifyInserted
// after the commit starts them at once: here the poll is an hour away.
func TestNotifyInsertedWakesWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := fastConfig()
	cfg.PollInterval = time.Hour
	b := setup(t, testdb.Backend{Name: "sqlite", URL: testdb.SQLiteURL}, cfg)
	docket.AddHandler(b.worker, func(context.Context, *docket.Job[echoArgs]) error { return nil })
	b.start(t)
	// The worker's first poll is behind it once a job the Client inserted
	// (and woke it for) has run.
	first, err := b.client.Insert(ctx, echoArgs{N: 1}, nil)
	require.NoError(t, err)
	b.waitState(t, first.Job.ID, docket.JobStateSuccess)

	db, err := sql.Open("sqlite", strings.TrimPrefix(b.url, "sqlite:")+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	res, err := b.client.InsertManySQLTx(ctx, tx, []docket.InsertParams{{Args: echoArgs{N: 2}}, {Args: echoArgs{N: 3}}})
	require.NoError(t, err)
	one, err := b.client.InsertSQLTx(ctx, tx, echoArgs{N: 4}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	b.client.NotifyInserted(append(res, one, nil)...)
	for _, r := range append(res, one) {
		row := b.waitState(t, r.Job.ID, docket.JobStateSuccess)
		require.Less(t, row.FinishedAt.Sub(row.CreatedAt), 10*time.Second, "not at the next poll")
	}
}
