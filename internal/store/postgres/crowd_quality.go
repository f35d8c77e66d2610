package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// Quality control's store (store.QualityTx): a contributor's quality state
// in a pool is their docket_pool_contributors row; see the interface for
// the lock order.

const qualityStateColumns = `pool_id, contributor_id, trust, tests_answered, tests_correct,
	flagged, flag_check, flag_reason, flagged_at, forgiven_at, taken, tests_taken, too_fast, updated_at`

// qualityStateLockSQL locks the quality state of contributor $2 in pool $1.
const qualityStateLockSQL = `SELECT ` + qualityStateColumns + ` FROM docket_pool_contributors
	WHERE pool_id = $1 AND contributor_id = $2 FOR UPDATE`

func scanQualityState(r rowScanner) (*store.QualityState, error) {
	var (
		st               store.QualityState
		trust            *float64
		check            string
		flagged, forgive *time.Time
	)
	if err := r.Scan(&st.PoolID, &st.ContributorID, &trust, &st.Trust.TestsAnswered, &st.Trust.TestsCorrect,
		&st.Standing.Flagged, &check, &st.FlagReason, &flagged, &forgive,
		&st.Counts.Taken, &st.Counts.TestsTaken, &st.TooFast, &st.UpdatedAt); err != nil {
		return nil, err
	}
	st.Trust.Value = quality.TrustPrior
	if trust != nil {
		st.Trust.Value = *trust
	}
	st.Standing.Check = quality.FlagCheck(check)
	st.FlaggedAt, st.ForgivenAt = utcOrZero(flagged), utcOrZero(forgive)
	st.UpdatedAt = st.UpdatedAt.UTC()
	return &st, nil
}

// newQualityState is the state of a contributor the pool has not met.
func newQualityState(poolID, contributorID uuid.UUID) *store.QualityState {
	return &store.QualityState{PoolID: poolID, ContributorID: contributorID, Trust: quality.NewTrust()}
}

// trustColumn is the stored trust: NULL while there is no evidence (no
// test question answered), as the judgments'
// snapshot (quality.Trust.Snapshot) and crowd.PoolContributor read it.
func trustColumn(t quality.Trust) *float64 {
	if t.TestsAnswered == 0 {
		return nil
	}
	v := t.Value
	return &v
}

func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	v := dbTime(t)
	return &v
}

// QualityStateGet implements store.Store.
func (s *Store) QualityStateGet(ctx context.Context, poolID, contributorID uuid.UUID) (*store.QualityState, error) {
	st, err := scanQualityState(s.pool.QueryRow(ctx, `SELECT `+qualityStateColumns+`
		FROM docket_pool_contributors WHERE pool_id = $1 AND contributor_id = $2`, poolID, contributorID))
	if errors.Is(err, pgx.ErrNoRows) {
		return newQualityState(poolID, contributorID), nil
	}
	if err != nil {
		return nil, fmt.Errorf("get quality state of contributor %s in pool %s: %w", contributorID, poolID, err)
	}
	return st, nil
}

// qualityStateLock reads the row FOR UPDATE; on first use it inserts it
// (ON CONFLICT DO NOTHING: a concurrent first use waits for the other's
// insert to commit) and reads it again, locked.
func qualityStateLock(ctx context.Context, c conn, p *store.QualityStateLockParams) (*store.QualityState, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	const lock = qualityStateLockSQL
	st, err := scanQualityState(c.QueryRow(ctx, lock, p.PoolID, p.ContributorID))
	if errors.Is(err, pgx.ErrNoRows) {
		// The pool and the contributor are checked first, so that an
		// unknown one is ErrNotFound with the transaction still usable
		// (a foreign key violation would abort it).
		_, err = c.Exec(ctx, `INSERT INTO docket_pool_contributors (pool_id, contributor_id, updated_at)
			SELECT $1, $2, $3
			WHERE EXISTS (SELECT 1 FROM docket_pools WHERE id = $1)
				AND EXISTS (SELECT 1 FROM docket_contributors WHERE id = $2)
			ON CONFLICT (pool_id, contributor_id) DO NOTHING`, p.PoolID, p.ContributorID, dbTime(p.Now))
		if isFKViolation(err) {
			err = pgx.ErrNoRows
		}
		if err == nil {
			st, err = scanQualityState(c.QueryRow(ctx, lock, p.PoolID, p.ContributorID))
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("lock quality state of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, store.ErrNotFound)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("lock quality state of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return st, nil
}

func qualityStatePut(ctx context.Context, c conn, p *store.QualityStatePutParams) (*store.QualityState, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	t := p.Trust
	st, err := scanQualityState(c.QueryRow(ctx, `
		INSERT INTO docket_pool_contributors AS pc (pool_id, contributor_id, trust, tests_answered, tests_correct,
			flagged, flag_check, flag_reason, flagged_at, forgiven_at, taken, tests_taken, too_fast, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $6 THEN $13::timestamptz END, $9, $10, $11, $12, $13)
		ON CONFLICT (pool_id, contributor_id) DO UPDATE SET trust = excluded.trust,
			tests_answered = excluded.tests_answered, tests_correct = excluded.tests_correct,
			flagged = excluded.flagged,
			flag_check = excluded.flag_check, flag_reason = excluded.flag_reason,
			flagged_at = CASE WHEN NOT excluded.flagged THEN NULL ELSE coalesce(pc.flagged_at, excluded.flagged_at) END,
			forgiven_at = excluded.forgiven_at, taken = excluded.taken, tests_taken = excluded.tests_taken,
			too_fast = excluded.too_fast, updated_at = excluded.updated_at
		RETURNING `+qualityStateColumns,
		p.PoolID, p.ContributorID, trustColumn(t), t.TestsAnswered, t.TestsCorrect,
		p.Standing.Flagged, string(p.Standing.Check), p.FlagReason, timeOrNull(p.ForgivenAt),
		p.Counts.Taken, p.Counts.TestsTaken, p.TooFast, dbTime(p.Now)))
	if isFKViolation(err) {
		return nil, fmt.Errorf("put quality state of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("put quality state of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return st, nil
}

// trustHistoryAppend numbers the entry after the last one (the caller
// holds the state row, so no other append races it) and deletes what
// falls out of the last quality.MaxTrustHistory, in one statement.
func trustHistoryAppend(ctx context.Context, c conn, p *store.TrustHistoryAppendParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	e := p.Entry
	_, err := c.Exec(ctx, `
		WITH n AS (
			SELECT coalesce(max(seq), 0) + 1 AS seq FROM docket_trust_history
			WHERE pool_id = $1 AND contributor_id = $2
		), ins AS (
			INSERT INTO docket_trust_history (pool_id, contributor_id, seq, at, tests_correct, tests_answered, value, reason)
			SELECT $1, $2, n.seq, $3, $4, $5, $6, $7 FROM n
			RETURNING seq
		)
		DELETE FROM docket_trust_history
		WHERE pool_id = $1 AND contributor_id = $2 AND seq <= (SELECT seq FROM ins) - $8`,
		p.PoolID, p.ContributorID, dbTime(e.At), e.TestsCorrect, e.TestsAnswered, e.Value, e.Reason, quality.MaxTrustHistory)
	if isFKViolation(err) {
		return fmt.Errorf("append trust history of contributor %s in pool %s: no quality state: %w", p.ContributorID, p.PoolID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("append trust history of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return nil
}

// TrustHistoryList implements store.Store.
func (s *Store) TrustHistoryList(ctx context.Context, poolID, contributorID uuid.UUID) ([]quality.TrustEntry, error) {
	return trustHistoryList(ctx, s.pool, poolID, contributorID)
}

func trustHistoryList(ctx context.Context, c conn, poolID, contributorID uuid.UUID) ([]quality.TrustEntry, error) {
	rs, err := c.Query(ctx, `SELECT at, tests_correct, tests_answered, value, reason FROM docket_trust_history
		WHERE pool_id = $1 AND contributor_id = $2 ORDER BY seq`, poolID, contributorID)
	if err != nil {
		return nil, fmt.Errorf("list trust history of contributor %s in pool %s: %w", contributorID, poolID, err)
	}
	out, err := collect(rs, func(r rowScanner) (quality.TrustEntry, error) {
		var e quality.TrustEntry
		err := r.Scan(&e.At, &e.TestsCorrect, &e.TestsAnswered, &e.Value, &e.Reason)
		e.At = e.At.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list trust history of contributor %s in pool %s: %w", contributorID, poolID, err)
	}
	return out, nil
}

// judgmentTaintUnits lists the units of the contributor's judgments in
// the pool whose taint differs (docket_judgments_pool_contributor), on
// p.Units only when it is not nil, locking nothing.
func judgmentTaintUnits(ctx context.Context, c conn, p *store.JudgmentTaintManyParams) ([]store.TaintedUnit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Units != nil && len(p.Units) == 0 {
		return nil, nil
	}
	only, args := taintOnly(p, "j.")
	rs, err := c.Query(ctx, `
		SELECT u.id, u.run_id, u.state, u.golden, count(*)
		FROM docket_judgments j JOIN docket_units u ON u.id = j.unit_id
		WHERE j.pool_id = $1 AND j.contributor_id = $2 AND j.tainted <> $3 `+only+`
		GROUP BY u.id ORDER BY u.id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list the units to taint of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	units, err := collect(rs, scanTaintedUnit)
	if err != nil {
		return nil, fmt.Errorf("list the units to taint of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return units, nil
}

// judgmentTaintMany changes the taint of the contributor's judgments in
// the pool (docket_judgments_pool_contributor), on p.Units only when it
// is not nil, and groups the changed ones by unit.
func judgmentTaintMany(ctx context.Context, c conn, p *store.JudgmentTaintManyParams) (*store.JudgmentTaintResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Units != nil && len(p.Units) == 0 {
		return store.SplitTaintedUnits(nil), nil
	}
	only, args := taintOnly(p, "")
	rs, err := c.Query(ctx, `
		WITH t AS (
			UPDATE docket_judgments SET tainted = $3
			WHERE pool_id = $1 AND contributor_id = $2 AND tainted <> $3 `+only+`
			RETURNING unit_id
		)
		SELECT u.id, u.run_id, u.state, u.golden, count(*) FROM t JOIN docket_units u ON u.id = t.unit_id
		GROUP BY u.id ORDER BY u.id`, args...)
	if err != nil {
		return nil, fmt.Errorf("taint judgments of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	units, err := collect(rs, scanTaintedUnit)
	if err != nil {
		return nil, fmt.Errorf("taint judgments of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return store.SplitTaintedUnits(units), nil
}

// taintOnly is the condition limiting a taint to p.Units (all when nil)
// and the query's arguments.
// A judgment a QA review rejected (rejected) stays tainted: lifting a
// flag's taint (a forgiveness) leaves it.
func taintOnly(p *store.JudgmentTaintManyParams, alias string) (string, []any) {
	args := []any{p.PoolID, p.ContributorID, p.Tainted}
	kept := "AND ($3 OR NOT " + alias + "rejected) "
	if p.Units == nil {
		return kept, args
	}
	return kept + "AND " + alias + "unit_id = ANY($4)", append(args, p.Units)
}

func scanTaintedUnit(r rowScanner) (store.TaintedUnit, error) {
	var (
		u     store.TaintedUnit
		run   *uuid.UUID
		state string
	)
	err := r.Scan(&u.UnitID, &run, &state, &u.Golden, &u.Judgments)
	if run != nil {
		u.RunID = *run
	}
	u.State = crowd.UnitState(state)
	return u, err
}

const unitAuditColumns = `id, unit_id, pool_id, old_result, new_result, old_confidence, new_confidence, action,
	cause_contributor_id, cause_check, cause_untaint, cause_reason, why, at`

func scanUnitAudit(r rowScanner) (*store.UnitAudit, error) {
	var (
		a             store.UnitAudit
		action, check string
		oldR, newR    []byte
	)
	if err := r.Scan(&a.ID, &a.UnitID, &a.PoolID, &oldR, &newR, &a.Old.Confidence, &a.New.Confidence, &action,
		&a.Cause.ContributorID, &check, &a.Cause.Untaint, &a.Cause.Reason, &a.Why, &a.At); err != nil {
		return nil, err
	}
	a.Old.Value, a.New.Value = oldR, newR
	a.Action, a.Cause.Check = quality.RepairAction(action), quality.FlagCheck(check)
	a.At = a.At.UTC()
	return &a, nil
}

func unitAuditInsert(ctx context.Context, c conn, p *store.UnitAuditInsertParams) (*store.UnitAudit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	a := p.Audit
	out, err := scanUnitAudit(c.QueryRow(ctx, `INSERT INTO docket_unit_audits (`+unitAuditColumns+`)
		VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $7, $8, $9, $10, $11, $12, $13, $14)
		RETURNING `+unitAuditColumns,
		p.ID, p.UnitID, p.PoolID, jsonText(a.Old.Value), jsonText(a.New.Value), a.Old.Confidence, a.New.Confidence,
		string(a.Action), a.Cause.ContributorID, string(a.Cause.Check), a.Cause.Untaint, a.Cause.Reason, a.Why, dbTime(p.Now)))
	if isFKViolation(err) {
		return nil, fmt.Errorf("insert audit of unit %s: %w", p.UnitID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("insert audit of unit %s: %w", p.UnitID, err)
	}
	return out, nil
}

// UnitAuditList implements store.Store.
func (s *Store) UnitAuditList(ctx context.Context, unitID uuid.UUID) ([]*store.UnitAudit, error) {
	return unitAuditList(ctx, s.pool, unitID)
}

func unitAuditList(ctx context.Context, c conn, unitID uuid.UUID) ([]*store.UnitAudit, error) {
	rs, err := c.Query(ctx, `SELECT `+unitAuditColumns+` FROM docket_unit_audits WHERE unit_id = $1 ORDER BY id`, unitID)
	if err != nil {
		return nil, fmt.Errorf("list audits of unit %s: %w", unitID, err)
	}
	out, err := collect(rs, scanUnitAudit)
	if err != nil {
		return nil, fmt.Errorf("list audits of unit %s: %w", unitID, err)
	}
	return out, nil
}

func assignmentCountGolden(ctx context.Context, c conn, poolID, contributorID uuid.UUID) (int, error) {
	var n int
	err := c.QueryRow(ctx, `SELECT count(*) FROM docket_assignments
		WHERE pool_id = $1 AND contributor_id = $2 AND golden`, poolID, contributorID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count test questions of contributor %s in pool %s: %w", contributorID, poolID, err)
	}
	return n, nil
}

// goldenPickable is a golden unit (alias u) the contributor ($2) may get
// as a test question: JUDGABLE, and never assigned to them in any state
// (the UNIQUE (unit_id, contributor_id) index answers the NOT EXISTS, one
// probe per unit: OFFSET 0 keeps it from becoming an anti-join, see
// pickWhere).
const goldenPickable = `u.pool_id = $1 AND u.golden AND u.state = 'JUDGABLE'
	AND NOT EXISTS (SELECT 1 FROM docket_assignments a WHERE a.unit_id = u.id AND a.contributor_id = $2 OFFSET 0)`

// The picks: ordered walks docket_units_golden by id; random walks
// docket_units_golden_pick from $3, then (coalesce runs the second scan
// only when the first found nothing) from the smallest key; NULL when
// both found nothing.
const (
	pickGoldenOrderedSQL = `SELECT u.id FROM docket_units u WHERE ` + goldenPickable + ` ORDER BY u.id LIMIT 1`
	pickGoldenRandomSQL  = `SELECT coalesce(
		(SELECT u.id FROM docket_units u WHERE ` + goldenPickable + ` AND u.pick_key >= $3 ORDER BY u.pick_key LIMIT 1),
		(SELECT u.id FROM docket_units u WHERE ` + goldenPickable + ` AND u.pick_key < $3 ORDER BY u.pick_key LIMIT 1))`
)

func unitPickGolden(ctx context.Context, c conn, p *store.UnitPickGoldenParams) (uuid.UUID, error) {
	if err := p.Validate(); err != nil {
		return uuid.Nil, err
	}
	var (
		id  *uuid.UUID
		err error
	)
	if p.Strategy == crowd.StrategyRandom {
		key := p.RandomKey
		if key == 0 {
			key = rand.Int64()
		}
		err = c.QueryRow(ctx, pickGoldenRandomSQL, p.PoolID, p.ContributorID, key).Scan(&id)
	} else {
		err = c.QueryRow(ctx, pickGoldenOrderedSQL, p.PoolID, p.ContributorID).Scan(&id)
	}
	if errors.Is(err, pgx.ErrNoRows) || err == nil && id == nil {
		return uuid.Nil, crowd.ErrNoUnit
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("pick a test question for contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return *id, nil
}

// ---- store.Tx ----

// QualityStateLock implements store.Tx.
func (t *storeTx) QualityStateLock(ctx context.Context, p *store.QualityStateLockParams) (*store.QualityState, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return qualityStateLock(ctx, t.tx, p)
}

// QualityStatePut implements store.Tx.
func (t *storeTx) QualityStatePut(ctx context.Context, p *store.QualityStatePutParams) (*store.QualityState, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return qualityStatePut(ctx, t.tx, p)
}

// TrustHistoryAppend implements store.Tx.
func (t *storeTx) TrustHistoryAppend(ctx context.Context, p *store.TrustHistoryAppendParams) error {
	if t.tx == nil {
		return errTxDone
	}
	return trustHistoryAppend(ctx, t.tx, p)
}

// TrustHistoryList implements store.Tx.
func (t *storeTx) TrustHistoryList(ctx context.Context, poolID, contributorID uuid.UUID) ([]quality.TrustEntry, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return trustHistoryList(ctx, t.tx, poolID, contributorID)
}

// JudgmentTaintUnits implements store.Tx.
func (t *storeTx) JudgmentTaintUnits(ctx context.Context, p *store.JudgmentTaintManyParams) ([]store.TaintedUnit, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return judgmentTaintUnits(ctx, t.tx, p)
}

// JudgmentTaintMany implements store.Tx.
func (t *storeTx) JudgmentTaintMany(ctx context.Context, p *store.JudgmentTaintManyParams) (*store.JudgmentTaintResult, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return judgmentTaintMany(ctx, t.tx, p)
}

// UnitAuditInsert implements store.Tx.
func (t *storeTx) UnitAuditInsert(ctx context.Context, p *store.UnitAuditInsertParams) (*store.UnitAudit, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return unitAuditInsert(ctx, t.tx, p)
}

// UnitAuditList implements store.Tx.
func (t *storeTx) UnitAuditList(ctx context.Context, unitID uuid.UUID) ([]*store.UnitAudit, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return unitAuditList(ctx, t.tx, unitID)
}

// AssignmentCountGolden implements store.Tx.
func (t *storeTx) AssignmentCountGolden(ctx context.Context, poolID, contributorID uuid.UUID) (int, error) {
	if t.tx == nil {
		return 0, errTxDone
	}
	return assignmentCountGolden(ctx, t.tx, poolID, contributorID)
}

// UnitPickGolden implements store.Tx.
func (t *storeTx) UnitPickGolden(ctx context.Context, p *store.UnitPickGoldenParams) (uuid.UUID, error) {
	if t.tx == nil {
		return uuid.Nil, errTxDone
	}
	return unitPickGolden(ctx, t.tx, p)
}
