package sqlite

import (
	"context"
	"database/sql"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// TaskGet implements store.Tx.
func (t *storeTx) TaskGet(ctx context.Context, p *store.TaskGetParams) (*crowd.TaskVersion, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return taskGet(ctx, t.tx, p)
}

// PoolCreate implements store.Tx.
func (t *storeTx) PoolCreate(ctx context.Context, p *store.PoolCreateParams) (*crowd.Pool, bool, error) {
	var (
		pool    *crowd.Pool
		created bool
	)
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		pool, created, err = poolCreate(ctx, tx, p)
		return err
	})
	return pool, created, err
}

// PoolGet implements store.Tx.
func (t *storeTx) PoolGet(ctx context.Context, id uuid.UUID) (*crowd.Pool, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return poolGet(ctx, t.tx, id)
}

// PoolTransition implements store.Tx.
func (t *storeTx) PoolTransition(ctx context.Context, p *store.PoolTransitionParams) (*crowd.Pool, error) {
	var out *crowd.Pool
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = poolTransition(ctx, tx, p)
		return err
	})
	return out, err
}

// UnitInsertMany implements store.Tx.
func (t *storeTx) UnitInsertMany(ctx context.Context, p *store.UnitInsertManyParams) ([]*crowd.Unit, error) {
	var out []*crowd.Unit
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitInsertMany(ctx, tx, p)
		return err
	})
	return out, err
}

// UnitGet implements store.Tx.
func (t *storeTx) UnitGet(ctx context.Context, id uuid.UUID) (*crowd.Unit, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return unitGet(ctx, t.tx, id)
}

// UnitTransition implements store.Tx.
func (t *storeTx) UnitTransition(ctx context.Context, p *store.UnitTransitionParams) (*crowd.Unit, error) {
	var out *crowd.Unit
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitTransition(ctx, tx, p)
		return err
	})
	return out, err
}

// UnitFinalize implements store.Tx.
func (t *storeTx) UnitFinalize(ctx context.Context, p *store.UnitFinalizeParams) (*crowd.Unit, error) {
	var out *crowd.Unit
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitFinalize(ctx, tx, p)
		return err
	})
	return out, err
}

// UnitFinalizeLater implements store.Tx: SQLite queues nothing.
func (t *storeTx) UnitFinalizeLater(ctx context.Context, p *store.UnitFinalizeParams, done func(*crowd.Unit)) error {
	u, err := t.UnitFinalize(ctx, p)
	if err != nil {
		return err
	}
	done(u)
	return nil
}

// UnitRetarget implements store.Tx.
func (t *storeTx) UnitRetarget(ctx context.Context, p *store.UnitRetargetParams) (*crowd.Unit, error) {
	var out *crowd.Unit
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitRetarget(ctx, tx, p)
		return err
	})
	return out, err
}

// ContributorGet implements store.Tx.
func (t *storeTx) ContributorGet(ctx context.Context, id uuid.UUID) (*crowd.Contributor, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return contributorGet(ctx, t.tx, id)
}

// AssignmentGet implements store.Tx.
func (t *storeTx) AssignmentGet(ctx context.Context, id uuid.UUID) (*crowd.Assignment, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return assignmentGet(ctx, t.tx, id)
}

// JudgmentInsert implements store.Tx.
func (t *storeTx) JudgmentInsert(ctx context.Context, p *store.JudgmentInsertParams) (*store.JudgmentInserted, error) {
	var out *store.JudgmentInserted
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = judgmentInsert(ctx, tx, p)
		return err
	})
	return out, err
}

// JudgmentList implements store.Tx.
func (t *storeTx) JudgmentList(ctx context.Context, p *store.JudgmentListParams) ([]*crowd.Judgment, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return judgmentList(ctx, t.tx, p)
}

// JudgmentInTx implements store.Store: InTx whose first statements are
// store.JudgmentBegin's (on SQLite a round trip costs nothing).
func (s *Store) JudgmentInTx(ctx context.Context, p *store.JudgmentInTxParams, fn func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return store.JudgmentInTxSerial(ctx, s, p, fn)
}
