package store

import (
	"context"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
)

// Transactor is the part of Store that runs changes spanning several calls,
// and several domains, in one transaction.
type Transactor interface {
	// InTx runs fn inside one write transaction and commits it when fn
	// returns nil. When fn returns an error, everything fn wrote is rolled
	// back and the error is returned as is. Wakeups for what fn changed
	// are sent after the commit, never for a rollback.
	//
	// fn must write through tx only: on SQLite the transaction holds the
	// one writer connection, so other Store methods called from fn would
	// wait for it forever.
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
}

// Tx is the store inside one transaction (Transactor.InTx,
// InboxStore.InboxHandle). It embeds one interface per domain, each the
// part of that domain's Store interface that makes sense inside a caller's
// transaction; the methods behave as the Store methods of the same name,
// with the same outbox rows, but run on the transaction: their writes
// commit or roll back together, and each reads what the transaction wrote
// before it.
//
// A method that fails with *job.InvalidTransitionError,
// *flow.InvalidTransitionError, *crowd.InvalidTransitionError,
// *crowd.AssignmentError, *crowd.JudgmentConflictError, a
// *crowd.ValidationError or ErrNotFound leaves the transaction
// usable, so fn may go on (say, after a transition it expected could be
// refused). After any other error fn should return
// it: PostgreSQL refuses every statement of a transaction after a failed
// one.
//
// A Tx is valid only while fn runs, and only from fn's goroutine; a method
// called after fn returned fails.
//
// Workflows hook in here: "a job finishes and the workflow steps after it
// are released" is one transaction. FlowTx (the release of a run's next
// steps) is embedded here, and JobTx has the finish of a step's job
// (JobFinishMany) and its cancel (JobCancel), so the engine's completer
// and Client.Cancel end such a job and advance its run on one Tx. The
// engine's plain jobs keep JobFinishMany, one statement per batch.
//
// Human work hooks in the same way through CrowdTx: a run reaching a human
// step creates its instance and its unit in one transaction
// (StepInsertMany, UnitInsertMany), and finalizing a unit completes its
// step in the transaction that finalizes it (UnitFinalize, StepTransition).
type Tx interface {
	JobTx
	WebhookTx
	FlowTx
	CrowdTx
	QualityTx
	ReviewTx
	// UnitFinalizeLater is UnitFinalize for a caller that needs its
	// finalized unit only once the transaction is done: the statement may
	// be queued, to go with the transaction's next statement or before
	// its commit, several queued ones in one round trip (PostgreSQL's
	// judgment batch queues its fns' finalizations so). Queued, it
	// returns nil, and done gets the finalized unit once the statements
	// sent with it all ran (none when one failed); should it fail, the
	// whole transaction fails (the batch rolls back and each judgment runs
	// alone, where nothing is queued). A transaction may still roll back
	// after done: a caller whose fn runs again starts its outcome afresh.
	// Not queued (every transaction but a judgment batch), it is
	// UnitFinalize: its error is returned, done gets the unit before it
	// returns.
	UnitFinalizeLater(ctx context.Context, p *UnitFinalizeParams, done func(*crowd.Unit)) error
	// UnitLockClosing locks a unit's row, waiting for a take or a
	// judgment that holds it, and reads after the lock what ending it
	// because its pool was closed needs (UnitClosing): an assignment
	// taken just before the lock is seen ACTIVE. ErrNotFound when there
	// is no such unit. The caller locks the unit's run first (the lock
	// order of a judgment: run, then unit).
	UnitLockClosing(ctx context.Context, id uuid.UUID) (*UnitClosing, error)
}
