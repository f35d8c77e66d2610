package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

const assignmentColumns = `id, unit_id, pool_id, contributor_id, state, started_at, expires_at, heartbeat_at, finished_at`

func scanAssignment(r scanner) (*crowd.Assignment, error) {
	var (
		a                           crowd.Assignment
		id, unitID, poolID, cID, st string
		started, expires, heartbeat int64
		finished                    sql.NullInt64
	)
	if err := r.Scan(&id, &unitID, &poolID, &cID, &st, &started, &expires, &heartbeat, &finished); err != nil {
		return nil, err
	}
	var err error
	for _, f := range []struct {
		what string
		s    string
		dst  *uuid.UUID
	}{{"assignment", id, &a.ID}, {"unit", unitID, &a.UnitID}, {"pool", poolID, &a.PoolID}, {"contributor", cID, &a.ContributorID}} {
		if *f.dst, err = parseUUID(f.what, f.s); err != nil {
			return nil, err
		}
	}
	a.State = crowd.AssignmentState(st)
	a.StartedAt, a.ExpiresAt, a.HeartbeatAt = fromMicros(started), fromMicros(expires), fromMicros(heartbeat)
	a.FinishedAt = fromNullMicros(finished)
	return &a, nil
}

// AssignmentGet implements store.Store.
func (s *Store) AssignmentGet(ctx context.Context, id uuid.UUID) (*crowd.Assignment, error) {
	return assignmentGet(ctx, s.reader, id)
}

func assignmentGet(ctx context.Context, c conn, id uuid.UUID) (*crowd.Assignment, error) {
	a, err := scanAssignment(c.QueryRowContext(ctx, `SELECT `+assignmentColumns+` FROM docket_assignments WHERE id = ?`, id.String()))
	if err != nil {
		return nil, fmt.Errorf("get assignment %s: %w", id, notFound(err))
	}
	return a, nil
}

// notJudgedBy: the unit was never assigned to the contributor (the
// second parameter).
const notJudgedBy = `NOT EXISTS (SELECT 1 FROM docket_assignments x WHERE x.unit_id = docket_units.id AND x.contributor_id = ?)`

// AssignmentTake implements store.Store in one write transaction: the one
// writer makes the pick and the slot one step, so no row locks are needed.
func (s *Store) AssignmentTake(ctx context.Context, p *store.AssignmentTakeParams) (*crowd.Taken, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out *crowd.Taken
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = assignmentTake(ctx, tx, p)
		return err
	})
	return out, err
}

func assignmentTake(ctx context.Context, tx *sql.Tx, p *store.AssignmentTakeParams) (*crowd.Taken, error) {
	var (
		status, state                           sql.NullString
		poolSkills, poolChans, skills, channels sql.NullString
		flagged                                 sql.NullInt64
	)
	pool, who := p.PoolID.String(), p.ContributorID.String()
	if err := tx.QueryRowContext(ctx, `SELECT (SELECT status FROM docket_pools WHERE id = ?1),
		(SELECT state FROM docket_contributors WHERE id = ?2),
		(SELECT flagged FROM docket_pool_contributors WHERE pool_id = ?1 AND contributor_id = ?2),
		(SELECT skills FROM docket_pools WHERE id = ?1), (SELECT channels FROM docket_pools WHERE id = ?1),
		(SELECT skills FROM docket_contributors WHERE id = ?2), (SELECT channels FROM docket_contributors WHERE id = ?2)`, pool, who).
		Scan(&status, &state, &flagged, &poolSkills, &poolChans, &skills, &channels); err != nil {
		return nil, fmt.Errorf("take assignment in pool %s: %w", p.PoolID, err)
	}
	match := false
	if status.Valid && state.Valid {
		names := make([][]string, 4)
		for i, s := range []string{poolSkills.String, poolChans.String, skills.String, channels.String} {
			var err error
			if names[i], err = decodeNames(s); err != nil {
				return nil, fmt.Errorf("take assignment in pool %s: %w", p.PoolID, err)
			}
		}
		match = crowd.SkillsMatch(names[0], names[1], names[2], names[3])
	}
	if !status.Valid || !state.Valid || !match || status.String != string(crowd.PoolOpen) ||
		state.String != string(crowd.ContributorActive) || flagged.Int64 != 0 {
		return nil, refusal(p, status, state, flagged, match)
	}
	cond := openUnit
	if p.Golden {
		cond = `state = 'JUDGABLE' AND golden = 1`
	}
	pick := `SELECT id FROM docket_units WHERE pool_id = ? AND ` + cond + ` AND ` + notJudgedBy
	var (
		id  string
		err error
	)
	switch p.Strategy {
	case crowd.StrategyOrdered:
		err = tx.QueryRowContext(ctx, pick+` ORDER BY id LIMIT 1`, pool, who).Scan(&id)
	case crowd.StrategyRandom:
		key := p.RandomKey
		if key == 0 {
			key = rand.Int64()
		}
		err = tx.QueryRowContext(ctx, pick+` AND pick_key >= ? ORDER BY pick_key LIMIT 1`, pool, who, key).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			err = tx.QueryRowContext(ctx, pick+` AND pick_key >= ? ORDER BY pick_key LIMIT 1`, pool, who, int64(math.MinInt64)).Scan(&id)
		}
	case crowd.StrategyCandidates:
		args := []any{pool, who}
		var order strings.Builder
		order.WriteString(" ORDER BY CASE id")
		for i, c := range p.Candidates {
			args = append(args, c.String())
			fmt.Fprintf(&order, " WHEN ?%d THEN %d", len(args), i)
		}
		order.WriteString(" END LIMIT 1")
		ins := make([]string, len(p.Candidates))
		for i := range ins {
			ins[i] = fmt.Sprintf("?%d", i+3)
		}
		err = tx.QueryRowContext(ctx, `SELECT id FROM docket_units WHERE pool_id = ?1 AND `+cond+
			` AND `+strings.Replace(notJudgedBy, "?", "?2", 1)+` AND id IN (`+strings.Join(ins, ", ")+`)`+order.String(), args...).Scan(&id)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, crowd.ErrNoUnit
	}
	if err != nil {
		return nil, fmt.Errorf("take assignment in pool %s: %w", p.PoolID, err)
	}
	now := micros(p.Now)
	u, err := scanUnit(tx.QueryRowContext(ctx, `UPDATE docket_units SET slots_taken = slots_taken + 1, updated_at = ?
		WHERE id = ? RETURNING `+unitColumns, now, id))
	if err != nil {
		return nil, fmt.Errorf("take assignment in pool %s: %w", p.PoolID, err)
	}
	a, err := scanAssignment(tx.QueryRowContext(ctx, `INSERT INTO docket_assignments (id, unit_id, pool_id, contributor_id,
		state, started_at, expires_at, heartbeat_at) VALUES (?, ?, ?, ?, 'ACTIVE', ?5, ?6, ?5) RETURNING `+assignmentColumns,
		p.ID.String(), id, pool, who, now, micros(p.Now.Add(p.Duration))))
	if err != nil {
		return nil, fmt.Errorf("take assignment in pool %s: %w", p.PoolID, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE docket_pool_counters SET active_assignments = active_assignments + 1
		WHERE pool_id = ? AND shard = ?`, pool, poolShard); err != nil {
		return nil, fmt.Errorf("take assignment in pool %s: count: %w", p.PoolID, err)
	}
	return &crowd.Taken{Assignment: a, Unit: u}, nil
}

// refusal is the error of a take the pool or the contributor refuses.
func refusal(p *store.AssignmentTakeParams, status, state sql.NullString, flagged sql.NullInt64, match bool) error {
	switch {
	case !status.Valid:
		return fmt.Errorf("take assignment: pool %s: %w", p.PoolID, store.ErrNotFound)
	case !state.Valid:
		return fmt.Errorf("take assignment: contributor %s: %w", p.ContributorID, store.ErrNotFound)
	case !match:
		return &crowd.NotEligibleError{ContributorID: p.ContributorID, PoolID: p.PoolID, Reason: crowd.ReasonMissingSkill}
	case status.String != string(crowd.PoolOpen):
		return &crowd.PoolNotOpenError{PoolID: p.PoolID, Status: crowd.PoolStatus(status.String)}
	case state.String != string(crowd.ContributorActive):
		return &crowd.NotEligibleError{ContributorID: p.ContributorID, PoolID: p.PoolID, Reason: "the contributor is " + state.String}
	}
	return &crowd.NotEligibleError{ContributorID: p.ContributorID, PoolID: p.PoolID, Reason: "the contributor is flagged in the pool"}
}

// assignmentRefused explains a fenced change of an assignment that
// matched no row.
func assignmentRefused(ctx context.Context, c conn, id, contributor uuid.UUID, now time.Time, expiredToo bool) error {
	a, err := assignmentGet(ctx, c, id)
	if err != nil {
		return err
	}
	if err := store.RefuseAssignment(a, contributor, now, expiredToo); err != nil {
		return err
	}
	return fmt.Errorf("assignment %s changed meanwhile; try again", id)
}

// fenced runs one fenced UPDATE … RETURNING of an assignment in a write
// transaction, then more (when it matched) in the same transaction.
func (s *Store) fenced(ctx context.Context, what string, id, contributor uuid.UUID, now time.Time, expiredToo bool,
	query string, args []any, more func(tx *sql.Tx, a *crowd.Assignment) error) (*crowd.Assignment, error) {
	var a *crowd.Assignment
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		a, err = scanAssignment(tx.QueryRowContext(ctx, query, args...))
		if errors.Is(err, sql.ErrNoRows) {
			return assignmentRefused(ctx, tx, id, contributor, now, expiredToo)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, id, err)
		}
		if more != nil {
			return more(tx, a)
		}
		return nil
	})
	return a, err
}

// AssignmentHeartbeat implements store.Store.
func (s *Store) AssignmentHeartbeat(ctx context.Context, p *store.AssignmentHeartbeatParams) (*crowd.Assignment, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.fenced(ctx, "heartbeat assignment", p.ID, p.ContributorID, p.Now, true,
		`UPDATE docket_assignments SET heartbeat_at = ?3
		WHERE id = ?1 AND contributor_id = ?2 AND state = 'ACTIVE' AND expires_at >= ?3
		RETURNING `+assignmentColumns, []any{p.ID.String(), p.ContributorID.String(), micros(p.Now)}, nil)
}

// AssignmentExtend implements store.Store.
func (s *Store) AssignmentExtend(ctx context.Context, p *store.AssignmentExtendParams) (*crowd.Assignment, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.fenced(ctx, "extend assignment", p.ID, p.ContributorID, p.Now, true,
		`UPDATE docket_assignments SET expires_at = min(max(expires_at, ?4), started_at + ?5), heartbeat_at = ?3
		WHERE id = ?1 AND contributor_id = ?2 AND state = 'ACTIVE' AND expires_at >= ?3
		RETURNING `+assignmentColumns, []any{p.ID.String(), p.ContributorID.String(), micros(p.Now), micros(p.Now.Add(p.Duration)), crowd.AssignmentMaxHold.Microseconds()}, nil)
}

// AssignmentRelease implements store.Store.
func (s *Store) AssignmentRelease(ctx context.Context, p *store.AssignmentReleaseParams) (*crowd.Assignment, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := micros(p.Now)
	return s.fenced(ctx, "release assignment", p.ID, p.ContributorID, p.Now, false,
		`UPDATE docket_assignments SET state = 'RELEASED', finished_at = ?3
		WHERE id = ?1 AND contributor_id = ?2 AND state = 'ACTIVE'
		RETURNING `+assignmentColumns, []any{p.ID.String(), p.ContributorID.String(), now},
		func(tx *sql.Tx, a *crowd.Assignment) error {
			return freeSlots(ctx, tx, []*crowd.Assignment{a}, now)
		})
}

// freeSlots gives back the slots of assignments that left ACTIVE without
// a judgment, and their pools' active counts.
func freeSlots(ctx context.Context, tx *sql.Tx, as []*crowd.Assignment, now int64) error {
	for _, a := range as {
		if _, err := tx.ExecContext(ctx, `UPDATE docket_units SET slots_taken = slots_taken - 1, updated_at = ? WHERE id = ?`,
			now, a.UnitID.String()); err != nil {
			return fmt.Errorf("free the slot of assignment %s: %w", a.ID, err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE docket_pool_counters SET active_assignments = active_assignments - 1
			WHERE pool_id = ? AND shard = ?`, a.PoolID.String(), poolShard); err != nil {
			return fmt.Errorf("free the slot of assignment %s: count: %w", a.ID, err)
		}
	}
	return nil
}

// AssignmentExpire implements store.Store: one write transaction per
// batch.
func (s *Store) AssignmentExpire(ctx context.Context, p *store.AssignmentExpireParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	var n int
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := micros(p.Now)
		as, err := queryAll(ctx, tx, scanAssignment, `UPDATE docket_assignments SET state = 'EXPIRED', finished_at = ?1
			WHERE id IN (SELECT id FROM docket_assignments WHERE state = 'ACTIVE' AND expires_at < ?1
				ORDER BY expires_at LIMIT ?2)
			RETURNING `+assignmentColumns, now, p.Max)
		if err != nil || len(as) == 0 {
			return err
		}
		n = len(as)
		if err := freeSlots(ctx, tx, as, now); err != nil {
			return err
		}
		data := crowd.AssignmentExpiredData{Assignments: make([]crowd.ExpiredAssignment, len(as))}
		for i, a := range as {
			data.Assignments[i] = crowd.ExpiredAssignment{AssignmentID: a.ID, UnitID: a.UnitID, PoolID: a.PoolID, ContributorID: a.ContributorID}
		}
		return insertOutbox(ctx, tx, crowd.EventAssignmentExpired, data, p.Now)
	})
	if err != nil {
		return 0, fmt.Errorf("expire assignments: %w", err)
	}
	return n, nil
}

// ---- Judgments ----

const judgmentColumns = `id, assignment_id, unit_id, pool_id, contributor_id, data, trust, golden, tainted,
	started_at, submitted_at`

func scanJudgment(r scanner) (*crowd.Judgment, error) {
	var (
		j                         crowd.Judgment
		id, aID, uID, pID, cID, d string
		trust                     sql.NullFloat64
		golden, tainted           int64
		started, submitted        int64
	)
	if err := r.Scan(&id, &aID, &uID, &pID, &cID, &d, &trust, &golden, &tainted, &started, &submitted); err != nil {
		return nil, err
	}
	var err error
	for _, f := range []struct {
		what string
		s    string
		dst  *uuid.UUID
	}{{"judgment", id, &j.ID}, {"assignment", aID, &j.AssignmentID}, {"unit", uID, &j.UnitID}, {"pool", pID, &j.PoolID},
		{"contributor", cID, &j.ContributorID}} {
		if *f.dst, err = parseUUID(f.what, f.s); err != nil {
			return nil, err
		}
	}
	j.Data = json.RawMessage(d)
	if trust.Valid {
		t := trust.Float64
		j.Trust = &t
	}
	j.Golden, j.Tainted = golden != 0, tainted != 0
	j.StartedAt, j.SubmittedAt = fromMicros(started), fromMicros(submitted)
	return &j, nil
}

// JudgmentInsert implements store.Store.
func (s *Store) JudgmentInsert(ctx context.Context, p *store.JudgmentInsertParams) (*store.JudgmentInserted, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out *store.JudgmentInserted
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = judgmentInsert(ctx, tx, p)
		return err
	})
	return out, err
}

// judgmentInsert is the intake of one judgment in the write transaction
// tx: the fenced change of the assignment first, then the rest.
func judgmentInsert(ctx context.Context, tx *sql.Tx, p *store.JudgmentInsertParams) (*store.JudgmentInserted, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := micros(p.Now)
	a, err := scanAssignment(tx.QueryRowContext(ctx, `UPDATE docket_assignments SET state = 'SUBMITTED', finished_at = ?3
		WHERE id = ?1 AND contributor_id = ?2 AND state = 'ACTIVE' AND expires_at >= ?3
		RETURNING `+assignmentColumns, p.AssignmentID.String(), p.ContributorID.String(), now))
	if errors.Is(err, sql.ErrNoRows) {
		return judgmentRefused(ctx, tx, p)
	}
	if err != nil {
		return nil, fmt.Errorf("insert judgment for assignment %s: %w", p.AssignmentID, err)
	}
	var (
		golden     int64
		count, jpu int
		runID      sql.NullString
		state      string
		trust      sql.NullFloat64
	)
	if err := tx.QueryRowContext(ctx, `UPDATE docket_units SET judgment_count = judgment_count + 1, updated_at = ?
		WHERE id = ? RETURNING golden, judgment_count, judgments_per_unit, run_id, state,
			(SELECT trust FROM docket_pool_contributors WHERE pool_id = ? AND contributor_id = ?)`,
		now, a.UnitID.String(), a.PoolID.String(), a.ContributorID.String()).Scan(&golden, &count, &jpu, &runID, &state, &trust); err != nil {
		return nil, fmt.Errorf("insert judgment for assignment %s: count on the unit: %w", p.AssignmentID, err)
	}
	if p.Trust != nil {
		trust = sql.NullFloat64{Float64: *p.Trust, Valid: true}
	}
	unit := &store.JudgedUnit{ID: a.UnitID, State: crowd.UnitState(state), Golden: golden != 0, JudgmentCount: count, JudgmentsPerUnit: jpu}
	if runID.Valid {
		var err error
		if unit.RunID, err = parseUUID("run", runID.String); err != nil {
			return nil, err
		}
	}
	j, err := scanJudgment(tx.QueryRowContext(ctx, `INSERT INTO docket_judgments (id, assignment_id, unit_id, pool_id,
		contributor_id, data, trust, golden, started_at, submitted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		RETURNING `+judgmentColumns, p.ID.String(), a.ID.String(), a.UnitID.String(), a.PoolID.String(),
		a.ContributorID.String(), string(p.Data), trust, golden, micros(a.StartedAt), now))
	if err != nil {
		return nil, fmt.Errorf("insert judgment for assignment %s: %w", p.AssignmentID, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE docket_pool_counters SET judgments = judgments + 1,
		active_assignments = active_assignments - 1 WHERE pool_id = ? AND shard = ?`, a.PoolID.String(), poolShard); err != nil {
		return nil, fmt.Errorf("insert judgment for assignment %s: count: %w", p.AssignmentID, err)
	}
	data := crowd.JudgmentReceivedData{JudgmentID: j.ID, AssignmentID: a.ID, UnitID: a.UnitID, PoolID: a.PoolID,
		ContributorID: a.ContributorID, Golden: j.Golden, JudgmentCount: count, JudgmentsPerUnit: jpu}
	if err := insertOutbox(ctx, tx, crowd.EventJudgmentReceived, data, p.Now); err != nil {
		return nil, err
	}
	return &store.JudgmentInserted{Judgment: j, Created: true, Unit: unit}, nil
}

// judgmentRefused explains an intake whose assignment was not ACTIVE and
// the contributor's, or finds the judgment stored before.
func judgmentRefused(ctx context.Context, tx *sql.Tx, p *store.JudgmentInsertParams) (*store.JudgmentInserted, error) {
	a, err := assignmentGet(ctx, tx, p.AssignmentID)
	if err != nil {
		return nil, err
	}
	if a.ContributorID == p.ContributorID && a.State == crowd.AssignmentSubmitted {
		prev, err := scanJudgment(tx.QueryRowContext(ctx, `SELECT `+judgmentColumns+` FROM docket_judgments
			WHERE assignment_id = ?`, p.AssignmentID.String()))
		if err != nil {
			return nil, fmt.Errorf("insert judgment for assignment %s: read the stored one: %w", p.AssignmentID, err)
		}
		if !store.SameJSON(prev.Data, p.Data) {
			return nil, &crowd.JudgmentConflictError{AssignmentID: p.AssignmentID, JudgmentID: prev.ID}
		}
		return &store.JudgmentInserted{Judgment: prev}, nil
	}
	if err := store.RefuseAssignment(a, p.ContributorID, p.Now, true); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("insert judgment for assignment %s: it changed meanwhile; try again", p.AssignmentID)
}

// JudgmentList implements store.Store.
func (s *Store) JudgmentList(ctx context.Context, p *store.JudgmentListParams) ([]*crowd.Judgment, error) {
	return judgmentList(ctx, s.reader, p)
}

func judgmentList(ctx context.Context, c conn, p *store.JudgmentListParams) ([]*crowd.Judgment, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	col, id := "unit_id", p.UnitID
	if p.PoolID != uuid.Nil {
		col, id = "pool_id", p.PoolID
	}
	q := `SELECT ` + judgmentColumns + ` FROM docket_judgments WHERE ` + col + ` = ?`
	args := []any{id.String()}
	if p.BeforeID != uuid.Nil {
		q, args = q+` AND id < ?`, append(args, p.BeforeID.String())
	}
	if p.ContributorID != uuid.Nil {
		q, args = q+` AND contributor_id = ?`, append(args, p.ContributorID.String())
	}
	out, err := queryAll(ctx, c, scanJudgment, q+` ORDER BY id DESC LIMIT ?`, append(args, limit(p.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("list judgments: %w", err)
	}
	return out, nil
}
