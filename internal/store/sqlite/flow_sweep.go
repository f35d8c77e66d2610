package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

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
	rs, err := c.QueryContext(ctx, `
		SELECT s.step, s.step_index, s.generation, s.job_id, j.state, j.result, j.last_error
		FROM docket_steps s JOIN docket_jobs j ON j.id = s.job_id
		WHERE s.run_id = ? AND s.state = 'RUNNING' AND j.state IN ('SUCCESS', 'DEAD', 'CANCELED')
		ORDER BY s.step, s.step_index`, runID.String())
	if err != nil {
		return nil, fmt.Errorf("list ended step jobs of run %s: %w", runID, err)
	}
	defer func() { _ = rs.Close() }()
	var out []*store.StepJobEnd
	for rs.Next() {
		var (
			e            store.StepJobEnd
			jobID, state string
			result       sql.NullString
		)
		if err := rs.Scan(&e.Step, &e.Index, &e.Generation, &jobID, &state, &result, &e.Error); err != nil {
			return nil, fmt.Errorf("list ended step jobs of run %s: %w", runID, err)
		}
		if e.JobID, err = uuid.Parse(jobID); err != nil {
			return nil, fmt.Errorf("list ended step jobs of run %s: job id %q: %w", runID, jobID, err)
		}
		e.JobState = job.State(state)
		if result.Valid {
			e.Result = json.RawMessage(result.String)
		}
		out = append(out, &e)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list ended step jobs of run %s: %w", runID, err)
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
		SELECT DISTINCT s.run_id
		FROM docket_steps s JOIN docket_jobs j ON j.id = s.job_id
		WHERE s.state = 'RUNNING' AND s.kind = 'job' AND j.state IN ('SUCCESS', 'DEAD', 'CANCELED')
		LIMIT ?`, limitArg(p.Limit))
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
		SELECT s.run_id, r.workflow, r.version, s.step, s.step_index, s.generation, s.started_at
		FROM docket_steps s JOIN docket_runs r ON r.id = s.run_id
		WHERE s.state = 'RUNNING' AND s.kind = 'signal' AND s.started_at < ?
		ORDER BY s.started_at
		LIMIT ?`, micros(p.StartedBefore), limitArg(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list waiting signals: %w", err)
	}
	defer func() { _ = rs.Close() }()
	var out []*store.SignalWait
	for rs.Next() {
		var (
			w       store.SignalWait
			runID   string
			started int64
		)
		if err := rs.Scan(&runID, &w.Workflow, &w.Version, &w.Step, &w.Index, &w.Generation, &started); err != nil {
			return nil, fmt.Errorf("list waiting signals: %w", err)
		}
		if w.RunID, err = uuid.Parse(runID); err != nil {
			return nil, fmt.Errorf("list waiting signals: run id %q: %w", runID, err)
		}
		w.StartedAt = fromMicros(started)
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
