package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// openCacheStore opens a Store on a new file with a table t(n) of the
// numbers 1..5.
func openCacheStore(t *testing.T) *Store {
	t.Helper()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "cache.db"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	_, err = s.writer.ExecContext(ctx, `CREATE TABLE t (n INTEGER PRIMARY KEY)`)
	require.NoError(t, err)
	_, err = s.writer.ExecContext(ctx, `INSERT INTO t (n) VALUES (1), (2), (3), (4), (5)`)
	require.NoError(t, err)
	return s
}

// writerCache runs fn on the cache of the writer's one connection.
func writerCache(t *testing.T, s *Store, fn func(c *cachingConn)) {
	t.Helper()
	conn, err := s.writer.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.Raw(func(dc any) error {
		fn(dc.(*cachingConn))
		return nil
	}))
}

// TestStmtCacheReuses: a query run again, on the writer inside and outside
// transactions and on the readers, is prepared once per connection, and
// gives the right answers every time.
func TestStmtCacheReuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openCacheStore(t)
	const q = `SELECT count(*), coalesce(sum(n), 0) FROM t WHERE n >= ?`
	before := s.stmtStats.prepares.Load()
	for i := range 50 {
		from := i%6 + 1
		want := 0
		for n := from; n <= 5; n++ {
			want += n
		}
		var count, sum int
		require.NoError(t, s.reader.QueryRowContext(ctx, q, from).Scan(&count, &sum))
		require.Equal(t, want, sum, "reader, from %d", from)
		require.NoError(t, s.write(ctx, func(tx *sql.Tx) error {
			if err := tx.QueryRowContext(ctx, q, from).Scan(&count, &sum); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `UPDATE t SET n = n WHERE n = ?`, from)
			return err
		}))
		require.Equal(t, want, sum, "writer, from %d", from)
	}
	// The query on the writer and on each reader connection used (the
	// readers' pool may open several), and the UPDATE once.
	readers := int64(s.reader.Stats().OpenConnections)
	require.LessOrEqual(t, s.stmtStats.prepares.Load()-before, 2+readers)
}

// TestStmtCacheNested: the same text queried again while its rows are open
// (a lookup inside the loop over a listing) runs beside the kept statement
// instead of resetting it under the open rows.
func TestStmtCacheNested(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openCacheStore(t)
	const q = `SELECT n FROM t WHERE n >= ? ORDER BY n`
	prepares, uncached := s.stmtStats.prepares.Load(), s.stmtStats.uncached.Load()
	var pairs []string
	require.NoError(t, s.write(ctx, func(tx *sql.Tx) error {
		outer, err := tx.QueryContext(ctx, q, 4)
		if err != nil {
			return err
		}
		defer outer.Close()
		for outer.Next() {
			var a int
			if err := outer.Scan(&a); err != nil {
				return err
			}
			inner, err := tx.QueryContext(ctx, q, 5)
			if err != nil {
				return err
			}
			for inner.Next() {
				var b int
				if err := inner.Scan(&b); err != nil {
					return err
				}
				pairs = append(pairs, fmt.Sprint(a, b))
			}
			if err := inner.Close(); err != nil {
				return err
			}
		}
		return outer.Err()
	}))
	require.Equal(t, []string{"4 5", "5 5"}, pairs)
	// q was kept for the outer rows and both inner queries ran beside it.
	require.Equal(t, int64(1), s.stmtStats.prepares.Load()-prepares)
	require.Equal(t, int64(2), s.stmtStats.uncached.Load()-uncached)
	// The kept statement is free again once the outer rows closed.
	var n int
	require.NoError(t, s.writer.QueryRowContext(ctx, q, 3).Scan(&n))
	require.Equal(t, 3, n)
	require.Equal(t, int64(1), s.stmtStats.prepares.Load()-prepares)
	require.Equal(t, int64(2), s.stmtStats.uncached.Load()-uncached)
}

// TestStmtCacheFreed: however a kept statement's rows end — closed, left
// open at a rollback or a commit, their context canceled, an error in a
// row, no row at all — the statement is free for the next call of its
// text, which runs from it without parsing again.
func TestStmtCacheFreed(t *testing.T) {
	t.Parallel()
	// Row 3 fails (malformed JSON), so reading from 1 ends in an error.
	const q = `SELECT n, CASE WHEN n = 3 THEN json('x') ELSE 0 END FROM t WHERE n >= ? ORDER BY n`
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, s *Store)
	}{
		{"Closed", func(t *testing.T, s *Store) {
			rows, err := s.writer.QueryContext(t.Context(), q, 4)
			require.NoError(t, err)
			require.True(t, rows.Next())
			require.NoError(t, rows.Close())
		}},
		{"Rollback", func(t *testing.T, s *Store) {
			tx, err := s.writer.BeginTx(t.Context(), nil)
			require.NoError(t, err)
			rows, err := tx.QueryContext(t.Context(), q, 4)
			require.NoError(t, err)
			require.True(t, rows.Next())
			require.NoError(t, tx.Rollback())
		}},
		{"Commit", func(t *testing.T, s *Store) {
			tx, err := s.writer.BeginTx(t.Context(), nil)
			require.NoError(t, err)
			rows, err := tx.QueryContext(t.Context(), q, 4)
			require.NoError(t, err)
			require.True(t, rows.Next())
			require.NoError(t, tx.Commit())
		}},
		{"Canceled", func(t *testing.T, s *Store) {
			ctx, cancel := context.WithCancel(t.Context())
			rows, err := s.writer.QueryContext(ctx, q, 4)
			require.NoError(t, err)
			require.True(t, rows.Next())
			cancel() // database/sql closes the rows in the background
			deadline := time.Now().Add(10 * time.Second)
			for {
				var busy bool
				writerCache(t, s, func(c *cachingConn) {
					if e, ok := c.stmts[q]; ok {
						busy = e.Value.(*cachedStmt).busy
					}
				})
				if !busy {
					break
				}
				require.True(t, time.Now().Before(deadline), "the canceled rows were never closed")
				time.Sleep(10 * time.Millisecond)
			}
		}},
		{"ErrorInRow", func(t *testing.T, s *Store) {
			rows, err := s.writer.QueryContext(t.Context(), q, 1)
			require.NoError(t, err)
			for rows.Next() {
			}
			require.ErrorContains(t, rows.Err(), "JSON")
		}},
		{"NoRows", func(t *testing.T, s *Store) {
			var n, j int
			require.ErrorIs(t, s.writer.QueryRowContext(t.Context(), q, 99).Scan(&n, &j), sql.ErrNoRows)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openCacheStore(t)
			tc.end(t, s)
			prepares, uncached := s.stmtStats.prepares.Load(), s.stmtStats.uncached.Load()
			var n, j int
			require.NoError(t, s.writer.QueryRowContext(t.Context(), q, 5).Scan(&n, &j))
			require.Equal(t, 5, n)
			require.Equal(t, prepares, s.stmtStats.prepares.Load(), "parsed again")
			require.Equal(t, uncached, s.stmtStats.uncached.Load(), "run beside a busy statement")
		})
	}
}

// TestStmtCacheEvicts: more distinct texts than the cache holds evict the
// least recently used; an evicted statement whose rows are open keeps
// them working and is closed with them.
func TestStmtCacheEvicts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openCacheStore(t)
	const q = `SELECT n FROM t ORDER BY n`
	conn, err := s.writer.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, q)
	require.NoError(t, err)
	require.True(t, rows.Next())
	// Only the rows' own connection may run statements meanwhile: the
	// writer has one. So the others go through conn too, which database/sql
	// allows while rows are open only for other texts.
	before := s.stmtStats.prepares.Load()
	for i := range stmtCacheSize + 10 {
		var got int
		require.NoError(t, conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT %d + n FROM t WHERE n = 1`, i)).Scan(&got))
		require.Equal(t, i+1, got)
	}
	require.Equal(t, int64(stmtCacheSize+10), s.stmtStats.prepares.Load()-before)
	var ns []int
	for {
		var n int
		require.NoError(t, rows.Scan(&n))
		ns = append(ns, n)
		if !rows.Next() {
			break
		}
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Equal(t, []int{1, 2, 3, 4, 5}, ns)
	// q was evicted: running it again prepares it again; the most recent
	// text was kept and does not.
	before = s.stmtStats.prepares.Load()
	var n int
	require.NoError(t, conn.QueryRowContext(ctx, q).Scan(&n))
	require.NoError(t, conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT %d + n FROM t WHERE n = 1`, stmtCacheSize+9)).Scan(&n))
	require.Equal(t, int64(1), s.stmtStats.prepares.Load()-before)
	// Every statement dropped was closed, the one evicted under its rows
	// too: what is open is what the cache holds.
	require.NoError(t, conn.Raw(func(dc any) error {
		c := dc.(*cachingConn)
		require.Equal(t, stmtCacheSize, c.lru.Len())
		require.Equal(t, int64(c.lru.Len()), s.stmtStats.prepares.Load()-s.stmtStats.closes.Load())
		return nil
	}))
}

// TestStmtCacheErrors: a failing statement leaves its kept statement
// usable, and a column's type is still reported through the cache's rows.
func TestStmtCacheErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openCacheStore(t)
	const insert = `INSERT INTO t (n) VALUES (?)`
	_, err := s.writer.ExecContext(ctx, insert, 1)
	require.ErrorContains(t, err, "UNIQUE")
	_, err = s.writer.ExecContext(ctx, insert, 6)
	require.NoError(t, err)
	rows, err := s.reader.QueryContext(ctx, `SELECT n FROM t WHERE n = ?`, 6)
	require.NoError(t, err)
	types, err := rows.ColumnTypes()
	require.NoError(t, err)
	require.Equal(t, "INTEGER", types[0].DatabaseTypeName())
	require.True(t, rows.Next())
	require.NoError(t, rows.Close())
}

// TestStmtCacheSchemaChange: a statement kept by one Store runs again
// after another Store's connection changed the schema (a column added, an
// index made; SQLite sees the change through the file, as it would from
// another process), with the new schema's answer and no error.
func TestStmtCacheSchemaChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a := openCacheStore(t)
	var path string
	require.NoError(t, a.writer.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path))
	b, err := Open(ctx, path, store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })

	const q = `SELECT * FROM t WHERE n = ?`
	columns := func() []string {
		t.Helper()
		rows, err := a.writer.QueryContext(ctx, q, 2) // one connection: the same cache each time
		require.NoError(t, err)
		defer rows.Close()
		cols, err := rows.Columns()
		require.NoError(t, err)
		require.True(t, rows.Next())
		return cols
	}
	require.Equal(t, []string{"n"}, columns())
	prepares := a.stmtStats.prepares.Load()
	_, err = b.writer.ExecContext(ctx, `ALTER TABLE t ADD COLUMN m TEXT NOT NULL DEFAULT 'x'`)
	require.NoError(t, err)
	_, err = b.writer.ExecContext(ctx, `CREATE INDEX t_m ON t (m)`)
	require.NoError(t, err)
	require.Equal(t, []string{"n", "m"}, columns())
	require.Equal(t, prepares, a.stmtStats.prepares.Load(), "the kept statement was compiled again by SQLite, not dropped")
}
