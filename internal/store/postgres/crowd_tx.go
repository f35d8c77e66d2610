package postgres

import (
	"context"

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
	if t.tx == nil {
		return nil, false, errTxDone
	}
	return poolCreate(ctx, t.tx, p)
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
	if t.tx == nil {
		return nil, errTxDone
	}
	return poolTransition(ctx, t.tx, p)
}

// UnitInsertMany implements store.Tx.
func (t *storeTx) UnitInsertMany(ctx context.Context, p *store.UnitInsertManyParams) ([]*crowd.Unit, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return unitInsertMany(ctx, t.tx, p)
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
	if t.tx == nil {
		return nil, errTxDone
	}
	return unitTransition(ctx, t.tx, p)
}

// UnitFinalize implements store.Tx.
func (t *storeTx) UnitFinalize(ctx context.Context, p *store.UnitFinalizeParams) (*crowd.Unit, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return unitFinalize(ctx, t.tx, p)
}

// UnitFinalizeLater implements store.Tx: queued in a judgment batch (the
// batch's countingTx sends the queue before its next statement and its
// COMMIT), UnitFinalize at once otherwise.
func (t *storeTx) UnitFinalizeLater(ctx context.Context, p *store.UnitFinalizeParams, done func(*crowd.Unit)) error {
	if ct, ok := t.tx.(*countingTx); ok {
		return ct.queueFinalize(ctx, p, done)
	}
	u, err := t.UnitFinalize(ctx, p)
	if err != nil {
		return err
	}
	done(u)
	return nil
}

// UnitRetarget implements store.Tx.
func (t *storeTx) UnitRetarget(ctx context.Context, p *store.UnitRetargetParams) (*crowd.Unit, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return unitRetarget(ctx, t.tx, p)
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
	if t.tx == nil {
		return nil, errTxDone
	}
	return judgmentInsert(ctx, t.tx, p)
}

// JudgmentList implements store.Tx.
func (t *storeTx) JudgmentList(ctx context.Context, p *store.JudgmentListParams) ([]*crowd.Judgment, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return judgmentList(ctx, t.tx, p)
}
