package sqlite

import (
	"container/list"
	"context"
	"database/sql/driver"
	"fmt"
	"sync/atomic"

	"modernc.org/sqlite"
)

// stmtCacheSize bounds how many prepared statements each connection keeps.
// The store's own statements number a few hundred at most; queries built
// per call (an IN list of n placeholders, a batch of n rows) come in a few
// sizes each.
const stmtCacheSize = 256

// The driver parses a query given as text (db.ExecContext, tx.QueryContext)
// on every call, and only a statement prepared explicitly keeps its parse.
// Parsing was 44 % of the CPU of a crowd workload on SQLite. The store
// therefore opens its connections through cachingConnector: each connection
// keeps the statements it ran, by query text, and runs the next call of the
// same text from the kept statement. It works inside a transaction as
// outside, on the writer and on every reader, with no change to the code
// that runs the queries.
//
// database/sql never uses one driver connection from two goroutines at once
// (each call, and each Close of its rows, holds the connection's lock), so
// the cache needs no lock of its own.

// sqliteConn is what database/sql uses of modernc's connection.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// sqliteStmt is what the cache uses of modernc's prepared statement.
type sqliteStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// sqliteRows is what database/sql uses of modernc's rows (Rows.ColumnTypes
// needs the column-type methods).
type sqliteRows interface {
	driver.Rows
	driver.RowsColumnTypeDatabaseTypeName
	driver.RowsColumnTypeLength
	driver.RowsColumnTypeNullable
	driver.RowsColumnTypePrecisionScale
	driver.RowsColumnTypeScanType
}

// stmtStats counts what the caches of a Store's connections did, for
// tests: a query run again must not be parsed again, and every statement
// a cache dropped must be closed.
type stmtStats struct {
	prepares atomic.Int64 // statements prepared and kept
	closes   atomic.Int64 // kept statements closed
	uncached atomic.Int64 // calls run without the cache (their text was busy)
}

// cachingConnector opens modernc connections with a statement cache each.
type cachingConnector struct {
	driver.Connector
	stats *stmtStats
}

// newCachingConnector returns a connector for dsn whose connections count
// into stats.
func newCachingConnector(dsn string, stats *stmtStats) (*cachingConnector, error) {
	c, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return &cachingConnector{Connector: c, stats: stats}, nil
}

// Connect implements driver.Connector.
func (c *cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	inner, ok := dc.(sqliteConn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("sqlite driver connection %T lacks a method the store needs", dc)
	}
	return &cachingConn{sqliteConn: inner, stats: c.stats, stmts: map[string]*list.Element{}}, nil
}

// cachingConn is a modernc connection whose ExecContext and QueryContext run
// kept statements. Prepare and PrepareContext are the driver's own: a
// statement prepared explicitly belongs to its caller.
type cachingConn struct {
	sqliteConn
	stats *stmtStats
	lru   list.List // of *cachedStmt, the most recently used first
	stmts map[string]*list.Element
}

// cachedStmt is one kept statement.
type cachedStmt struct {
	query string
	st    sqliteStmt
	// busy: rows of it are open, so a call of the same text meanwhile (a
	// query inside the loop over another's rows) runs without the cache.
	busy bool
	// evicted: dropped from the cache while busy; its rows close it.
	evicted bool
}

// stmt returns query's kept statement, preparing and keeping it on first
// use, or nil when it is busy.
func (c *cachingConn) stmt(ctx context.Context, query string) (*cachedStmt, error) {
	if e, ok := c.stmts[query]; ok {
		s := e.Value.(*cachedStmt)
		if s.busy {
			return nil, nil
		}
		c.lru.MoveToFront(e)
		return s, nil
	}
	ds, err := c.sqliteConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	st, ok := ds.(sqliteStmt)
	if !ok {
		_ = ds.Close()
		return nil, fmt.Errorf("sqlite driver statement %T lacks a method the store needs", ds)
	}
	c.stats.prepares.Add(1)
	s := &cachedStmt{query: query, st: st}
	c.stmts[query] = c.lru.PushFront(s)
	if c.lru.Len() > stmtCacheSize {
		c.evict(c.lru.Back())
	}
	return s, nil
}

// evict drops e from the cache and closes its statement, or leaves that to
// its open rows.
func (c *cachingConn) evict(e *list.Element) {
	s := c.lru.Remove(e).(*cachedStmt)
	delete(c.stmts, s.query)
	if s.busy {
		s.evicted = true
		return
	}
	c.close(s)
}

// close closes a kept statement.
func (c *cachingConn) close(s *cachedStmt) {
	_ = s.st.Close()
	c.stats.closes.Add(1)
}

// ExecContext implements driver.ExecerContext.
func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	s, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		c.stats.uncached.Add(1)
		return c.sqliteConn.ExecContext(ctx, query, args)
	}
	return s.st.ExecContext(ctx, args)
}

// QueryContext implements driver.QueryerContext.
func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	s, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		c.stats.uncached.Add(1)
		return c.sqliteConn.QueryContext(ctx, query, args)
	}
	dr, err := s.st.QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	r, ok := dr.(sqliteRows)
	if !ok {
		_ = dr.Close()
		return nil, fmt.Errorf("sqlite driver rows %T lack a method the store needs", dr)
	}
	s.busy = true
	return &cachedRows{sqliteRows: r, c: c, s: s}, nil
}

// Close implements driver.Conn: the kept statements first.
func (c *cachingConn) Close() error {
	for e := c.lru.Front(); e != nil; e = e.Next() {
		c.close(e.Value.(*cachedStmt))
	}
	c.lru.Init()
	clear(c.stmts)
	return c.sqliteConn.Close()
}

// cachedRows are the rows of a kept statement: closing them frees it.
type cachedRows struct {
	sqliteRows
	c *cachingConn
	s *cachedStmt
}

// Close implements driver.Rows.
func (r *cachedRows) Close() error {
	err := r.sqliteRows.Close()
	if r.s != nil {
		r.s.busy = false
		if r.s.evicted {
			r.c.close(r.s)
		}
		r.s = nil
	}
	return err
}
