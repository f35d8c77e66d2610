package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

const unitColumns = `id, pool_id, run_id, step_index, parent_unit_id, input, state, golden, answer,
	slots_taken, judgments_per_unit, judgment_count, result, confidence, finalized_at, created_at, updated_at, feedback`

func scanUnit(r rowScanner) (*crowd.Unit, error) {
	var (
		u                     crowd.Unit
		runID, parent         *uuid.UUID
		stepIndex             *int
		input, answer, result []byte
		state                 string
		finalized             *time.Time
		feedback              *string
	)
	if err := r.Scan(&u.ID, &u.PoolID, &runID, &stepIndex, &parent, &input, &state, &u.Golden, &answer,
		&u.SlotsTaken, &u.JudgmentsPerUnit, &u.JudgmentCount, &result, &u.Confidence, &finalized,
		&u.CreatedAt, &u.UpdatedAt, &feedback); err != nil {
		return nil, err
	}
	u.RunID = uuidOrNil(runID)
	u.ParentUnitID = uuidOrNil(parent)
	if stepIndex != nil {
		u.StepIndex = *stepIndex
	}
	u.Input = json.RawMessage(input)
	if answer != nil {
		u.Answer = json.RawMessage(answer)
	}
	if result != nil {
		u.Result = json.RawMessage(result)
	}
	if feedback != nil {
		u.Feedback = *feedback
	}
	u.State = crowd.UnitState(state)
	u.FinalizedAt = utcOrZero(finalized)
	u.CreatedAt = u.CreatedAt.UTC()
	u.UpdatedAt = u.UpdatedAt.UTC()
	return &u, nil
}

// copyMinUnits: batches larger than this are written with COPY.
const copyMinUnits = 50

// unitCopyColumns are the docket_units columns a COPY fills, in the order
// appendUnitRow encodes them.
var unitCopyColumns = []string{
	"id", "pool_id", "run_id", "step_index", "parent_unit_id", "input", "state", "golden", "answer",
	"pick_key", "judgments_per_unit", "created_at", "updated_at", "feedback",
}

// UnitInsertMany implements store.Store.
func (s *Store) UnitInsertMany(ctx context.Context, p *store.UnitInsertManyParams) ([]*crowd.Unit, error) {
	var out []*crowd.Unit
	err := s.withTx(ctx, func(c pgx.Tx) error {
		var err error
		out, err = unitInsertMany(ctx, c, p)
		return err
	})
	return out, err
}

// unitInsertMany locks the pool against a concurrent close (FOR SHARE),
// writes the units (COPY for a large batch, one INSERT from arrays
// otherwise) and counts them on one counter shard.
func unitInsertMany(ctx context.Context, tx pgx.Tx, p *store.UnitInsertManyParams) ([]*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var (
		status string
		jpu    int
	)
	err := tx.QueryRow(ctx, `SELECT status, judgments_per_unit FROM docket_pools WHERE id = $1 FOR SHARE`, p.PoolID).Scan(&status, &jpu)
	if err != nil {
		return nil, fmt.Errorf("insert units into pool %s: %w", p.PoolID, notFound(err))
	}
	if st := crowd.PoolStatus(status); st == crowd.PoolClosed || st == crowd.PoolCompleted {
		return nil, fmt.Errorf("insert units: %w", &crowd.PoolNotOpenError{PoolID: p.PoolID, Status: st})
	}
	now := dbTime(p.Now)
	units := make([]*crowd.Unit, len(p.Units))
	keys := make([]int64, len(p.Units))
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
		units[i] = u
		keys[i] = rand.Int64()
	}
	if len(units) > copyMinUnits {
		var buf bytes.Buffer
		buf.WriteString(copySignature)
		for i, u := range units {
			buf.Write(appendUnitRow(nil, u, keys[i]))
		}
		buf.Write(binary.BigEndian.AppendUint16(nil, 0xffff))
		copySQL := "COPY docket_units (" + strings.Join(unitCopyColumns, ", ") + ") FROM STDIN (FORMAT binary)"
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, &buf, copySQL); err != nil {
			return nil, fmt.Errorf("insert units: copy: %w", unitInsertError(err))
		}
	} else {
		var (
			ids, runs, parents []*uuid.UUID
			stepIdx, jpus      []*int32
			inputs, answers    []*string
			feedbacks          []*string
			goldens            []bool
		)
		for i, u := range units {
			ids = append(ids, &units[i].ID)
			runs = append(runs, uuidPtr(u.RunID))
			parents = append(parents, uuidPtr(u.ParentUnitID))
			var si *int32
			if u.RunID != uuid.Nil {
				v := int32(u.StepIndex)
				si = &v
			}
			stepIdx = append(stepIdx, si)
			v := int32(u.JudgmentsPerUnit)
			jpus = append(jpus, &v)
			in := string(u.Input)
			inputs = append(inputs, &in)
			var ans *string
			if u.Answer != nil {
				a := string(u.Answer)
				ans = &a
			}
			answers = append(answers, ans)
			var fb *string
			if u.Feedback != "" {
				fb = &units[i].Feedback
			}
			feedbacks = append(feedbacks, fb)
			goldens = append(goldens, u.Golden)
		}
		states := make([]string, len(units))
		for i, u := range units {
			states[i] = string(u.State)
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO docket_units (id, pool_id, run_id, step_index, parent_unit_id, input, state, golden, answer,
				pick_key, judgments_per_unit, created_at, updated_at, feedback)
			SELECT id, $1, run_id, step_index, parent_unit_id, input::jsonb, state, golden, answer::jsonb,
				pick_key, jpu, $11, $11, feedback
			FROM unnest($2::uuid[], $3::uuid[], $4::integer[], $5::uuid[], $6::text[], $7::text[], $8::boolean[],
				$9::text[], $10::bigint[], $12::integer[], $13::text[])
				AS u(id, run_id, step_index, parent_unit_id, input, state, golden, answer, pick_key, jpu, feedback)`,
			p.PoolID, ids, runs, stepIdx, parents, inputs, states, goldens, answers, keys, now, jpus, feedbacks)
		if err != nil {
			return nil, fmt.Errorf("insert units: %w", unitInsertError(err))
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE docket_pool_counters SET `+unitCounter(p.State)+` = `+unitCounter(p.State)+` + $3,
		units_golden = units_golden + $4 WHERE pool_id = $1 AND shard = $2`, p.PoolID, shard(ctx), regular, golden); err != nil {
		return nil, fmt.Errorf("insert units: count: %w", err)
	}
	return units, nil
}

// unitInsertError names a duplicate unit id.
func unitInsertError(err error) error {
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: %w", store.ErrDuplicate, err)
	}
	return err
}

func uuidPtr(id uuid.UUID) *uuid.UUID {
	if id == uuid.Nil {
		return nil
	}
	return &id
}

// appendUnitRow appends u's unitCopyColumns in COPY's binary format.
func appendUnitRow(b []byte, u *crowd.Unit, pickKey int64) []byte {
	null := func(b []byte) []byte { return binary.BigEndian.AppendUint32(b, 0xffffffff) }
	b = binary.BigEndian.AppendUint16(b, uint16(len(unitCopyColumns)))
	b = appendField(b, u.ID[:])
	b = appendField(b, u.PoolID[:])
	if u.RunID == uuid.Nil {
		b = null(b)
		b = null(b)
	} else {
		b = appendField(b, u.RunID[:])
		b = binary.BigEndian.AppendUint32(appendLen(b, 4), uint32(u.StepIndex))
	}
	if u.ParentUnitID == uuid.Nil {
		b = null(b)
	} else {
		b = appendField(b, u.ParentUnitID[:])
	}
	b = append(append(appendLen(b, 1+len(u.Input)), 1), u.Input...) // jsonb: version 1, then the text
	b = appendText(b, string(u.State))
	golden := byte(0)
	if u.Golden {
		golden = 1
	}
	b = append(appendLen(b, 1), golden)
	if u.Answer == nil {
		b = null(b)
	} else {
		b = append(append(appendLen(b, 1+len(u.Answer)), 1), u.Answer...)
	}
	b = binary.BigEndian.AppendUint64(appendLen(b, 8), uint64(pickKey))
	b = binary.BigEndian.AppendUint32(appendLen(b, 4), uint32(u.JudgmentsPerUnit))
	b = appendTimestamp(b, micros(u.CreatedAt))
	b = appendTimestamp(b, micros(u.UpdatedAt))
	if u.Feedback == "" {
		return null(b)
	}
	return appendText(b, u.Feedback)
}

// UnitGet implements store.Store.
func (s *Store) UnitGet(ctx context.Context, id uuid.UUID) (*crowd.Unit, error) {
	return unitGet(ctx, s.pool, id)
}

func unitGet(ctx context.Context, c conn, id uuid.UUID) (*crowd.Unit, error) {
	u, err := scanUnit(c.QueryRow(ctx, `SELECT `+unitColumns+` FROM docket_units WHERE id = $1`, id))
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
	q, args := unitListSQL(p)
	rs, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list units: %w", err)
	}
	out, err := collect(rs, scanUnit)
	if err != nil {
		return nil, fmt.Errorf("list units: %w", err)
	}
	return out, nil
}

// unitListSQL is UnitList's statement. The states (validated: known
// words) and golden are written into it, not sent as parameters: a
// prepared statement's generic plan cannot match a parameter to the
// partial indexes' predicates, and "the pool's judgable golden units"
// (asked before a take schedules a test question) then walked every unit
// of the pool instead of docket_units_golden. A handful of texts result.
func unitListSQL(p *store.UnitListParams) (string, []any) {
	args := []any{p.PoolID}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where := []string{"pool_id = $1"}
	if st := store.UnitStateLiterals(p.States); len(st) == 1 {
		where = append(where, "state = "+st[0])
	} else if len(st) > 1 {
		where = append(where, "state IN ("+strings.Join(st, ", ")+")")
	}
	if p.Golden != nil {
		if *p.Golden {
			where = append(where, "golden")
		} else {
			where = append(where, "NOT golden")
		}
	}
	if p.RunID != uuid.Nil {
		where = append(where, "run_id = "+arg(p.RunID))
	}
	if p.BeforeID != uuid.Nil {
		where = append(where, "id < "+arg(p.BeforeID))
	}
	q := `SELECT ` + unitColumns + ` FROM docket_units WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY id DESC LIMIT ` + arg(limitOrNull(p.Limit))
	return q, args
}

// openUnit is the condition of a regular unit a take may pick; it matches
// the predicate of the docket_units_open indexes word for word, so the
// planner uses them. has_slot is slots_taken < judgments_per_unit, stored
// (migration 0021): a take that leaves the unit a free slot changes no
// indexed column, so its update is HOT.
const openUnit = `u.state = 'JUDGABLE' AND NOT u.golden AND u.has_slot`

// UnitListAvailable implements store.Store.
func (s *Store) UnitListAvailable(ctx context.Context, p *store.UnitListAvailableParams) ([]uuid.UUID, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	key := p.RandomKey
	if key == 0 {
		key = rand.Int64()
	}
	rs, err := s.pool.Query(ctx, `
		(SELECT u.id FROM docket_units u WHERE u.pool_id = $1 AND `+openUnit+` AND u.pick_key >= $2
			ORDER BY u.pick_key LIMIT $3)
		UNION ALL
		(SELECT u.id FROM docket_units u WHERE u.pool_id = $1 AND `+openUnit+` AND u.pick_key < $2
			ORDER BY u.pick_key LIMIT $3)
		LIMIT $3`, p.PoolID, key, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list available units of pool %s: %w", p.PoolID, err)
	}
	out, err := collect(rs, func(r rowScanner) (uuid.UUID, error) {
		var id uuid.UUID
		return id, r.Scan(&id)
	})
	if err != nil {
		return nil, fmt.Errorf("list available units of pool %s: %w", p.PoolID, err)
	}
	return out, nil
}

// poolEligibleSQL is finding work, one statement. The contributor's
// skills and channels are read once (InitPlans), so the candidate pools
// are found through the partial GIN index of the open pools' skills
// (docket_pools_open_skills: skills <@ theirs, which finds the pools
// requiring none too), their channels checked on the rows found. The
// candidates are sorted first (OFFSET 0 keeps the planner from pulling the
// checks below into the scan), then each, in order, is checked for a flag
// and for a unit a take could hand the contributor (docket_units_open,
// then the assignments' unique index) until the limit is reached: a
// contributor open to thousands of pools pays those checks for the few
// listed only. The counters are summed for the pools kept.
var poolEligibleSQL = `
WITH picked AS (
	SELECT cand.id, cand.priority, cand.created_at FROM (
		SELECT p.id, p.priority, p.created_at FROM docket_pools p
		WHERE p.status = 'OPEN'
			AND p.skills <@ (SELECT skills FROM docket_contributors WHERE id = @contributor AND state = 'active')
			AND (p.channels && (SELECT channels FROM docket_contributors WHERE id = @contributor)
				OR p.channels = '{}'::text[])
		ORDER BY p.priority, p.created_at, p.id
		OFFSET 0
	) cand
	WHERE NOT EXISTS (SELECT 1 FROM docket_pool_contributors pc
			WHERE pc.pool_id = cand.id AND pc.contributor_id = @contributor AND pc.flagged)
		AND EXISTS (SELECT 1 FROM docket_units u WHERE u.pool_id = cand.id AND ` + openUnit + `
			AND NOT EXISTS (SELECT 1 FROM docket_assignments x WHERE x.unit_id = u.id AND x.contributor_id = @contributor OFFSET 0))
	ORDER BY cand.priority, cand.created_at, cand.id
	LIMIT @limit
)
` + poolSelect + ` JOIN picked ON picked.id = p.id
ORDER BY picked.priority, picked.created_at, picked.id`

// PoolListEligible implements store.Store.
func (s *Store) PoolListEligible(ctx context.Context, p *store.PoolListEligibleParams) ([]*crowd.Pool, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rs, err := s.pool.Query(ctx, poolEligibleSQL, pgx.NamedArgs{"contributor": p.ContributorID, "limit": p.Limit})
	if err != nil {
		return nil, fmt.Errorf("list eligible pools of contributor %s: %w", p.ContributorID, err)
	}
	out, err := collect(rs, scanPool)
	if err != nil {
		return nil, fmt.Errorf("list eligible pools of contributor %s: %w", p.ContributorID, err)
	}
	if out == nil {
		out = []*crowd.Pool{}
	}
	return out, nil
}

// UnitTransition implements store.Store.
func (s *Store) UnitTransition(ctx context.Context, p *store.UnitTransitionParams) (*crowd.Unit, error) {
	if p.From != crowd.UnitFinalized {
		return unitTransition(ctx, s.pool, p)
	}
	// A reopen: the pool's lock (poolReopen) must last until the counters
	// moved.
	var out *crowd.Unit
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = unitTransition(ctx, tx, p)
		return err
	})
	return out, err
}

// unitTransition is one statement: the guarded change and the move of
// the pool's counters (regular units only).
func unitTransition(ctx context.Context, c conn, p *store.UnitTransitionParams) (*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.From == crowd.UnitFinalized {
		if err := poolReopen(ctx, c, p.ID, p.Now); err != nil {
			return nil, err
		}
	}
	from, to := unitCounter(p.From), unitCounter(p.To)
	// @to::text: state is a domain (migration 0022), and a parameter
	// PostgreSQL would type by its first use has two types here.
	u, err := scanUnit(c.QueryRow(ctx, `
		WITH t AS (
			UPDATE docket_units SET state = @to::text, updated_at = @now,
				result = CASE WHEN @to = 'JUDGABLE' THEN NULL ELSE result END,
				confidence = CASE WHEN @to = 'JUDGABLE' THEN NULL ELSE confidence END,
				finalized_at = CASE WHEN @to = 'JUDGABLE' THEN NULL ELSE finalized_at END
			WHERE id = @id AND state = @from
			RETURNING *
		),
		c AS (
			UPDATE docket_pool_counters pc SET `+from+` = pc.`+from+` - 1, `+to+` = pc.`+to+` + 1
			FROM t WHERE pc.pool_id = t.pool_id AND pc.shard = @shard AND NOT t.golden
		)
		SELECT `+unitColumns+` FROM t`, pgx.NamedArgs{
		"id": p.ID, "from": string(p.From), "to": string(p.To), "now": dbTime(p.Now), "shard": shard(ctx),
	}))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, unitRefused(ctx, c, p.ID, p.To)
	}
	if err != nil {
		return nil, fmt.Errorf("transition unit %s: %w", p.ID, err)
	}
	return u, nil
}

// poolReopenSQL moves the COMPLETED pool $1 back to CLOSED, with its
// pool.updated, and returns its id (no row for another status).
const poolReopenSQL = `
WITH t AS (
	UPDATE docket_pools SET status = 'CLOSED', updated_at = $2
	WHERE id = $1 AND status = 'COMPLETED'
	RETURNING id
),
o AS (
	INSERT INTO docket_outbox (event_type, data, created_at)
	SELECT 'pool.updated', json_build_object('poolId', id, 'from', 'COMPLETED', 'to', 'CLOSED'), $2 FROM t
)
SELECT id FROM t`

// poolReopen prepares the reopen of a FINALIZED unit (to JUDGABLE:
// store.CrowdTx.UnitTransition), before its counters move. The unit is
// locked first, FINALIZED and regular (lock order, docs/quality.md:
// units → pool → pool counter row, as a flag's repair, which holds its
// units before it reopens one); any other unit is left to the guarded
// change, which refuses it, and its pool is not touched — before, the
// pool moved first and a refused redo, which a review's reject
// tolerates in a transaction that commits, kept the move. Then its
// pool, when COMPLETED, is CLOSED again (its close ends the unit again);
// otherwise the pool's row is locked FOR NO KEY UPDATE until the
// transaction ends, so that no completion (PoolCompleteMany: FOR UPDATE
// SKIP LOCKED) takes the pool while the unit it counts as final is
// reopened. A pool completed between the two statements is seen by the
// second (a locking read sees the latest row) and flipped by a second
// round under the lock already held. The lock is the one the flip
// takes, not FOR SHARE: reopens of units of one pool that all found it
// completed under their share locks each waited for the others' to
// update it, a deadlock PostgreSQL broke by aborting all but one
// (TestPoolReopenRacesCompletion). So reopens of one pool's units, and
// unit inserts into it (FOR SHARE), wait for each other's transactions;
// a key share (foreign keys) is not held up.
func poolReopen(ctx context.Context, c conn, unitID uuid.UUID, now time.Time) error {
	var poolID uuid.UUID
	err := c.QueryRow(ctx, `SELECT pool_id FROM docket_units WHERE id = $1 AND state = 'FINALIZED' AND NOT golden FOR UPDATE`,
		unitID).Scan(&poolID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // no reopen: the guarded change says why
	}
	if err != nil {
		return fmt.Errorf("lock unit %s: %w", unitID, err)
	}
	for range 2 {
		var id uuid.UUID
		err := c.QueryRow(ctx, poolReopenSQL, poolID, dbTime(now)).Scan(&id)
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("reopen pool %s of unit %s: %w", poolID, unitID, err)
		}
		var status string
		err = c.QueryRow(ctx, `SELECT status FROM docket_pools WHERE id = $1 FOR NO KEY UPDATE`, poolID).Scan(&status)
		if err != nil {
			return fmt.Errorf("lock pool %s of unit %s: %w", poolID, unitID, err)
		}
		if crowd.PoolStatus(status) != crowd.PoolCompleted {
			return nil
		}
	}
	return fmt.Errorf("reopen pool %s of unit %s: still COMPLETED under its lock", poolID, unitID)
}

// unitRefused explains a guarded change of a unit that matched no row.
func unitRefused(ctx context.Context, c conn, id uuid.UUID, to crowd.UnitState) error {
	var (
		state  string
		golden bool
	)
	if err := c.QueryRow(ctx, `SELECT state, golden FROM docket_units WHERE id = $1`, id).Scan(&state, &golden); err != nil {
		return fmt.Errorf("transition unit %s: %w", id, notFound(err))
	}
	ite := &crowd.InvalidTransitionError{Of: "unit", ID: id.String(), From: state, To: string(to)}
	if golden && to == crowd.UnitFinalized {
		ite.Reason = "a golden unit is never finalized"
	}
	return ite
}

// UnitFinalize implements store.Store.
func (s *Store) UnitFinalize(ctx context.Context, p *store.UnitFinalizeParams) (*crowd.Unit, error) {
	return unitFinalize(ctx, s.pool, p)
}

// unitFinalizeSQL finalizes a regular JUDGABLE unit, moves the counters
// and writes unit.finalized, in one statement.
const unitFinalizeSQL = `
WITH t AS (
	UPDATE docket_units SET state = 'FINALIZED', result = @result::jsonb, confidence = @confidence,
		finalized_at = @now, updated_at = @now
	WHERE id = @id AND state = 'JUDGABLE' AND NOT golden
	RETURNING *
),
c AS (
	UPDATE docket_pool_counters pc SET units_judgable = pc.units_judgable - 1, units_finalized = pc.units_finalized + 1
	FROM t WHERE pc.pool_id = t.pool_id AND pc.shard = @shard
),
o AS (
	INSERT INTO docket_outbox (event_type, data, created_at)
	SELECT 'unit.finalized', json_build_object('unitId', id, 'poolId', pool_id, 'runId', run_id,
		'stepIndex', coalesce(step_index, 0), 'result', result, 'confidence', confidence,
		'judgmentCount', judgment_count, 'lowConfidence', @low::boolean, 'judgments', @judgments::json), @now
	FROM t
)
SELECT ` + unitColumns + ` FROM t`

// unitFinalizeStmt is unitFinalizeSQL with positional parameters, rewritten
// once rather than by pgx.NamedArgs at every finalization.
var unitFinalizeStmt = compileNamed(unitFinalizeSQL)

func unitFinalize(ctx context.Context, c conn, p *store.UnitFinalizeParams) (*crowd.Unit, error) {
	args, err := unitFinalizeArgs(ctx, p)
	if err != nil {
		return nil, err
	}
	u, err := scanUnit(c.QueryRow(ctx, unitFinalizeStmt.sql, unitFinalizeStmt.args(args)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, unitRefused(ctx, c, p.ID, crowd.UnitFinalized)
	}
	if err != nil {
		return nil, fmt.Errorf("finalize unit %s: %w", p.ID, err)
	}
	return u, nil
}

// unitFinalizeArgs are unitFinalizeSQL's arguments for p (validated).
func unitFinalizeArgs(ctx context.Context, p *store.UnitFinalizeParams) (pgx.NamedArgs, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	judgments, err := json.Marshal(p.FinalizedJudgments())
	if err != nil {
		return nil, fmt.Errorf("finalize unit %s: %w", p.ID, err)
	}
	return pgx.NamedArgs{
		"id": p.ID, "result": string(p.Result), "confidence": p.Confidence, "now": dbTime(p.Now), "shard": shard(ctx),
		"low": p.LowConfidence, "judgments": string(judgments),
	}, nil
}

// UnitRetarget implements store.Store.
func (s *Store) UnitRetarget(ctx context.Context, p *store.UnitRetargetParams) (*crowd.Unit, error) {
	return unitRetarget(ctx, s.pool, p)
}

// unitRetarget sets an open regular unit's target; its row moves into or
// out of the take's partial indexes (has_slot: slots_taken <
// judgments_per_unit) with it.
func unitRetarget(ctx context.Context, c conn, p *store.UnitRetargetParams) (*crowd.Unit, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	u, err := scanUnit(c.QueryRow(ctx, `UPDATE docket_units SET judgments_per_unit = $2, updated_at = $3
		WHERE id = $1 AND state IN ('NEW', 'JUDGABLE', 'PAUSED') AND NOT golden
		RETURNING `+unitColumns, p.ID, p.JudgmentsPerUnit, dbTime(p.Now)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, retargetRefused(ctx, c, p.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("retarget unit %s: %w", p.ID, err)
	}
	return u, nil
}

// retargetRefused explains a retarget that matched no row.
func retargetRefused(ctx context.Context, c conn, id uuid.UUID) error {
	var (
		state  string
		golden bool
	)
	if err := c.QueryRow(ctx, `SELECT state, golden FROM docket_units WHERE id = $1`, id).Scan(&state, &golden); err != nil {
		return fmt.Errorf("retarget unit %s: %w", id, notFound(err))
	}
	return store.RetargetRefused(id, crowd.UnitState(state), golden)
}
