package store

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// IsUnavailable reports whether err says the database could not be
// reached or the connection to it was lost, not that anything was wrong
// with the call: the same call can succeed once the database is back. It
// is true for
//
//   - a connection that could not be made: the dial failed (connection
//     refused, no route to the host, its name not resolved, the dial
//     timed out), or PostgreSQL refused to start a session for now
//     (cannot_connect_now, 57P03, while it starts up or shuts down;
//     too_many_connections, 53300);
//   - a connection lost: PostgreSQL ended it (admin_shutdown, 57P01: it
//     is stopping, or pg_terminate_backend; crash_shutdown, 57P02; any
//     connection_exception of class 08 but protocol_violation), or the
//     socket was reset, broken or closed under a statement
//     (ECONNRESET, EPIPE, ETIMEDOUT, an unexpected EOF).
//
// A statement's own error is not: a constraint violated, bad syntax, a
// serialization failure (ErrContention), a statement timeout, a canceled
// or expired context (a context that expired while the pool waited for a
// connection is not told from one that expired in a slow statement, so
// neither is taken for an outage), nor a password refused at connect (a
// configuration to fix, not an outage to wait out).
//
// Like IsStorageFull it reads the SQLSTATE of any error in err's chain
// that reports one, as pgx's do, and the standard library's network
// errors below pgx's, so that this package does not depend on the
// driver. A chain that reports a SQLSTATE is decided by it alone: the
// server answered. SQLite never reports one (its busy case is
// ErrContention).
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		return unavailableState(st.SQLState())
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		if opErr.Op == "dial" {
			return true
		}
		for _, lost := range connectionLost {
			if errors.Is(opErr.Err, lost) {
				return true
			}
		}
		return false
	}
	return errors.Is(err, io.ErrUnexpectedEOF)
}

// connectionLost are the errors of a read or a write on a connection the
// network or the server dropped.
var connectionLost = []error{
	syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE, syscall.ETIMEDOUT,
	syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ECONNREFUSED,
}

// unavailableState reports whether a SQLSTATE says the server ended, or
// would not start, the connection.
func unavailableState(code string) bool {
	switch code {
	case "57P01", "57P02", "57P03", "53300":
		return true
	case "08P01": // protocol_violation: a bug, not an outage
		return false
	}
	return len(code) == 5 && code[:2] == "08"
}
