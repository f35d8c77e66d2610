package docket_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

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
