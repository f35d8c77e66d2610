package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/store"
)

// A judgment's transaction (store.Store.JudgmentInTx) starts with BEGIN,
// the lock of the contributor's quality state (made there at their first
// judgment in the pool: judgmentStatesLockSQL), the lock of the unit's
// run and the judgment statement: none needs the result of another (the
// judgment statement reads the trust of the state locked before it), so
// they go to PostgreSQL in one pipeline (a pgx.Batch that begins the
// transaction: Batch.BeginTx), one round trip where InTx and the Tx
// methods one by one take four. PostgreSQL runs them in order, each with
// a snapshot of its own, so the locks are taken in the documented order
// (state → run → unit) and the judgment statement sees what the locks
// waited for. A fifth statement after them reads the unit's judgments
// when the judgment brought the unit to its target (JudgmentBegun's
// UnitJudgments: what the judgment's fn finalizes the unit with), none
// otherwise.

// runLockSQL locks run $1, or when $1 is NULL the run of unit $2 (none
// when the unit has none, or the run is gone).
const runLockSQL = `SELECT id FROM docket_runs
	WHERE id = coalesce($1::uuid, (SELECT run_id FROM docket_units WHERE id = $2)) FOR UPDATE`

// judgmentsReachedOneSQL lists, newest first, the judgments of the unit
// of assignment $1 when it is regular, JUDGABLE and at or over its target
// (the judgment statement before it brought it there, or did not: then
// they are not used); none otherwise.
const judgmentsReachedOneSQL = `SELECT ` + judgmentColumns + ` FROM docket_judgments
	WHERE unit_id = (SELECT u.id FROM docket_assignments a JOIN docket_units u ON u.id = a.unit_id
		WHERE a.id = $1 AND u.state = 'JUDGABLE' AND NOT u.golden AND u.judgment_count >= u.judgments_per_unit)
	ORDER BY id DESC`

// errNoQualityState: the pipeline found no quality state to lock and made
// none (another transaction was making it), or made one for a judgment
// that wrote nothing (refused: a first judgment refused makes no state);
// JudgmentInTx starts again the one-by-one way.
var errNoQualityState = errors.New("no quality state yet")

// JudgmentInTx implements store.Store.
func (s *Store) JudgmentInTx(ctx context.Context, p *store.JudgmentInTxParams, fn func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error) error {
	if err := p.Validate(); err != nil {
		return err
	}
	// With the pool's concurrent judgments when the unit is known
	// (crowd_judgment_group.go), else, or when the batch rolled back,
	// alone.
	err := errGroupAlone
	if p.UnitID != uuid.Nil {
		err = s.judgmentInTxGrouped(ctx, p, fn)
	}
	if errors.Is(err, errGroupAlone) {
		err = s.judgmentInTxPiped(ctx, p, fn)
	}
	if !errors.Is(err, errNoQualityState) {
		return err
	}
	// Rolled back (the pipeline's judgment statement wrote nothing without
	// a state) and its connection released: the state is made in the order
	// of every other transaction, before the run and the unit.
	return store.JudgmentInTxSerial(ctx, s, p, fn)
}

// judgmentInTxPiped is JudgmentInTx with its first statements pipelined;
// errNoQualityState when there is no state to lock yet (rolled back).
func (s *Store) judgmentInTxPiped(ctx context.Context, p *store.JudgmentInTxParams, fn func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error) error {
	// One counter shard for the whole transaction, as runTx chooses.
	ctx = context.WithValue(ctx, txShardKey{}, rand.IntN(poolShards))
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer pc.Release() // a connection left in a transaction is closed, not reused
	ins := p.Insert
	ins.Trust = nil // the statement reads the locked state's
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(judgmentStateLockOneSQL.sql, judgmentStateLockOneSQL.args(pgx.NamedArgs{"pool": p.PoolID,
		"id": ins.ContributorID, "now": dbTime(ins.Now), "assignment": ins.AssignmentID})...)
	lockRun := p.RunID != uuid.Nil || p.RunOfUnit != uuid.Nil
	if lockRun {
		b.Queue(runLockSQL, nullUUID(p.RunID), nullUUID(p.RunOfUnit))
	}
	b.Queue(judgmentInsertPipedStmt.sql, judgmentInsertArgs(ctx, judgmentInsertPipedStmt, &ins)...)
	b.Queue(judgmentsReachedOneSQL, ins.AssignmentID)
	br := pc.SendBatch(ctx, b)
	ptx := br.Tx()
	defer func() { _ = ptx.Rollback(context.WithoutCancel(ctx)) }()
	begun, made, err := readJudgmentBegin(br, lockRun)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return contended(fmt.Errorf("judgment for assignment %s: %w", ins.AssignmentID, err))
	}
	if begun.State == nil {
		return errNoQualityState // rolled back
	}
	if begun.Inserted == nil {
		if made {
			// A state made for a judgment that wrote nothing (refused):
			// the one-by-one way answers it as before, and makes none.
			return errNoQualityState // rolled back
		}
		if begun.Inserted, err = judgmentNotInserted(ctx, ptx, &ins); err != nil {
			return contended(err)
		}
	}
	t := &storeTx{s: s, tx: ptx}
	err = func() error {
		defer func() { t.tx = nil }() // a Tx kept past fn must not reach the connection
		return fn(ctx, t, begun)
	}()
	if err != nil {
		return contended(err)
	}
	// COMMIT goes without the caller's cancellation (bounded as a batch
	// is): a context ending while it is on the wire would leave the
	// outcome unknown, the judgment maybe stored though answered an error.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), judgeBatchTimeout)
	defer cancel()
	if err := ptx.Commit(cctx); err != nil {
		return contended(fmt.Errorf("commit transaction: %w", err))
	}
	return nil
}

// readJudgmentBegin reads the pipeline's results in order; State is nil
// when there was no state to lock, Inserted when nothing was inserted,
// UnitJudgments unless the judgment brought its unit to its target; made
// when the pipeline made the state.
func readJudgmentBegin(br pgx.BatchResults, lockRun bool) (begun *store.JudgmentBegun, made bool, err error) {
	if _, err := br.Exec(); err != nil {
		return nil, false, fmt.Errorf("begin transaction: %w", err)
	}
	begun = &store.JudgmentBegun{}
	rows, err := br.Query()
	if err != nil {
		return nil, false, fmt.Errorf("lock quality state: %w", err)
	}
	states, madeOf, err := scanQualityStates(rows)
	if err != nil {
		return nil, false, fmt.Errorf("lock quality state: %w", err)
	}
	for id, st := range states { // none or one
		begun.State, made = st, madeOf[id]
	}
	if lockRun {
		var id uuid.UUID
		if err := br.QueryRow().Scan(&id); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, false, fmt.Errorf("lock run: %w", err) // none: a unit of no run, or a pruned run
		}
	}
	if begun.Inserted, err = scanJudgmentInserted(br.QueryRow()); err != nil {
		return nil, false, fmt.Errorf("insert judgment: %w", err)
	}
	rows, err = br.Query()
	if err != nil {
		return nil, false, fmt.Errorf("list judgments: %w", err)
	}
	reached, err := collect(rows, scanJudgment)
	if err != nil {
		return nil, false, fmt.Errorf("list judgments: %w", err)
	}
	if ins := begun.Inserted; ins != nil && ins.Created && ins.Unit.TargetReached() && len(reached) > 0 {
		begun.UnitJudgments = reached
	}
	return begun, made, nil
}
