package docket

import (
	"fmt"

	"github.com/docket-run/docket/internal/engine"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/postgres"
)

// ErrNotFound: no job with that id.
var ErrNotFound = store.ErrNotFound

// ErrLeaseLost: the attempt no longer holds the job's lease (it expired and
// was rescued, or the job was canceled); its writes are refused.
var ErrLeaseLost = store.ErrLeaseLost

// ErrLeaseWithoutToken: a lease id without its token (<job id>.<attempt>),
// as dockets before lease tokens (28 Nov 2026) gave them, e.g. to a worker
// that held a lease across an upgrade. It is refused like any lease not
// held: errors.Is(err, ErrLeaseLost) is true too.
var ErrLeaseWithoutToken = fmt.Errorf("%w: the lease id has no token (a docket before lease tokens gave it)", ErrLeaseLost)

// ErrContention: the database aborted the call's transaction to break a
// deadlock with another one (PostgreSQL, SQLSTATE 40P01 or 40001), or
// another connection (on SQLite, typically another process) held the
// file's write lock for longer than the busy timeout of 10 s (SQLITE_BUSY).
// Nothing was written and the same call again normally succeeds; the HTTP
// API answers 503 with Retry-After.
var ErrContention = store.ErrContention

// IsStorageFull reports whether err is a write refused because the
// database has no room left (SQLite's SQLITE_FULL: a full disk, or PRAGMA
// max_page_count; PostgreSQL's disk_full, SQLSTATE 53100). Nothing of the
// write was kept; the same call can succeed once space is freed. The API
// answers it 507 problems/storage-full.
func IsStorageFull(err error) bool { return store.IsStorageFull(err) }

// IsUnavailable reports whether err is a call that failed because the
// database could not be reached or the connection to it was lost:
// PostgreSQL stopped, restarting or refusing connections for now, the
// network down, a connection ended by the server or reset under a
// statement. Nothing was wrong with the call, and it can succeed once the
// database is back; but a write whose connection was lost while it
// committed may have been committed, so send writes again with an
// idempotency key (or read first). A statement's own error (a constraint,
// a validation, a canceled context) is not one. The API answers it 503
// problems/database-unavailable with Retry-After, the dashboard a 503
// page.
func IsUnavailable(err error) bool { return postgres.IsUnavailable(err) }

// ErrNotInJob is returned by Progress and SetResult outside a handler.
var ErrNotInJob = engine.ErrNotInJob

// ErrCancelRequested is the cause (context.Cause) of a handler's context
// when the job was canceled while running.
var ErrCancelRequested = engine.ErrCancelRequested

// InvalidTransitionError: the state machine refused a change (e.g. retrying
// a job that succeeded). Nothing was changed.
type InvalidTransitionError = job.InvalidTransitionError

// ReasonCancelRequested is the Reason of the *InvalidTransitionError of
// Retry on a RUNNING job whose cancel is requested: the job will end
// CANCELED, so it is not answered unchanged; retry it once it has ended.
const ReasonCancelRequested = job.ReasonCancelRequested

// FatalError marks a handler error that must not be retried.
type FatalError = engine.FatalError

// Fatal wraps err so the job goes to DEAD at once instead of being retried.
func Fatal(err error) error { return &engine.FatalError{Err: err} }
