package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// StepJobEnds implements store.Store.
func (s *Store) StepJobEnds(ctx context.Context, runID uuid.UUID) ([]*store.StepJobEnd, error) {
	return stepJobEnds(ctx, s.reader, runID)
}

// StepJobEnds implements store.Tx.
func (t *storeTx) StepJobEnds(ctx context.Context, runID uuid.UUID) ([]*store.StepJobEnd, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return stepJobEnds(ctx, t.tx, runID)
}

func stepJobEnds(ctx context.Context, c conn, runID uuid.UUID) ([]*store.StepJobEnd, error) {
	return scanJobEnds(ctx, c, "run "+runID.String(), `
		SELECT s.run_id, s.step, s.step_index, s.generation, s.job_id, j.state, j.result, j.last_error
		FROM docket_steps s JOIN docket_jobs j ON j.id = s.job_id
		WHERE s.run_id = ? AND s.state = 'RUNNING' AND j.state IN ('SUCCESS', 'DEAD', 'CANCELED')
		ORDER BY s.step, s.step_index`, runID.String())
}

// RunLoadMany implements store.Store.
func (s *Store) RunLoadMany(ctx context.Context, ids []uuid.UUID) ([]*store.RunLoad, error) {
	var out []*store.RunLoad
	err := s.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		var err error
		out, err = tx.RunLoadMany(ctx, ids)
		return err
	})
	return out, err
}

// RunLoadMany implements store.Tx. The transaction holds the database's
// write lock, which locks the runs.
func (t *storeTx) RunLoadMany(ctx context.Context, ids []uuid.UUID) ([]*store.RunLoad, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return runLoadMany(ctx, t.tx, ids)
}

func runLoadMany(ctx context.Context, c conn, ids []uuid.UUID) ([]*store.RunLoad, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = id.String()
	}
	arg, err := json.Marshal(strs)
	if err != nil {
		return nil, err
	}
	runs, err := queryRuns(ctx, c, `SELECT `+runColumns+` FROM docket_runs
		WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id`, string(arg))
	if err != nil {
		return nil, fmt.Errorf("lock %d runs: %w", len(ids), err)
	}
	if len(runs) == 0 {
		return nil, nil
	}
	out := make([]*store.RunLoad, len(runs))
	byID := make(map[uuid.UUID]*store.RunLoad, len(runs))
	for i, r := range runs {
		out[i] = &store.RunLoad{Run: r}
		byID[r.ID] = out[i]
	}
	rs, err := c.QueryContext(ctx, `SELECT `+stepColumns+` FROM docket_steps
		WHERE run_id IN (SELECT value FROM json_each(?1)) ORDER BY run_id, step, step_index`, string(arg))
	if err != nil {
		return nil, fmt.Errorf("list steps of %d runs: %w", len(ids), err)
	}
	defer func() { _ = rs.Close() }()
	for rs.Next() {
		st, err := scanStep(rs)
		if err != nil {
			return nil, fmt.Errorf("list steps of %d runs: %w", len(ids), err)
		}
		if l := byID[st.RunID]; l != nil {
			l.Steps = append(l.Steps, st)
		}
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list steps of %d runs: %w", len(ids), err)
	}
	_ = rs.Close()
	ends, err := scanJobEnds(ctx, c, "runs", `
		SELECT s.run_id, s.step, s.step_index, s.generation, s.job_id, j.state, j.result, j.last_error
		FROM docket_steps s JOIN docket_jobs j ON j.id = s.job_id
		WHERE s.run_id IN (SELECT value FROM json_each(?1)) AND s.state = 'RUNNING'
			AND j.state IN ('SUCCESS', 'DEAD', 'CANCELED')
		ORDER BY s.run_id, s.step, s.step_index`, string(arg))
	if err != nil {
		return nil, err
	}
	for _, e := range ends {
		if l := byID[e.RunID]; l != nil {
			l.JobEnds = append(l.JobEnds, e)
		}
	}
	return out, nil
}

// scanJobEnds runs query, one of the step job ends statements, with arg;
// of names what was asked in errors.
func scanJobEnds(ctx context.Context, c conn, of, query string, arg any) ([]*store.StepJobEnd, error) {
	rs, err := c.QueryContext(ctx, query, arg)
	if err != nil {
		return nil, fmt.Errorf("list ended step jobs of %s: %w", of, err)
	}
	defer func() { _ = rs.Close() }()
	var out []*store.StepJobEnd
	for rs.Next() {
		var (
			e            store.StepJobEnd
			runID, jobID string
			state        string
			result       sql.NullString
		)
		if err := rs.Scan(&runID, &e.Step, &e.Index, &e.Generation, &jobID, &state, &result, &e.Error); err != nil {
			return nil, fmt.Errorf("list ended step jobs of %s: %w", of, err)
		}
		if e.RunID, err = uuid.Parse(runID); err != nil {
			return nil, fmt.Errorf("list ended step jobs of %s: run id %q: %w", of, runID, err)
		}
		if e.JobID, err = uuid.Parse(jobID); err != nil {
			return nil, fmt.Errorf("list ended step jobs of %s: job id %q: %w", of, jobID, err)
		}
		e.JobState = job.State(state)
		if result.Valid {
			e.Result = json.RawMessage(result.String)
		}
		out = append(out, &e)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list ended step jobs of %s: %w", of, err)
	}
	return out, nil
}

// StepUnitEnds implements store.Store.
func (s *Store) StepUnitEnds(ctx context.Context, runID uuid.UUID) ([]*store.StepUnitEnd, error) {
	return stepUnitEnds(ctx, s.reader, runID)
}

// StepUnitEnds implements store.Tx.
func (t *storeTx) StepUnitEnds(ctx context.Context, runID uuid.UUID) ([]*store.StepUnitEnd, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return stepUnitEnds(ctx, t.tx, runID)
}

func stepUnitEnds(ctx context.Context, c conn, runID uuid.UUID) ([]*store.StepUnitEnd, error) {
	rs, err := c.QueryContext(ctx, `
		SELECT s.step, s.step_index, s.generation, u.id, u.state, u.result, u.confidence
		FROM docket_steps s JOIN docket_units u ON u.id = s.unit_id
		WHERE s.run_id = ? AND s.state = 'RUNNING' AND s.kind = 'human' AND u.state IN ('FINALIZED', 'CANCELED')
		ORDER BY s.step, s.step_index`, runID.String())
	if err != nil {
		return nil, fmt.Errorf("list ended step units of run %s: %w", runID, err)
	}
	defer func() { _ = rs.Close() }()
	var out []*store.StepUnitEnd
	for rs.Next() {
		var (
			e             store.StepUnitEnd
			unitID, state string
			result        sql.NullString
			confidence    sql.NullFloat64
		)
		if err := rs.Scan(&e.Step, &e.Index, &e.Generation, &unitID, &state, &result, &confidence); err != nil {
			return nil, fmt.Errorf("list ended step units of run %s: %w", runID, err)
		}
		if e.UnitID, err = uuid.Parse(unitID); err != nil {
			return nil, fmt.Errorf("list ended step units of run %s: unit id %q: %w", runID, unitID, err)
		}
		e.UnitState = crowd.UnitState(state)
		if result.Valid {
			e.Result = json.RawMessage(result.String)
		}
		if confidence.Valid {
			e.Confidence = &confidence.Float64
		}
		out = append(out, &e)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list ended step units of run %s: %w", runID, err)
	}
	return out, nil
}

// limitArg is n as a LIMIT: -1 (none) when n is not positive.
func limitArg(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// StepRunsToAdvance implements store.Store (partial index
// docket_steps_running).
func (s *Store) StepRunsToAdvance(ctx context.Context, p *store.StepRunsToAdvanceParams) ([]uuid.UUID, error) {
	rs, err := s.reader.QueryContext(ctx, `
		SELECT run_id FROM (
			SELECT s.run_id
			FROM docket_steps s JOIN docket_jobs j ON j.id = s.job_id
			WHERE s.state = 'RUNNING' AND s.kind = 'job' AND j.state IN ('SUCCESS', 'DEAD', 'CANCELED')
			UNION
			SELECT s.run_id
			FROM docket_steps s JOIN docket_units u ON u.id = s.unit_id
			WHERE s.state = 'RUNNING' AND s.kind = 'human' AND u.state IN ('FINALIZED', 'CANCELED'))
		WHERE run_id > ?
		ORDER BY run_id
		LIMIT ?`, p.After.String(), limitArg(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list runs to advance: %w", err)
	}
	defer func() { _ = rs.Close() }()
	var out []uuid.UUID
	for rs.Next() {
		var s string
		if err := rs.Scan(&s); err != nil {
			return nil, fmt.Errorf("list runs to advance: %w", err)
		}
		id, err := uuid.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("list runs to advance: run id %q: %w", s, err)
		}
		out = append(out, id)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list runs to advance: %w", err)
	}
	return out, nil
}

// StepSignalsWaiting implements store.Store.
func (s *Store) StepSignalsWaiting(ctx context.Context, p *store.StepSignalsWaitingParams) ([]*store.SignalWait, error) {
	rs, err := s.reader.QueryContext(ctx, `
		SELECT s.run_id, r.workflow, r.version, s.step, s.step_index, s.generation, s.started_at, s.timeout_at
		FROM docket_steps s JOIN docket_runs r ON r.id = s.run_id
		WHERE s.state = 'RUNNING' AND s.timeout_at IS NOT NULL AND s.timeout_at <= ?
		ORDER BY s.timeout_at
		LIMIT ?`, micros(p.TimedOutBy), limitArg(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list waiting signals: %w", err)
	}
	defer func() { _ = rs.Close() }()
	var out []*store.SignalWait
	for rs.Next() {
		var (
			w                store.SignalWait
			runID            string
			started, timeout int64
		)
		if err := rs.Scan(&runID, &w.Workflow, &w.Version, &w.Step, &w.Index, &w.Generation, &started, &timeout); err != nil {
			return nil, fmt.Errorf("list waiting signals: %w", err)
		}
		if w.RunID, err = uuid.Parse(runID); err != nil {
			return nil, fmt.Errorf("list waiting signals: run id %q: %w", runID, err)
		}
		w.StartedAt, w.TimeoutAt = fromMicros(started), fromMicros(timeout)
		out = append(out, &w)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list waiting signals: %w", err)
	}
	return out, nil
}

// RunCancelRequest implements store.Store.
func (s *Store) RunCancelRequest(ctx context.Context, p *store.RunCancelRequestParams) (*flow.Run, error) {
	var r *flow.Run
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		r, err = runCancelRequest(ctx, tx, p)
		return err
	})
	return r, err
}

// RunCancelRequest implements store.Tx.
func (t *storeTx) RunCancelRequest(ctx context.Context, p *store.RunCancelRequestParams) (*flow.Run, error) {
	var r *flow.Run
	err := t.savepoint(ctx, func(sqlTx *sql.Tx) error {
		var err error
		r, err = runCancelRequest(ctx, sqlTx, p)
		return err
	})
	return r, err
}

func runCancelRequest(ctx context.Context, tx *sql.Tx, p *store.RunCancelRequestParams) (*flow.Run, error) {
	r, err := scanRun(tx.QueryRowContext(ctx, `
		UPDATE docket_runs SET cancel_requested = 1,
			updated_at = CASE WHEN cancel_requested THEN updated_at ELSE ? END
		WHERE id = ? AND state IN ('RUNNING', 'PAUSED')
		RETURNING `+runColumns, micros(p.Now), p.ID.String()))
	if errors.Is(err, sql.ErrNoRows) {
		run, err := runGet(ctx, tx, p.ID)
		if err != nil {
			return nil, fmt.Errorf("request the cancel of run %s: %w", p.ID, err)
		}
		return nil, &flow.InvalidTransitionError{Of: "run", ID: p.ID.String(), From: string(run.State), To: string(flow.RunCanceled)}
	}
	if err != nil {
		return nil, fmt.Errorf("request the cancel of run %s: %w", p.ID, err)
	}
	return r, nil
}
