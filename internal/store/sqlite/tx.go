package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// conn runs statements: a write transaction, or the reader pool for a
// read outside one. Domain code that a store.Tx offers takes a conn (or the
// *sql.Tx), so the Store and the Tx run the same statements.
type conn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// InTx implements store.Store: one write transaction (BEGIN IMMEDIATE),
// serialised with every other write.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	var t *storeTx
	err := s.write(ctx, func(sqlTx *sql.Tx) error {
		t = &storeTx{s: s, tx: sqlTx}
		return t.run(ctx, fn)
	})
	if err != nil {
		return err
	}
	t.publish()
	return nil
}

// storeTx is store.Tx on a write transaction. Each method runs in a savepoint:
// SQLite keeps a transaction usable after a failed statement, so a method
// that fails half-way must undo its own writes for the caller to go on
// (say, after an *job.InvalidTransitionError it expected).
type storeTx struct {
	s       *Store
	tx      *sql.Tx
	changed []*job.Row // rows to wake workers for after commit
	now     time.Time  // the latest Now of the methods, for publish
	// cancelRequested: RUNNING jobs asked to stop, whose holders are
	// woken after commit.
	cancelRequested []uuid.UUID
}

var _ store.Tx = (*storeTx)(nil)

// errTxDone: a Tx method called after the function it was given to
// returned.
var errTxDone = errors.New("transaction is finished")

// run runs fn with t; t is unusable afterwards.
func (t *storeTx) run(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	defer func() { t.tx = nil }() // a Tx kept past fn must not reach the connection
	return fn(ctx, t)
}

// changedAt records rows changed at now, to wake their workers after
// commit.
func (t *storeTx) changedAt(now time.Time, rows ...*job.Row) {
	t.changed = append(t.changed, rows...)
	if now.After(t.now) {
		t.now = now
	}
}

// publish wakes workers for the rows the committed transaction changed,
// and the holders of the jobs it asked to stop.
func (t *storeTx) publish() {
	t.s.publishAvailable(t.now, t.changed...)
	for _, id := range t.cancelRequested {
		t.s.hub.Publish(store.TopicJobCancel, id.String())
	}
}

// savepoint runs fn inside SAVEPOINT docket_tx, rolled back to when fn
// fails.
func (t *storeTx) savepoint(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if t.tx == nil {
		return errTxDone
	}
	if _, err := t.tx.ExecContext(ctx, `SAVEPOINT docket_tx`); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(t.tx); err != nil {
		if _, rbErr := t.tx.ExecContext(ctx, `ROLLBACK TO docket_tx`); rbErr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
		}
		_, _ = t.tx.ExecContext(ctx, `RELEASE docket_tx`)
		return err
	}
	if _, err := t.tx.ExecContext(ctx, `RELEASE docket_tx`); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

// JobInsertMany implements store.Tx.
func (t *storeTx) JobInsertMany(ctx context.Context, p *store.JobInsertManyParams) ([]*store.JobInsertResult, error) {
	var out []*store.JobInsertResult
	err := t.savepoint(ctx, func(sqlTx *sql.Tx) error {
		var err error
		out, err = t.s.JobInsertManyTx(ctx, sqlTx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	t.changedAt(p.Now, resultRows(out)...)
	return out, nil
}

// JobTransition implements store.Tx.
func (t *storeTx) JobTransition(ctx context.Context, p *store.JobTransitionParams) (*job.Row, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var r *job.Row
	err := t.savepoint(ctx, func(sqlTx *sql.Tx) error {
		var err error
		r, err = t.s.transition(ctx, sqlTx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	t.changedAt(p.Now, r)
	return r, nil
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
	var w *store.Webhook
	err := t.savepoint(ctx, func(sqlTx *sql.Tx) error {
		var err error
		w, err = webhookInsert(ctx, sqlTx, p)
		return err
	})
	return w, err
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
	var out []*store.RunInsertResult
	err := t.savepoint(ctx, func(sqlTx *sql.Tx) error {
		var err error
		out, err = runInsertMany(ctx, sqlTx, p)
		return err
	})
	return out, err
}

// RunGet implements store.Tx.
func (t *storeTx) RunGet(ctx context.Context, id uuid.UUID) (*flow.Run, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return runGet(ctx, t.tx, id)
}

// RunLock implements store.Tx: the write transaction already excludes
// every other writer, so reading is locking.
func (t *storeTx) RunLock(ctx context.Context, id uuid.UUID) (*flow.Run, error) {
	return t.RunGet(ctx, id)
}

// RunTransition implements store.Tx.
func (t *storeTx) RunTransition(ctx context.Context, p *store.RunTransitionParams) (*flow.Run, error) {
	var r *flow.Run
	err := t.savepoint(ctx, func(sqlTx *sql.Tx) error {
		var err error
		r, err = runTransition(ctx, sqlTx, p)
		return err
	})
	return r, err
}

// StepInsertMany implements store.Tx.
func (t *storeTx) StepInsertMany(ctx context.Context, p *store.StepInsertManyParams) ([]*store.StepInsertResult, error) {
	var out []*store.StepInsertResult
	err := t.savepoint(ctx, func(sqlTx *sql.Tx) error {
		var err error
		out, err = stepInsertMany(ctx, sqlTx, p)
		return err
	})
	return out, err
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

// StepTransitionMany implements store.Tx.
func (t *storeTx) StepTransitionMany(ctx context.Context, p *store.StepTransitionManyParams) ([]*flow.StepInstance, error) {
	var out []*flow.StepInstance
	err := t.savepoint(ctx, func(sqlTx *sql.Tx) error {
		var err error
		out, err = stepTransitionMany(ctx, sqlTx, p)
		return err
	})
	return out, err
}

// StepTransition implements store.Tx.
func (t *storeTx) StepTransition(ctx context.Context, p *store.StepTransitionParams) (*flow.StepInstance, error) {
	var st *flow.StepInstance
	err := t.savepoint(ctx, func(sqlTx *sql.Tx) error {
		var err error
		st, err = stepTransition(ctx, sqlTx, p)
		return err
	})
	return st, err
}
