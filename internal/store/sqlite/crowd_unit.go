package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

const unitColumns = `id, pool_id, run_id, step_index, parent_unit_id, input, state, golden, answer,
	slots_taken, judgments_per_unit, judgment_count, result, confidence, finalized_at, created_at, updated_at, feedback`

func scanUnit(r scanner) (*crowd.Unit, error) {
	var (
		u                             crowd.Unit
		id, poolID, input, state      string
		runID, parent, answer, result sql.NullString
		feedback                      sql.NullString
		stepIndex, finalized          sql.NullInt64
		golden                        int64
		confidence                    sql.NullFloat64
		created, updated              int64
	)
	if err := r.Scan(&id, &poolID, &runID, &stepIndex, &parent, &input, &state, &golden, &answer,
		&u.SlotsTaken, &u.JudgmentsPerUnit, &u.JudgmentCount, &result, &confidence, &finalized, &created, &updated, &feedback); err != nil {
		return nil, err
	}
	var err error
	if u.ID, err = parseUUID("unit", id); err != nil {
		return nil, err
	}
	if u.PoolID, err = parseUUID("pool", poolID); err != nil {
		return nil, err
	}
	if u.RunID, err = parseNullUUID(runID); err != nil {
		return nil, fmt.Errorf("unit run id %q: %w", runID.String, err)
	}
	if u.ParentUnitID, err = parseNullUUID(parent); err != nil {
		return nil, fmt.Errorf("unit parent id %q: %w", parent.String, err)
	}
	u.StepIndex = int(stepIndex.Int64)
	u.Input = json.RawMessage(input)
	u.State = crowd.UnitState(state)
	u.Golden = golden != 0
	if answer.Valid {
		u.Answer = json.RawMessage(answer.String)
	}
	if result.Valid {
		u.Result = json.RawMessage(result.String)
	}
	u.Feedback = feedback.String
	if confidence.Valid {
		c := confidence.Float64
		u.Confidence = &c
	}
	u.FinalizedAt = fromNullMicros(finalized)
	u.CreatedAt, u.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &u, nil
}

// UnitInsertMany implements store.Store.
func (s *Store) UnitInsertMany(ctx context.Context, p *store.UnitInsertManyParams) ([]*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []*crowd.Unit
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitInsertMany(ctx, tx, p)
		return err
	})
	return out, err
}

// insertUnitSQL inserts one unit.
const insertUnitSQL = `INSERT INTO docket_units (id, pool_id, run_id, step_index, parent_unit_id,
		input, state, golden, answer, pick_key, judgments_per_unit, created_at, updated_at, feedback)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// unitInsertMany writes the units one statement each and counts
// them.
func unitInsertMany(ctx context.Context, tx *sql.Tx, p *store.UnitInsertManyParams) ([]*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var (
		status string
		jpu    int
	)
	err := tx.QueryRowContext(ctx, `SELECT status, judgments_per_unit FROM docket_pools WHERE id = ?`, p.PoolID.String()).Scan(&status, &jpu)
	if err != nil {
		return nil, fmt.Errorf("insert units into pool %s: %w", p.PoolID, notFound(err))
	}
	if st := crowd.PoolStatus(status); st == crowd.PoolClosed || st == crowd.PoolCompleted {
		return nil, fmt.Errorf("insert units: %w", &crowd.PoolNotOpenError{PoolID: p.PoolID, Status: st})
	}
	now := fromMicros(micros(p.Now))
	units := make([]*crowd.Unit, len(p.Units))
	regular, golden := 0, 0
	for i, up := range p.Units {
		u := &crowd.Unit{
			ID: up.ID, PoolID: p.PoolID, RunID: up.RunID, StepIndex: up.StepIndex, ParentUnitID: up.ParentUnitID,
			Input: up.Input, State: p.State, Golden: up.Golden, Answer: up.Answer, Feedback: up.Feedback,
			JudgmentsPerUnit: up.JudgmentsPerUnit, CreatedAt: now, UpdatedAt: now,
		}
		if u.JudgmentsPerUnit == 0 {
			u.JudgmentsPerUnit = jpu
		}
		if u.Golden {
			u.State = crowd.UnitJudgable
			golden++
		} else {
			regular++
		}
		var stepIndex any
		if u.RunID != uuid.Nil {
			stepIndex = u.StepIndex
		}
		if _, err := tx.ExecContext(ctx, insertUnitSQL, u.ID.String(), p.PoolID.String(), nullUUID(u.RunID), stepIndex,
			nullUUID(u.ParentUnitID), string(u.Input), string(u.State), boolInt(u.Golden), nullJSON(u.Answer),
			rand.Int64(), u.JudgmentsPerUnit, micros(now), micros(now), nullString(u.Feedback)); err != nil {
			if isUnique(err) {
				return nil, fmt.Errorf("insert unit %s: %w", u.ID, store.ErrDuplicate)
			}
			return nil, fmt.Errorf("insert unit %s: %w", u.ID, err)
		}
		units[i] = u
	}
	if _, err := tx.ExecContext(ctx, `UPDATE docket_pool_counters SET `+unitCounter(p.State)+` = `+unitCounter(p.State)+` + ?,
		units_golden = units_golden + ? WHERE pool_id = ? AND shard = ?`, regular, golden, p.PoolID.String(), poolShard); err != nil {
		return nil, fmt.Errorf("insert units: count: %w", err)
	}
	return units, nil
}

// UnitGet implements store.Store.
func (s *Store) UnitGet(ctx context.Context, id uuid.UUID) (*crowd.Unit, error) {
	return unitGet(ctx, s.reader, id)
}

func unitGet(ctx context.Context, c conn, id uuid.UUID) (*crowd.Unit, error) {
	u, err := scanUnit(c.QueryRowContext(ctx, `SELECT `+unitColumns+` FROM docket_units WHERE id = ?`, id.String()))
	if err != nil {
		return nil, fmt.Errorf("get unit %s: %w", id, notFound(err))
	}
	return u, nil
}

// UnitList implements store.Store.
func (s *Store) UnitList(ctx context.Context, p *store.UnitListParams) ([]*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	where, args := []string{"pool_id = ?"}, []any{p.PoolID.String()}
	// The states (validated: known words) and golden are written into the
	// statement: SQLite uses a partial index only for a WHERE whose terms
	// match its predicate, which a parameter does not (the pool's judgable
	// golden units are docket_units_golden's).
	if st := store.UnitStateLiterals(p.States); len(st) == 1 {
		where = append(where, "state = "+st[0])
	} else if len(st) > 1 {
		where = append(where, "state IN ("+strings.Join(st, ", ")+")")
	}
	if p.Golden != nil {
		where = append(where, "golden = "+strconv.FormatInt(boolInt(*p.Golden), 10))
	}
	if p.RunID != uuid.Nil {
		where, args = append(where, "run_id = ?"), append(args, p.RunID.String())
	}
	if p.BeforeID != uuid.Nil {
		where, args = append(where, "id < ?"), append(args, p.BeforeID.String())
	}
	out, err := queryAll(ctx, s.reader, scanUnit, `SELECT `+unitColumns+` FROM docket_units WHERE `+
		strings.Join(where, " AND ")+` ORDER BY id DESC LIMIT ?`, append(args, limit(p.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("list units: %w", err)
	}
	return out, nil
}

// openUnit is the condition of a regular unit a take may pick, word for
// word the predicate of the docket_units_open indexes.
const openUnit = `state = 'JUDGABLE' AND golden = 0 AND slots_taken < judgments_per_unit`

// poolEligibleSQL is finding work, one query: the OPEN pools in the
// order of the answer (docket_pools_open_order, named: left to itself the
// planner reads every open pool by status and sorts them), each kept when its skills
// (a JSON array) are all the contributor's, it shares a channel with them
// or requires none, they are not flagged in it and it holds a unit a take
// could hand them (docket_units_open, then the assignments' unique
// index); it stops at the limit.
var poolEligibleSQL = `
WITH me AS (SELECT id, skills, channels FROM docket_contributors WHERE id = ? AND state = 'active')
` + strings.Replace(poolSelect, "FROM docket_pools p", "FROM docket_pools p INDEXED BY docket_pools_open_order", 1) + ` JOIN me ON 1
WHERE p.status = 'OPEN'
	AND NOT EXISTS (SELECT 1 FROM json_each(p.skills) s WHERE s.value NOT IN (SELECT value FROM json_each(me.skills)))
	AND (p.channels = '[]' OR EXISTS (SELECT 1 FROM json_each(p.channels) ch
		WHERE ch.value IN (SELECT value FROM json_each(me.channels))))
	AND NOT EXISTS (SELECT 1 FROM docket_pool_contributors pc
		WHERE pc.pool_id = p.id AND pc.contributor_id = me.id AND pc.flagged)
	AND EXISTS (SELECT 1 FROM docket_units WHERE docket_units.pool_id = p.id AND ` + openUnit + `
		AND NOT EXISTS (SELECT 1 FROM docket_assignments x WHERE x.unit_id = docket_units.id AND x.contributor_id = me.id))
ORDER BY p.priority, p.created_at, p.id
LIMIT ?`

// PoolListEligible implements store.Store.
func (s *Store) PoolListEligible(ctx context.Context, p *store.PoolListEligibleParams) ([]*crowd.Pool, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	out, err := queryAll(ctx, s.reader, scanPool, poolEligibleSQL, p.ContributorID.String(), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list eligible pools of contributor %s: %w", p.ContributorID, err)
	}
	if out == nil {
		out = []*crowd.Pool{}
	}
	return out, nil
}

// UnitListAvailable implements store.Store.
func (s *Store) UnitListAvailable(ctx context.Context, p *store.UnitListAvailableParams) ([]uuid.UUID, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	key := p.RandomKey
	if key == 0 {
		key = rand.Int64()
	}
	scanID := func(r scanner) (uuid.UUID, error) {
		var id string
		if err := r.Scan(&id); err != nil {
			return uuid.Nil, err
		}
		return parseUUID("unit", id)
	}
	q := `SELECT id FROM docket_units WHERE pool_id = ? AND ` + openUnit + ` AND pick_key %s ? ORDER BY pick_key LIMIT ?`
	out, err := queryAll(ctx, s.reader, scanID, fmt.Sprintf(q, ">="), p.PoolID.String(), key, p.Limit)
	if err == nil && len(out) < p.Limit {
		var more []uuid.UUID
		more, err = queryAll(ctx, s.reader, scanID, fmt.Sprintf(q, "<"), p.PoolID.String(), key, p.Limit-len(out))
		out = append(out, more...)
	}
	if err != nil {
		return nil, fmt.Errorf("list available units of pool %s: %w", p.PoolID, err)
	}
	return out, nil
}

// UnitTransition implements store.Store.
func (s *Store) UnitTransition(ctx context.Context, p *store.UnitTransitionParams) (*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out *crowd.Unit
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitTransition(ctx, tx, p)
		return err
	})
	return out, err
}

func unitTransition(ctx context.Context, tx *sql.Tx, p *store.UnitTransitionParams) (*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	u, err := scanUnit(tx.QueryRowContext(ctx, `UPDATE docket_units SET state = ?1, updated_at = ?2,
			result = CASE WHEN ?1 = 'JUDGABLE' THEN NULL ELSE result END,
			confidence = CASE WHEN ?1 = 'JUDGABLE' THEN NULL ELSE confidence END,
			finalized_at = CASE WHEN ?1 = 'JUDGABLE' THEN NULL ELSE finalized_at END
		WHERE id = ?3 AND state = ?4
		RETURNING `+unitColumns, string(p.To), micros(p.Now), p.ID.String(), string(p.From)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, unitRefused(ctx, tx, p.ID, p.To)
	}
	if err != nil {
		return nil, fmt.Errorf("transition unit %s: %w", p.ID, err)
	}
	if !u.Golden {
		from, to := unitCounter(p.From), unitCounter(p.To)
		if _, err := tx.ExecContext(ctx, `UPDATE docket_pool_counters SET `+from+` = `+from+` - 1, `+to+` = `+to+` + 1
			WHERE pool_id = ? AND shard = ?`, u.PoolID.String(), poolShard); err != nil {
			return nil, fmt.Errorf("transition unit %s: count: %w", p.ID, err)
		}
		if p.From == crowd.UnitFinalized {
			if err := poolReopen(ctx, tx, u.PoolID, p.Now); err != nil {
				return nil, fmt.Errorf("transition unit %s: %w", p.ID, err)
			}
		}
	}
	return u, nil
}

// poolReopen moves the COMPLETED pool of a unit just reopened back to
// CLOSED, with its pool.updated (store.CrowdTx.UnitTransition): its
// close ends the unit again. The one writer: no completion races it.
func poolReopen(ctx context.Context, tx *sql.Tx, poolID uuid.UUID, now time.Time) error {
	res, err := tx.ExecContext(ctx, `UPDATE docket_pools SET status = 'CLOSED', updated_at = ? WHERE id = ? AND status = 'COMPLETED'`,
		micros(now), poolID.String())
	if err != nil {
		return fmt.Errorf("reopen pool %s: %w", poolID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	return insertOutbox(ctx, tx, crowd.EventPoolUpdated, crowd.PoolUpdatedData{PoolID: poolID, From: crowd.PoolCompleted, To: crowd.PoolClosed}, now)
}

// unitRefused explains a guarded change of a unit that matched no row.
func unitRefused(ctx context.Context, c conn, id uuid.UUID, to crowd.UnitState) error {
	var (
		state  string
		golden int64
	)
	if err := c.QueryRowContext(ctx, `SELECT state, golden FROM docket_units WHERE id = ?`, id.String()).Scan(&state, &golden); err != nil {
		return fmt.Errorf("transition unit %s: %w", id, notFound(err))
	}
	ite := &crowd.InvalidTransitionError{Of: "unit", ID: id.String(), From: state, To: string(to)}
	if golden != 0 && to == crowd.UnitFinalized {
		ite.Reason = "a golden unit is never finalized"
	}
	return ite
}

// UnitFinalize implements store.Store.
func (s *Store) UnitFinalize(ctx context.Context, p *store.UnitFinalizeParams) (*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out *crowd.Unit
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitFinalize(ctx, tx, p)
		return err
	})
	return out, err
}

func unitFinalize(ctx context.Context, tx *sql.Tx, p *store.UnitFinalizeParams) (*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var confidence any
	if p.Confidence != nil {
		confidence = *p.Confidence
	}
	u, err := scanUnit(tx.QueryRowContext(ctx, `UPDATE docket_units SET state = 'FINALIZED', result = ?, confidence = ?,
			finalized_at = ?3, updated_at = ?3
		WHERE id = ? AND state = 'JUDGABLE' AND golden = 0
		RETURNING `+unitColumns, string(p.Result), confidence, micros(p.Now), p.ID.String()))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, unitRefused(ctx, tx, p.ID, crowd.UnitFinalized)
	}
	if err != nil {
		return nil, fmt.Errorf("finalize unit %s: %w", p.ID, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE docket_pool_counters SET units_judgable = units_judgable - 1,
		units_finalized = units_finalized + 1 WHERE pool_id = ? AND shard = ?`, u.PoolID.String(), poolShard); err != nil {
		return nil, fmt.Errorf("finalize unit %s: count: %w", p.ID, err)
	}
	data := crowd.UnitFinalizedData{UnitID: u.ID, PoolID: u.PoolID, StepIndex: u.StepIndex, Result: u.Result,
		Confidence: u.Confidence, JudgmentCount: u.JudgmentCount, LowConfidence: p.LowConfidence, Judgments: p.FinalizedJudgments()}
	if u.RunID != uuid.Nil {
		data.RunID = &u.RunID
	}
	if err := insertOutbox(ctx, tx, crowd.EventUnitFinalized, data, p.Now); err != nil {
		return nil, err
	}
	return u, nil
}

// UnitRetarget implements store.Store.
func (s *Store) UnitRetarget(ctx context.Context, p *store.UnitRetargetParams) (*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out *crowd.Unit
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = unitRetarget(ctx, tx, p)
		return err
	})
	return out, err
}

func unitRetarget(ctx context.Context, tx *sql.Tx, p *store.UnitRetargetParams) (*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	u, err := scanUnit(tx.QueryRowContext(ctx, `UPDATE docket_units SET judgments_per_unit = ?, updated_at = ?
		WHERE id = ? AND state IN ('NEW', 'JUDGABLE', 'PAUSED') AND golden = 0
		RETURNING `+unitColumns, p.JudgmentsPerUnit, micros(p.Now), p.ID.String()))
	if errors.Is(err, sql.ErrNoRows) {
		var (
			state  string
			golden int64
		)
		if err := tx.QueryRowContext(ctx, `SELECT state, golden FROM docket_units WHERE id = ?`, p.ID.String()).Scan(&state, &golden); err != nil {
			return nil, fmt.Errorf("retarget unit %s: %w", p.ID, notFound(err))
		}
		return nil, store.RetargetRefused(p.ID, crowd.UnitState(state), golden != 0)
	}
	if err != nil {
		return nil, fmt.Errorf("retarget unit %s: %w", p.ID, err)
	}
	return u, nil
}
