package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/docket-run/docket/internal/store"
)

// IsUnavailable is store.IsUnavailable, which reads only the SQLSTATE and
// the network errors in err's chain, and also true for a connection pgx
// could not make (*pgconn.ConnectError) for a reason the server did not
// give: it did not answer within connect_timeout, or the connection was
// cut during the handshake. A connection the server refused with a
// SQLSTATE is decided by that code: cannot_connect_now (57P03) is an
// outage, a password refused (28P01) or a database that does not exist
// (3D000) is a configuration to fix. And true for pgconn.ErrConnClosed:
// pgx answers so a statement on a connection whose socket went away (as
// it does for the first statement after the server or the network cut
// the connection; the pool discards such a connection, so another
// statement gets a new one).
func IsUnavailable(err error) bool {
	if errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		var st interface{ SQLState() string }
		if !errors.As(connErr, &st) {
			return true
		}
	}
	return store.IsUnavailable(err)
}
