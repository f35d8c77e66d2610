package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// Quality control's store (store.QualityTx): a contributor's quality state
// in a pool is their docket_pool_contributors row. The write transaction
// is the one writer, so "locking" the state is reading it there.

const qualityStateColumns = `pool_id, contributor_id, trust, tests_answered, tests_correct,
	flagged, flag_check, flag_reason, flagged_at, forgiven_at, taken, tests_taken, too_fast, updated_at`

func scanQualityState(r scanner) (*store.QualityState, error) {
	var (
		st                 store.QualityState
		poolID, cID, check string
		trust              sql.NullFloat64
		flagged, updated   int64
		flaggedAt, forgive sql.NullInt64
	)
	if err := r.Scan(&poolID, &cID, &trust, &st.Trust.TestsAnswered, &st.Trust.TestsCorrect,
		&flagged, &check, &st.FlagReason, &flaggedAt, &forgive, &st.Counts.Taken,
		&st.Counts.TestsTaken, &st.TooFast, &updated); err != nil {
		return nil, err
	}
	var err error
	if st.PoolID, err = parseUUID("pool", poolID); err != nil {
		return nil, err
	}
	if st.ContributorID, err = parseUUID("contributor", cID); err != nil {
		return nil, err
	}
	st.Trust.Value = quality.TrustPrior
	if trust.Valid {
		st.Trust.Value = trust.Float64
	}
	st.Standing = quality.Standing{Flagged: flagged != 0, Check: quality.FlagCheck(check)}
	st.FlaggedAt, st.ForgivenAt = fromNullMicros(flaggedAt), fromNullMicros(forgive)
	st.UpdatedAt = fromMicros(updated)
	return &st, nil
}

// trustColumn is the stored trust: NULL while there is no evidence, as in
// the PostgreSQL store.
func trustColumn(t quality.Trust) any {
	if t.TestsAnswered == 0 {
		return nil
	}
	return t.Value
}

// microsOrNull is t in microseconds, NULL for the zero time (a step's
// timeout_at, a forgiveness never given).
func microsOrNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return micros(t)
}

// QualityStateGet implements store.Store.
func (s *Store) QualityStateGet(ctx context.Context, poolID, contributorID uuid.UUID) (*store.QualityState, error) {
	st, err := scanQualityState(s.reader.QueryRowContext(ctx, `SELECT `+qualityStateColumns+`
		FROM docket_pool_contributors WHERE pool_id = ? AND contributor_id = ?`, poolID.String(), contributorID.String()))
	if errors.Is(err, sql.ErrNoRows) {
		return &store.QualityState{PoolID: poolID, ContributorID: contributorID, Trust: quality.NewTrust()}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get quality state of contributor %s in pool %s: %w", contributorID, poolID, err)
	}
	return st, nil
}

func qualityStateLock(ctx context.Context, tx *sql.Tx, p *store.QualityStateLockParams) (*store.QualityState, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	st, err := scanQualityState(tx.QueryRowContext(ctx, `INSERT INTO docket_pool_contributors (pool_id, contributor_id, updated_at)
		VALUES (?, ?, ?) ON CONFLICT (pool_id, contributor_id) DO UPDATE SET pool_id = excluded.pool_id
		RETURNING `+qualityStateColumns, p.PoolID.String(), p.ContributorID.String(), micros(p.Now)))
	if isForeignKey(err) {
		return nil, fmt.Errorf("lock quality state of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("lock quality state of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return st, nil
}

func qualityStatePut(ctx context.Context, tx *sql.Tx, p *store.QualityStatePutParams) (*store.QualityState, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	t := p.Trust
	var flaggedAt any
	if p.Standing.Flagged {
		flaggedAt = micros(p.Now)
	}
	st, err := scanQualityState(tx.QueryRowContext(ctx, `INSERT INTO docket_pool_contributors (pool_id, contributor_id,
			trust, tests_answered, tests_correct, flagged, flag_check, flag_reason, flagged_at,
			forgiven_at, taken, tests_taken, too_fast, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (pool_id, contributor_id) DO UPDATE SET trust = excluded.trust,
			tests_answered = excluded.tests_answered, tests_correct = excluded.tests_correct,
			flagged = excluded.flagged,
			flag_check = excluded.flag_check, flag_reason = excluded.flag_reason,
			flagged_at = CASE WHEN excluded.flagged = 0 THEN NULL
				ELSE coalesce(docket_pool_contributors.flagged_at, excluded.flagged_at) END,
			forgiven_at = excluded.forgiven_at, taken = excluded.taken, tests_taken = excluded.tests_taken,
			too_fast = excluded.too_fast, updated_at = excluded.updated_at
		RETURNING `+qualityStateColumns,
		p.PoolID.String(), p.ContributorID.String(), trustColumn(t), t.TestsAnswered, t.TestsCorrect,
		boolInt(p.Standing.Flagged), string(p.Standing.Check), p.FlagReason, flaggedAt, microsOrNull(p.ForgivenAt),
		p.Counts.Taken, p.Counts.TestsTaken, p.TooFast, micros(p.Now)))
	if isForeignKey(err) {
		return nil, fmt.Errorf("put quality state of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("put quality state of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return st, nil
}

func trustHistoryAppend(ctx context.Context, tx *sql.Tx, p *store.TrustHistoryAppendParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	e := p.Entry
	pool, c := p.PoolID.String(), p.ContributorID.String()
	var seq int64
	err := tx.QueryRowContext(ctx, `INSERT INTO docket_trust_history (pool_id, contributor_id, seq, at, tests_correct,
			tests_answered, value, reason)
		SELECT ?1, ?2, coalesce(max(seq), 0) + 1, ?3, ?4, ?5, ?6, ?7 FROM docket_trust_history
		WHERE pool_id = ?1 AND contributor_id = ?2
		RETURNING seq`, pool, c, micros(e.At), e.TestsCorrect, e.TestsAnswered, e.Value, e.Reason).Scan(&seq)
	if err == nil {
		_, err = tx.ExecContext(ctx, `DELETE FROM docket_trust_history WHERE pool_id = ? AND contributor_id = ? AND seq <= ?`,
			pool, c, seq-quality.MaxTrustHistory)
	}
	if isForeignKey(err) {
		return fmt.Errorf("append trust history of contributor %s in pool %s: no quality state: %w", p.ContributorID, p.PoolID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("append trust history of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return nil
}

// TrustHistoryList implements store.Store.
func (s *Store) TrustHistoryList(ctx context.Context, poolID, contributorID uuid.UUID) ([]quality.TrustEntry, error) {
	return trustHistoryList(ctx, s.reader, poolID, contributorID)
}

func trustHistoryList(ctx context.Context, c conn, poolID, contributorID uuid.UUID) ([]quality.TrustEntry, error) {
	rows, err := c.QueryContext(ctx, `SELECT at, tests_correct, tests_answered, value, reason FROM docket_trust_history
		WHERE pool_id = ? AND contributor_id = ? ORDER BY seq`, poolID.String(), contributorID.String())
	if err != nil {
		return nil, fmt.Errorf("list trust history of contributor %s in pool %s: %w", contributorID, poolID, err)
	}
	defer func() { _ = rows.Close() }()
	var out []quality.TrustEntry
	for rows.Next() {
		var (
			e  quality.TrustEntry
			at int64
		)
		if err := rows.Scan(&at, &e.TestsCorrect, &e.TestsAnswered, &e.Value, &e.Reason); err != nil {
			return nil, fmt.Errorf("list trust history of contributor %s in pool %s: %w", contributorID, poolID, err)
		}
		e.At = fromMicros(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list trust history of contributor %s in pool %s: %w", contributorID, poolID, err)
	}
	return out, nil
}

// judgmentTaintUnits lists the units of the contributor's judgments in
// the pool whose taint differs; on p.Units only when it is not nil.
func judgmentTaintUnits(ctx context.Context, tx *sql.Tx, p *store.JudgmentTaintManyParams) ([]store.TaintedUnit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	fail := func(err error) ([]store.TaintedUnit, error) {
		return nil, fmt.Errorf("list the units to taint of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	if p.Units != nil && len(p.Units) == 0 {
		return nil, nil
	}
	only, args := "", []any{p.PoolID.String(), p.ContributorID.String(), boolInt(p.Tainted)}
	if p.Units != nil {
		ids, err := uuidsJSON(p.Units)
		if err != nil {
			return fail(err)
		}
		only, args = "AND j.unit_id IN (SELECT value FROM json_each(?4))", append(args, ids)
	}
	rows, err := tx.QueryContext(ctx, `SELECT u.id, u.run_id, u.state, u.golden, count(*)
		FROM docket_judgments j JOIN docket_units u ON u.id = j.unit_id
		WHERE j.pool_id = ?1 AND j.contributor_id = ?2 AND j.tainted <> ?3 AND (?3 = 1 OR j.rejected = 0) `+only+`
		GROUP BY u.id ORDER BY u.id`, args...)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = rows.Close() }()
	var units []store.TaintedUnit
	for rows.Next() {
		var (
			u             store.TaintedUnit
			id, state     string
			run           sql.NullString
			golden        int64
			parseErr      error
			runID, unitID uuid.UUID
		)
		if err := rows.Scan(&id, &run, &state, &golden, &u.Judgments); err != nil {
			return fail(err)
		}
		if unitID, parseErr = parseUUID("unit", id); parseErr != nil {
			return fail(parseErr)
		}
		if run.Valid {
			if runID, parseErr = parseUUID("run", run.String); parseErr != nil {
				return fail(parseErr)
			}
		}
		u.UnitID, u.RunID, u.State, u.Golden = unitID, runID, crowd.UnitState(state), golden != 0
		units = append(units, u)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return units, nil
}

// judgmentTaintMany reads the units of the judgments that will change
// taint (judgmentTaintUnits), then changes them, in the write
// transaction.
func judgmentTaintMany(ctx context.Context, tx *sql.Tx, p *store.JudgmentTaintManyParams) (*store.JudgmentTaintResult, error) {
	units, err := judgmentTaintUnits(ctx, tx, p)
	if err != nil || len(units) == 0 {
		return store.SplitTaintedUnits(nil), err
	}
	ids := make([]uuid.UUID, len(units))
	for i, u := range units {
		ids[i] = u.UnitID
	}
	arg, err := uuidsJSON(ids)
	if err == nil {
		_, err = tx.ExecContext(ctx, `UPDATE docket_judgments SET tainted = ?3
			WHERE pool_id = ?1 AND contributor_id = ?2 AND tainted <> ?3 AND (?3 = 1 OR rejected = 0)
				AND unit_id IN (SELECT value FROM json_each(?4))`,
			p.PoolID.String(), p.ContributorID.String(), boolInt(p.Tainted), arg)
	}
	if err != nil {
		return nil, fmt.Errorf("taint judgments of contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return store.SplitTaintedUnits(units), nil
}

// uuidsJSON is ids as a JSON array of strings, for json_each.
func uuidsJSON(ids []uuid.UUID) (string, error) {
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = id.String()
	}
	b, err := json.Marshal(strs)
	return string(b), err
}

const unitAuditColumns = `id, unit_id, pool_id, old_result, new_result, old_confidence, new_confidence, action,
	cause_contributor_id, cause_check, cause_untaint, cause_reason, why, at`

func scanUnitAudit(r scanner) (*store.UnitAudit, error) {
	var (
		a                         store.UnitAudit
		id, unitID, poolID, cause string
		action, check             string
		oldR, newR                sql.NullString
		oldC, newC                sql.NullFloat64
		untaint, at               int64
	)
	if err := r.Scan(&id, &unitID, &poolID, &oldR, &newR, &oldC, &newC, &action, &cause, &check, &untaint,
		&a.Cause.Reason, &a.Why, &at); err != nil {
		return nil, err
	}
	var err error
	for _, f := range []struct {
		what string
		s    string
		to   *uuid.UUID
	}{{"audit", id, &a.ID}, {"unit", unitID, &a.UnitID}, {"pool", poolID, &a.PoolID}, {"contributor", cause, &a.Cause.ContributorID}} {
		if *f.to, err = parseUUID(f.what, f.s); err != nil {
			return nil, err
		}
	}
	if oldR.Valid {
		a.Old.Value = []byte(oldR.String)
	}
	if newR.Valid {
		a.New.Value = []byte(newR.String)
	}
	if oldC.Valid {
		a.Old.Confidence = &oldC.Float64
	}
	if newC.Valid {
		a.New.Confidence = &newC.Float64
	}
	a.Action, a.Cause.Check, a.Cause.Untaint = quality.RepairAction(action), quality.FlagCheck(check), untaint != 0
	a.At = fromMicros(at)
	return &a, nil
}

func nullFloat(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

func unitAuditInsert(ctx context.Context, tx *sql.Tx, p *store.UnitAuditInsertParams) (*store.UnitAudit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	a := p.Audit
	out, err := scanUnitAudit(tx.QueryRowContext(ctx, `INSERT INTO docket_unit_audits (`+unitAuditColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		RETURNING `+unitAuditColumns,
		p.ID.String(), p.UnitID.String(), p.PoolID.String(), nullJSON(a.Old.Value), nullJSON(a.New.Value),
		nullFloat(a.Old.Confidence), nullFloat(a.New.Confidence), string(a.Action), a.Cause.ContributorID.String(),
		string(a.Cause.Check), boolInt(a.Cause.Untaint), a.Cause.Reason, a.Why, micros(p.Now)))
	if isForeignKey(err) {
		return nil, fmt.Errorf("insert audit of unit %s: %w", p.UnitID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("insert audit of unit %s: %w", p.UnitID, err)
	}
	return out, nil
}

// UnitAuditList implements store.Store.
func (s *Store) UnitAuditList(ctx context.Context, unitID uuid.UUID) ([]*store.UnitAudit, error) {
	return unitAuditList(ctx, s.reader, unitID)
}

func unitAuditList(ctx context.Context, c conn, unitID uuid.UUID) ([]*store.UnitAudit, error) {
	rows, err := c.QueryContext(ctx, `SELECT `+unitAuditColumns+` FROM docket_unit_audits WHERE unit_id = ? ORDER BY id`,
		unitID.String())
	if err != nil {
		return nil, fmt.Errorf("list audits of unit %s: %w", unitID, err)
	}
	defer func() { _ = rows.Close() }()
	var out []*store.UnitAudit
	for rows.Next() {
		a, err := scanUnitAudit(rows)
		if err != nil {
			return nil, fmt.Errorf("list audits of unit %s: %w", unitID, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audits of unit %s: %w", unitID, err)
	}
	return out, nil
}

func assignmentCountGolden(ctx context.Context, c conn, poolID, contributorID uuid.UUID) (int, error) {
	var n int
	err := c.QueryRowContext(ctx, `SELECT count(*) FROM docket_assignments
		WHERE pool_id = ? AND contributor_id = ? AND golden = 1`, poolID.String(), contributorID.String()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count test questions of contributor %s in pool %s: %w", contributorID, poolID, err)
	}
	return n, nil
}

// goldenPickable is a golden unit (alias u) the contributor (?2) may get
// as a test question: JUDGABLE, and never assigned to them in any state.
const goldenPickable = `u.pool_id = ?1 AND u.golden = 1 AND u.state = 'JUDGABLE'
	AND NOT EXISTS (SELECT 1 FROM docket_assignments a WHERE a.unit_id = u.id AND a.contributor_id = ?2)`

// The picks: ordered by id (docket_units_golden); random from ?3 by
// random key, wrapping around (docket_units_golden_pick).
const (
	pickGoldenOrderedSQL = `SELECT u.id FROM docket_units u WHERE ` + goldenPickable + ` ORDER BY u.id LIMIT 1`
	pickGoldenRandomSQL  = `SELECT coalesce(
		(SELECT u.id FROM docket_units u WHERE ` + goldenPickable + ` AND u.pick_key >= ?3 ORDER BY u.pick_key LIMIT 1),
		(SELECT u.id FROM docket_units u WHERE ` + goldenPickable + ` AND u.pick_key < ?3 ORDER BY u.pick_key LIMIT 1))`
)

func unitPickGolden(ctx context.Context, c conn, p *store.UnitPickGoldenParams) (uuid.UUID, error) {
	if err := p.Validate(); err != nil {
		return uuid.Nil, err
	}
	var (
		id  sql.NullString
		err error
	)
	if p.Strategy == crowd.StrategyRandom {
		key := p.RandomKey
		if key == 0 {
			key = rand.Int64()
		}
		err = c.QueryRowContext(ctx, pickGoldenRandomSQL, p.PoolID.String(), p.ContributorID.String(), key).Scan(&id)
	} else {
		err = c.QueryRowContext(ctx, pickGoldenOrderedSQL, p.PoolID.String(), p.ContributorID.String()).Scan(&id)
	}
	if errors.Is(err, sql.ErrNoRows) || err == nil && !id.Valid {
		return uuid.Nil, crowd.ErrNoUnit
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("pick a test question for contributor %s in pool %s: %w", p.ContributorID, p.PoolID, err)
	}
	return parseUUID("unit", id.String)
}

// ---- store.Tx ----

// QualityStateLock implements store.Tx.
func (t *storeTx) QualityStateLock(ctx context.Context, p *store.QualityStateLockParams) (*store.QualityState, error) {
	var out *store.QualityState
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = qualityStateLock(ctx, tx, p)
		return err
	})
	return out, err
}

// QualityStatePut implements store.Tx.
func (t *storeTx) QualityStatePut(ctx context.Context, p *store.QualityStatePutParams) (*store.QualityState, error) {
	var out *store.QualityState
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = qualityStatePut(ctx, tx, p)
		return err
	})
	return out, err
}

// TrustHistoryAppend implements store.Tx.
func (t *storeTx) TrustHistoryAppend(ctx context.Context, p *store.TrustHistoryAppendParams) error {
	return t.savepoint(ctx, func(tx *sql.Tx) error { return trustHistoryAppend(ctx, tx, p) })
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
	var out *store.JudgmentTaintResult
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = judgmentTaintMany(ctx, tx, p)
		return err
	})
	return out, err
}

// UnitAuditInsert implements store.Tx.
func (t *storeTx) UnitAuditInsert(ctx context.Context, p *store.UnitAuditInsertParams) (*store.UnitAudit, error) {
	var out *store.UnitAudit
	err := t.savepoint(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitAuditInsert(ctx, tx, p)
		return err
	})
	return out, err
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
