package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// conn runs statements: the pool, where each statement is its own
// transaction, or a pgx.Tx (store.Tx). Domain code that a store.Tx offers
// takes a conn, so the Store and the Tx run the same statements.
type conn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// InTx implements store.Store. The transaction is READ COMMITTED, like
// every other.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	return s.withTx(ctx, func(ptx pgx.Tx) error { return s.runTx(ctx, ptx, fn) })
}

// withTx runs fn in a transaction of its own: committed when fn returns
// nil, rolled back otherwise. InTx and the store's own multi-statement
// writes share it.
func (s *Store) withTx(ctx context.Context, fn func(ptx pgx.Tx) error) error {
	ptx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer func() { _ = ptx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(ptx); err != nil {
		return contended(err)
	}
	if err := ptx.Commit(ctx); err != nil {
		return contended(fmt.Errorf("commit transaction: %w", err))
	}
	return nil
}

// contended marks an error that aborted a transaction to break a deadlock
// (40P01) or a serialization conflict (40001) as store.ErrContention,
// keeping the driver's error in the chain. A transaction whose locks are
// taken in the documented order (docs/quality.md, "Lock order") cannot
// deadlock with another; the counter rows of two different pools are the
// one cycle left (a labelling pool's finalization and its review pool's
// reject, see there), rare and retried by the caller.
func contended(err error) error {
	if abortedByConflict(err) {
		return contentionError{err}
	}
	return err
}

// abortedByConflict reports a transaction PostgreSQL rolled back to break a
// deadlock (40P01) or a serialization conflict (40001): nothing of it was
// written, and running it again is safe.
func abortedByConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

type contentionError struct{ err error }

func (e contentionError) Error() string        { return e.err.Error() }
func (e contentionError) Unwrap() error        { return e.err }
func (e contentionError) Is(target error) bool { return target == store.ErrContention }

// runTx runs fn with a store.Tx on ptx; the caller begins and ends ptx.
func (s *Store) runTx(ctx context.Context, ptx pgx.Tx, fn func(ctx context.Context, tx store.Tx) error) error {
	t := &storeTx{s: s, tx: ptx}
	defer func() { t.tx = nil }() // a Tx kept past fn must not reach the connection
	return fn(context.WithValue(ctx, txShardKey{}, rand.IntN(poolShards)), t)
}

// storeTx is store.Tx on a pgx.Tx. Every method is one statement (or COPY plus
// one), and PostgreSQL aborts the whole transaction on a failed statement,
// so nothing half-done can commit. Wakeups are NOTIFYs, delivered by the
// database on commit.
type storeTx struct {
	s  *Store
	tx pgx.Tx
}

var _ store.Tx = (*storeTx)(nil)

// errTxDone: a Tx method called after the function it was given to
// returned.
var errTxDone = errors.New("transaction is finished")

// JobInsertMany implements store.Tx.
func (t *storeTx) JobInsertMany(ctx context.Context, p *store.JobInsertManyParams) ([]*store.JobInsertResult, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return t.s.JobInsertManyTx(ctx, t.tx, p)
}

// JobTransition implements store.Tx.
func (t *storeTx) JobTransition(ctx context.Context, p *store.JobTransitionParams) (*job.Row, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return transition(ctx, t.tx, t.s.agingMicros, p)
}

// JobGet implements store.Tx.
func (t *storeTx) JobGet(ctx context.Context, id uuid.UUID) (*job.Row, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return jobGet(ctx, t.tx, id)
}

// WebhookInsert implements store.Tx.
func (t *storeTx) WebhookInsert(ctx context.Context, p *store.WebhookInsertParams) (*store.Webhook, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return webhookInsert(ctx, t.tx, p)
}

// WebhookGet implements store.Tx.
func (t *storeTx) WebhookGet(ctx context.Context, id uuid.UUID) (*store.Webhook, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return webhookGet(ctx, t.tx, id)
}

// WorkflowGet implements store.Tx.
func (t *storeTx) WorkflowGet(ctx context.Context, p *store.WorkflowGetParams) (*flow.Version, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return workflowGet(ctx, t.tx, p)
}

// RunInsertMany implements store.Tx.
func (t *storeTx) RunInsertMany(ctx context.Context, p *store.RunInsertManyParams) ([]*store.RunInsertResult, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return runInsertMany(ctx, t.tx, p)
}

// RunGet implements store.Tx.
func (t *storeTx) RunGet(ctx context.Context, id uuid.UUID) (*flow.Run, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return runGet(ctx, t.tx, id, false)
}

// RunLock implements store.Tx: SELECT … FOR UPDATE, held until the
// transaction ends.
func (t *storeTx) RunLock(ctx context.Context, id uuid.UUID) (*flow.Run, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return runGet(ctx, t.tx, id, true)
}

// RunTransition implements store.Tx.
func (t *storeTx) RunTransition(ctx context.Context, p *store.RunTransitionParams) (*flow.Run, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return runTransition(ctx, t.tx, p)
}

// StepInsertMany implements store.Tx.
func (t *storeTx) StepInsertMany(ctx context.Context, p *store.StepInsertManyParams) ([]*store.StepInsertResult, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return stepInsertMany(ctx, t.tx, p)
}

// StepList implements store.Tx.
func (t *storeTx) StepList(ctx context.Context, runID uuid.UUID) ([]*flow.StepInstance, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return stepList(ctx, t.tx, runID)
}

// StepGetByJob implements store.Tx.
func (t *storeTx) StepGetByJob(ctx context.Context, jobID uuid.UUID) (*flow.StepInstance, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return stepGetBy(ctx, t.tx, "job_id", jobID)
}

// StepGetByUnit implements store.Tx.
func (t *storeTx) StepGetByUnit(ctx context.Context, unitID uuid.UUID) (*flow.StepInstance, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return stepGetBy(ctx, t.tx, "unit_id", unitID)
}

// StepTransition implements store.Tx.
func (t *storeTx) StepTransition(ctx context.Context, p *store.StepTransitionParams) (*flow.StepInstance, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return stepTransition(ctx, t.tx, p)
}
