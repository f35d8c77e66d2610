package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// TestIsUnavailable: on the errors a real server and pgx give, a
// database not reached or a connection lost is unavailable (the
// connection refused, a server that does not answer within
// connect_timeout, a connection cut at connect or under a statement, one
// ended by pg_terminate_backend as a shutdown ends it), and a statement's
// own error is not (syntax, a unique violation, statement_timeout, a
// canceled or expired context, a database that does not exist).
func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	connect := func(u string) (*pgx.Conn, error) {
		c, err := pgx.Connect(ctx, u)
		if err == nil {
			t.Cleanup(func() { _ = c.Close(context.Background()) })
		}
		return c, err
	}
	unavailable := func(err error, what string) {
		t.Helper()
		require.Error(t, err, what)
		require.True(t, IsUnavailable(err), "%s: %v", what, err)
	}
	statements := func(err error, what string) {
		t.Helper()
		require.Error(t, err, what)
		require.False(t, IsUnavailable(err), "%s: %v", what, err)
		require.False(t, store.IsUnavailable(err), "%s: %v", what, err)
	}

	// A statement's own errors.
	_, err := b.s.pool.Exec(ctx, "SELEC 1")
	statements(err, "syntax")
	_, err = b.s.pool.Exec(ctx, "CREATE TABLE unavailable_probe (id int PRIMARY KEY); INSERT INTO unavailable_probe VALUES (1)")
	require.NoError(t, err)
	_, err = b.s.pool.Exec(ctx, "INSERT INTO unavailable_probe VALUES (1)")
	statements(err, "unique violation")
	err = pgx.BeginFunc(ctx, b.s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 10"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_sleep(5)")
		return err
	})
	statements(err, "statement_timeout")
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.s.pool.Exec(canceled, "SELECT 1")
	statements(err, "canceled context")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = b.s.pool.Exec(short, "SELECT pg_sleep(5)")
	statements(err, "expired context")
	require.False(t, IsUnavailable(store.ErrContention))
	require.False(t, IsUnavailable(io.EOF))
	require.False(t, IsUnavailable(nil))
	u, err := url.Parse(b.url)
	require.NoError(t, err)
	u.Path = "/outage503_no_such_database"
	_, err = connect(u.String())
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "3D000", pgErr.Code)
	statements(err, "no such database")

	// The connection refused: a port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := *u
	closed.Host = ln.Addr().String()
	closed.Path = ""
	require.NoError(t, ln.Close())
	_, err = connect(closed.String())
	unavailable(err, "connection refused")
	require.True(t, store.IsUnavailable(err), "the dial's error is in the chain")

	// Through a proxy: a connection cut under a statement, a new one cut
	// at connect, one not answered within connect_timeout.
	proxy := testdb.NewProxy(t)
	c, err := connect(proxy.URL(b.url))
	require.NoError(t, err)
	proxy.Cut()
	_, err = c.Exec(ctx, "SELECT 1")
	unavailable(err, "connection cut under a statement")
	var connErr *pgconn.ConnectError
	require.False(t, errors.As(err, &connErr), "a statement's error, not a connect's: %v", err)
	_, err = connect(proxy.URL(b.url))
	unavailable(err, "connection cut at connect")
	proxy.Mute()
	_, err = connect(proxy.URL(b.url) + "&connect_timeout=1")
	unavailable(err, "no answer within connect_timeout")
	proxy.Up()
	_, err = connect(proxy.URL(b.url))
	require.NoError(t, err, "back")

	// Ended by the server, as a shutdown ends every connection (57P01).
	victim, err := connect(b.url)
	require.NoError(t, err)
	_, err = b.s.pool.Exec(ctx, "SELECT pg_terminate_backend($1::int, 5000)", int64(victim.PgConn().PID())) // waits until it ended
	require.NoError(t, err)
	_, err = victim.Exec(ctx, "SELECT 1")
	unavailable(err, "terminated")
}
