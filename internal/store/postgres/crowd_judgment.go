package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

const judgmentColumns = `id, assignment_id, unit_id, pool_id, contributor_id, data, trust, golden, tainted,
	started_at, submitted_at`

func scanJudgment(r rowScanner) (*crowd.Judgment, error) {
	var (
		j    crowd.Judgment
		data []byte
	)
	if err := r.Scan(&j.ID, &j.AssignmentID, &j.UnitID, &j.PoolID, &j.ContributorID, &data, &j.Trust, &j.Golden,
		&j.Tainted, &j.StartedAt, &j.SubmittedAt); err != nil {
		return nil, err
	}
	j.Data = json.RawMessage(data)
	j.StartedAt = j.StartedAt.UTC()
	j.SubmittedAt = j.SubmittedAt.UTC()
	return &j, nil
}

// judgmentInsertSQL is the intake of one judgment in one statement: the
// assignment (ACTIVE, the contributor's, not expired) becomes SUBMITTED,
// the unit counts the judgment, the judgment is stored (with @trust, or
// the pool's trust in the contributor when it is NULL), the pool's
// counters move and judgment.received is written. It returns the
// judgment and the unit as its update left it: the unit row is locked by
// that update, so its state is the latest committed (a cancel that
// committed first shows as CANCELED).
const judgmentInsertSQL = `
WITH a AS (
	UPDATE docket_assignments SET state = 'SUBMITTED', finished_at = @now
	WHERE id = @assignment AND contributor_id = @contributor AND ` + assignmentActive + ` AND expires_at >= @now
	RETURNING id, unit_id, pool_id, contributor_id, started_at
),
u AS (
	UPDATE docket_units u SET judgment_count = u.judgment_count + 1, updated_at = @now
	FROM a WHERE u.id = a.unit_id
	RETURNING u.id, u.run_id, u.state, u.golden, u.judgment_count, u.judgments_per_unit
),
j AS (
	INSERT INTO docket_judgments (id, assignment_id, unit_id, pool_id, contributor_id, data, trust, golden,
		started_at, submitted_at)
	SELECT @id, a.id, a.unit_id, a.pool_id, a.contributor_id, @data::jsonb,
		coalesce(@trust::double precision, (SELECT pc.trust FROM docket_pool_contributors pc
			WHERE pc.pool_id = a.pool_id AND pc.contributor_id = a.contributor_id)),
		u.golden, a.started_at, @now
	FROM a JOIN u ON u.id = a.unit_id
	RETURNING *
),
c AS (
	UPDATE docket_pool_counters pc SET judgments = pc.judgments + 1, active_assignments = pc.active_assignments - 1
	FROM a WHERE pc.pool_id = a.pool_id AND pc.shard = @shard
),
o AS (
	INSERT INTO docket_outbox (event_type, data, created_at)
	SELECT 'judgment.received', json_build_object('judgmentId', j.id, 'assignmentId', j.assignment_id,
		'unitId', j.unit_id, 'poolId', j.pool_id, 'contributorId', j.contributor_id, 'golden', j.golden,
		'judgmentCount', u.judgment_count, 'judgmentsPerUnit', u.judgments_per_unit), @now
	FROM j JOIN u ON u.id = j.unit_id
)
SELECT j.id, j.assignment_id, j.unit_id, j.pool_id, j.contributor_id, j.data, j.trust, j.golden, j.tainted,
	j.started_at, j.submitted_at, u.run_id, u.state, u.judgment_count, u.judgments_per_unit
FROM j JOIN u ON u.id = j.unit_id`

// judgmentInsertStmt is judgmentInsertSQL compiled once.
var judgmentInsertStmt = compileNamed(judgmentInsertSQL)

// judgmentInsertPipedStmt is judgmentInsertSQL for JudgmentInTx's
// pipeline, sent with the lock of the contributor's quality state (which
// makes it at their first judgment in the pool): it changes nothing when
// there is no state to lock (another transaction is making it; the
// transaction then starts again the one-by-one way), so a judgment is
// never written without that lock, nor locks its unit before the state.
var judgmentInsertPipedStmt = compileNamed(judgmentInsertPipedSQL)

var judgmentInsertPipedSQL = mustReplace(judgmentInsertSQL, ` AND expires_at >= @now
	RETURNING`, ` AND expires_at >= @now
		AND EXISTS (SELECT 1 FROM docket_pool_contributors pc
			WHERE pc.pool_id = docket_assignments.pool_id AND pc.contributor_id = @contributor)
	RETURNING`)

// mustReplace is s with its one occurrence of old replaced by with.
func mustReplace(s, old, with string) string {
	if strings.Count(s, old) != 1 {
		panic(fmt.Sprintf("%q is not once in the statement", old))
	}
	return strings.Replace(s, old, with, 1)
}

// JudgmentInsert implements store.Store.
func (s *Store) JudgmentInsert(ctx context.Context, p *store.JudgmentInsertParams) (*store.JudgmentInserted, error) {
	return judgmentInsert(ctx, s.pool, p)
}

func judgmentInsert(ctx context.Context, c conn, p *store.JudgmentInsertParams) (*store.JudgmentInserted, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	ins, err := scanJudgmentInserted(c.QueryRow(ctx, judgmentInsertStmt.sql, judgmentInsertArgs(ctx, judgmentInsertStmt, p)...))
	if err != nil {
		return nil, fmt.Errorf("insert judgment for assignment %s: %w", p.AssignmentID, err)
	}
	if ins != nil {
		return ins, nil
	}
	return judgmentNotInserted(ctx, c, p)
}

// judgmentInsertArgs are judgmentInsertStmt's arguments.
func judgmentInsertArgs(ctx context.Context, stmt positional, p *store.JudgmentInsertParams) []any {
	return stmt.args(pgx.NamedArgs{
		"id": p.ID, "assignment": p.AssignmentID, "contributor": p.ContributorID, "data": string(p.Data),
		"trust": p.Trust, "now": dbTime(p.Now), "shard": shard(ctx),
	})
}

// scanJudgmentInserted reads the row of judgmentInsertStmt: nil (and no
// error) when it inserted nothing (judgmentNotInserted says why). first
// are the destinations of columns before the judgment's, if any
// (judgmentInsertBatchSQL's ord).
func scanJudgmentInserted(row pgx.Row, first ...any) (*store.JudgmentInserted, error) {
	var (
		j     crowd.Judgment
		data  []byte
		runID *uuid.UUID
		state string
		unit  store.JudgedUnit
	)
	err := row.Scan(append(first, &j.ID, &j.AssignmentID, &j.UnitID, &j.PoolID, &j.ContributorID, &data, &j.Trust, &j.Golden,
		&j.Tainted, &j.StartedAt, &j.SubmittedAt, &runID, &state, &unit.JudgmentCount, &unit.JudgmentsPerUnit)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	j.Data = json.RawMessage(data)
	j.StartedAt, j.SubmittedAt = j.StartedAt.UTC(), j.SubmittedAt.UTC()
	unit.ID, unit.State, unit.Golden = j.UnitID, crowd.UnitState(state), j.Golden
	if runID != nil {
		unit.RunID = *runID
	}
	return &store.JudgmentInserted{Judgment: &j, Created: true, Unit: &unit}, nil
}

// judgmentNotInserted explains a judgment statement that inserted
// nothing: the judgment stored before through the assignment (the same
// data), or why the assignment refused it.
func judgmentNotInserted(ctx context.Context, c conn, p *store.JudgmentInsertParams) (*store.JudgmentInserted, error) {
	now := dbTime(p.Now)
	a, err := assignmentGet(ctx, c, p.AssignmentID)
	if err != nil {
		return nil, err
	}
	if a.ContributorID == p.ContributorID && a.State == crowd.AssignmentSubmitted {
		prev, err := scanJudgment(c.QueryRow(ctx, `SELECT `+judgmentColumns+` FROM docket_judgments
			WHERE assignment_id = $1`, p.AssignmentID))
		if err != nil {
			return nil, fmt.Errorf("insert judgment for assignment %s: read the stored one: %w", p.AssignmentID, err)
		}
		if !store.SameJSON(prev.Data, p.Data) {
			return nil, &crowd.JudgmentConflictError{AssignmentID: p.AssignmentID, JudgmentID: prev.ID}
		}
		return &store.JudgmentInserted{Judgment: prev}, nil
	}
	if err := store.RefuseAssignment(a, p.ContributorID, now, true); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("insert judgment for assignment %s: it changed meanwhile; try again", p.AssignmentID)
}

// JudgmentList implements store.Store.
func (s *Store) JudgmentList(ctx context.Context, p *store.JudgmentListParams) ([]*crowd.Judgment, error) {
	return judgmentList(ctx, s.pool, p)
}

func judgmentList(ctx context.Context, c conn, p *store.JudgmentListParams) ([]*crowd.Judgment, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	col, id := "unit_id", p.UnitID
	if p.PoolID != uuid.Nil {
		col, id = "pool_id", p.PoolID
	}
	var before any
	if p.BeforeID != uuid.Nil {
		before = p.BeforeID
	}
	var contributor any
	if p.ContributorID != uuid.Nil {
		contributor = p.ContributorID
	}
	rs, err := c.Query(ctx, `SELECT `+judgmentColumns+` FROM docket_judgments
		WHERE `+col+` = $1 AND ($2::uuid IS NULL OR id < $2) AND ($4::uuid IS NULL OR contributor_id = $4)
		ORDER BY id DESC LIMIT $3`, id, before, limitOrNull(p.Limit), contributor)
	if err != nil {
		return nil, fmt.Errorf("list judgments: %w", err)
	}
	out, err := collect(rs, scanJudgment)
	if err != nil {
		return nil, fmt.Errorf("list judgments: %w", err)
	}
	return out, nil
}
