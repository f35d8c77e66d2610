package docket

import (
	"database/sql"

	"github.com/docket-run/docket/internal/store/sqlite"
)

// SQLiteWriter is the writer connection pool (one connection) of a
// client on SQLite, for docket_test to set a per-connection pragma on
// (TestStorageFullHTTP's max_page_count); nil on PostgreSQL.
func SQLiteWriter(c *Client) *sql.DB {
	if s, ok := c.store.(*sqlite.Store); ok {
		return s.DB()
	}
	return nil
}
