package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// stepJobEndsSQL: the running job instances of one run whose job ended.
// The run's instances come by the primary key's prefix, each job by its
// primary key.
const stepJobEndsSQL = `
SELECT s.run_id, s.step, s.step_index, s.generation, s.job_id, j.state, j.result, j.last_error
FROM docket_steps s JOIN docket_jobs j ON j.id = s.job_id
WHERE s.run_id = $1 AND s.state = 'RUNNING' AND j.state IN ('SUCCESS', 'DEAD', 'CANCELED')
ORDER BY s.step, s.step_index`

// stepJobEndsManySQL is stepJobEndsSQL for the runs of the array $1.
const stepJobEndsManySQL = `
SELECT s.run_id, s.step, s.step_index, s.generation, s.job_id, j.state, j.result, j.last_error
FROM docket_steps s JOIN docket_jobs j ON j.id = s.job_id
WHERE s.run_id = ANY($1) AND s.state = 'RUNNING' AND j.state IN ('SUCCESS', 'DEAD', 'CANCELED')
ORDER BY s.run_id, s.step, s.step_index`

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

// RunLoadMany implements store.Tx.
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
	runs, err := queryRuns(ctx, c, `SELECT `+runColumns+` FROM docket_runs WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
	if err != nil {
		return nil, fmt.Errorf("lock %d runs: %w", len(ids), err)
	}
	if len(runs) == 0 {
		return nil, nil
	}
	found := make([]uuid.UUID, len(runs))
	out := make([]*store.RunLoad, len(runs))
	byID := make(map[uuid.UUID]*store.RunLoad, len(runs))
	for i, r := range runs {
		found[i] = r.ID
		out[i] = &store.RunLoad{Run: r}
		byID[r.ID] = out[i]
	}
	steps, err := querySteps(ctx, c, `SELECT `+stepColumns+` FROM docket_steps
		WHERE run_id = ANY($1) ORDER BY run_id, step, step_index`, found)
	if err != nil {
		return nil, fmt.Errorf("list steps of %d runs: %w", len(found), err)
	}
	for _, st := range steps {
		if l := byID[st.RunID]; l != nil {
			l.Steps = append(l.Steps, st)
		}
	}
	ends, err := scanJobEnds(ctx, c, "runs", stepJobEndsManySQL, found)
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

// StepJobEnds implements store.Store.
func (s *Store) StepJobEnds(ctx context.Context, runID uuid.UUID) ([]*store.StepJobEnd, error) {
	return stepJobEnds(ctx, s.pool, runID)
}

// StepJobEnds implements store.Tx.
func (t *storeTx) StepJobEnds(ctx context.Context, runID uuid.UUID) ([]*store.StepJobEnd, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return stepJobEnds(ctx, t.tx, runID)
}

func stepJobEnds(ctx context.Context, c conn, runID uuid.UUID) ([]*store.StepJobEnd, error) {
	return scanJobEnds(ctx, c, "run "+runID.String(), stepJobEndsSQL, runID)
}

// scanJobEnds runs query, one of the stepJobEnds statements, with arg;
// of names what was asked in errors.
func scanJobEnds(ctx context.Context, c conn, of, query string, arg any) ([]*store.StepJobEnd, error) {
	rs, err := c.Query(ctx, query, arg)
	if err != nil {
		return nil, fmt.Errorf("list ended step jobs of %s: %w", of, err)
	}
	defer rs.Close()
	var out []*store.StepJobEnd
	for rs.Next() {
		var (
			e      store.StepJobEnd
			state  string
			result []byte
		)
		if err := rs.Scan(&e.RunID, &e.Step, &e.Index, &e.Generation, &e.JobID, &state, &result, &e.Error); err != nil {
			return nil, fmt.Errorf("list ended step jobs of %s: %w", of, err)
		}
		e.JobState = job.State(state)
		if result != nil {
			e.Result = json.RawMessage(result)
		}
		out = append(out, &e)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list ended step jobs of %s: %w", of, err)
	}
	return out, nil
}

// stepUnitEndsSQL: the running human instances of one run whose unit
// ended, each unit by its primary key.
const stepUnitEndsSQL = `
SELECT s.step, s.step_index, s.generation, u.id, u.state, u.result, u.confidence
FROM docket_steps s JOIN docket_units u ON u.id = s.unit_id
WHERE s.run_id = $1 AND s.state = 'RUNNING' AND s.kind = 'human' AND u.state IN ('FINALIZED', 'CANCELED')
ORDER BY s.step, s.step_index`

// StepUnitEnds implements store.Store.
func (s *Store) StepUnitEnds(ctx context.Context, runID uuid.UUID) ([]*store.StepUnitEnd, error) {
	return stepUnitEnds(ctx, s.pool, runID)
}

// StepUnitEnds implements store.Tx.
func (t *storeTx) StepUnitEnds(ctx context.Context, runID uuid.UUID) ([]*store.StepUnitEnd, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return stepUnitEnds(ctx, t.tx, runID)
}

func stepUnitEnds(ctx context.Context, c conn, runID uuid.UUID) ([]*store.StepUnitEnd, error) {
	rs, err := c.Query(ctx, stepUnitEndsSQL, runID)
	if err != nil {
		return nil, fmt.Errorf("list ended step units of run %s: %w", runID, err)
	}
	defer rs.Close()
	var out []*store.StepUnitEnd
	for rs.Next() {
		var (
			e      store.StepUnitEnd
			state  string
			result []byte
		)
		if err := rs.Scan(&e.Step, &e.Index, &e.Generation, &e.UnitID, &state, &result, &e.Confidence); err != nil {
			return nil, fmt.Errorf("list ended step units of run %s: %w", runID, err)
		}
		e.UnitState = crowd.UnitState(state)
		if result != nil {
			e.Result = json.RawMessage(result)
		}
		out = append(out, &e)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list ended step units of run %s: %w", runID, err)
	}
	return out, nil
}

// StepRunsToAdvance implements store.Store: the running job instances
// (partial index docket_steps_running), each job by its primary key.
func (s *Store) StepRunsToAdvance(ctx context.Context, p *store.StepRunsToAdvanceParams) ([]uuid.UUID, error) {
	rs, err := s.pool.Query(ctx, `
		SELECT run_id FROM (
			SELECT s.run_id
			FROM docket_steps s JOIN docket_jobs j ON j.id = s.job_id
			WHERE s.state = 'RUNNING' AND s.kind = 'job' AND j.state IN ('SUCCESS', 'DEAD', 'CANCELED')
			UNION
			SELECT s.run_id
			FROM docket_steps s JOIN docket_units u ON u.id = s.unit_id
			WHERE s.state = 'RUNNING' AND s.kind = 'human' AND u.state IN ('FINALIZED', 'CANCELED')) r
		WHERE run_id > $2
		ORDER BY run_id
		LIMIT $1`, limitOrNull(p.Limit), p.After)
	if err != nil {
		return nil, fmt.Errorf("list runs to advance: %w", err)
	}
	defer rs.Close()
	var out []uuid.UUID
	for rs.Next() {
		var id uuid.UUID
		if err := rs.Scan(&id); err != nil {
			return nil, fmt.Errorf("list runs to advance: %w", err)
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
	rs, err := s.pool.Query(ctx, `
		SELECT s.run_id, r.workflow, r.version, s.step, s.step_index, s.generation, s.started_at, s.timeout_at
		FROM docket_steps s JOIN docket_runs r ON r.id = s.run_id
		WHERE s.state = 'RUNNING' AND s.timeout_at IS NOT NULL AND s.timeout_at <= $1
		ORDER BY s.timeout_at
		LIMIT $2`, dbTime(p.TimedOutBy), limitOrNull(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list waiting signals: %w", err)
	}
	defer rs.Close()
	var out []*store.SignalWait
	for rs.Next() {
		var w store.SignalWait
		var started, timeout time.Time
		if err := rs.Scan(&w.RunID, &w.Workflow, &w.Version, &w.Step, &w.Index, &w.Generation, &started, &timeout); err != nil {
			return nil, fmt.Errorf("list waiting signals: %w", err)
		}
		w.StartedAt, w.TimeoutAt = started.UTC(), timeout.UTC()
		out = append(out, &w)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list waiting signals: %w", err)
	}
	return out, nil
}

// RunCancelRequest implements store.Store.
func (s *Store) RunCancelRequest(ctx context.Context, p *store.RunCancelRequestParams) (*flow.Run, error) {
	return runCancelRequest(ctx, s.pool, p)
}

// RunCancelRequest implements store.Tx.
func (t *storeTx) RunCancelRequest(ctx context.Context, p *store.RunCancelRequestParams) (*flow.Run, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return runCancelRequest(ctx, t.tx, p)
}

func runCancelRequest(ctx context.Context, c conn, p *store.RunCancelRequestParams) (*flow.Run, error) {
	r, err := scanRun(c.QueryRow(ctx, `
		UPDATE docket_runs SET cancel_requested = true,
			updated_at = CASE WHEN cancel_requested THEN updated_at ELSE $2 END
		WHERE id = $1 AND state IN ('RUNNING', 'PAUSED')
		RETURNING `+runColumns, p.ID, dbTime(p.Now)))
	if errors.Is(err, pgx.ErrNoRows) {
		run, err := runGet(ctx, c, p.ID, false)
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
