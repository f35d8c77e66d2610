package sqlite

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
)

// nullUUID encodes uuid.Nil as NULL, any other id as TEXT.
func nullUUID(id uuid.UUID) any {
	if id == uuid.Nil {
		return nil
	}
	return id.String()
}

// parseNullUUID decodes a nullable TEXT uuid; NULL is uuid.Nil.
func parseNullUUID(s sql.NullString) (uuid.UUID, error) {
	if !s.Valid {
		return uuid.Nil, nil
	}
	return uuid.Parse(s.String)
}

// ---- Definitions ----

const versionColumns = `v.name, v.version, v.hash, v.definition, v.created_at`

func scanVersion(r scanner) (*flow.Version, error) {
	var (
		v       flow.Version
		def     string
		created int64
	)
	if err := r.Scan(&v.Name, &v.Version, &v.Hash, &def, &created); err != nil {
		return nil, err
	}
	v.Definition = json.RawMessage(def)
	v.CreatedAt = fromMicros(created)
	return &v, nil
}

// WorkflowPut implements store.Store. The one writer connection serialises
// puts.
func (s *Store) WorkflowPut(ctx context.Context, p *store.WorkflowPutParams) (*flow.Version, bool, error) {
	var (
		v       *flow.Version
		created bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := micros(p.Now)
		var (
			latest int
			hash   string
		)
		err := tx.QueryRowContext(ctx, `SELECT latest_version, latest_hash FROM docket_workflows WHERE name = ?`,
			p.Name).Scan(&latest, &hash)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := tx.ExecContext(ctx, `INSERT INTO docket_workflows (name, latest_version, latest_hash, created_at, updated_at)
				VALUES (?, 0, '', ?, ?)`, p.Name, now, now); err != nil {
				return err
			}
		case err != nil:
			return err
		case hash == p.Hash:
			v, err = scanVersion(tx.QueryRowContext(ctx, `SELECT `+versionColumns+`
				FROM docket_workflow_versions v WHERE v.name = ? AND v.version = ?`, p.Name, latest))
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE docket_workflows SET latest_version = ?, latest_hash = ?, updated_at = ?
			WHERE name = ?`, latest+1, p.Hash, now, p.Name); err != nil {
			return err
		}
		v, err = scanVersion(tx.QueryRowContext(ctx, `INSERT INTO docket_workflow_versions (name, version, hash, definition, created_at)
			VALUES (?, ?, ?, ?, ?) RETURNING name, version, hash, definition, created_at`, p.Name, latest+1, p.Hash, string(p.Definition), now))
		created = true
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("put workflow %q: %w", p.Name, err)
	}
	return v, created, nil
}

// WorkflowGet implements store.Store.
func (s *Store) WorkflowGet(ctx context.Context, p *store.WorkflowGetParams) (*flow.Version, error) {
	return workflowGet(ctx, s.reader, p)
}

func workflowGet(ctx context.Context, c conn, p *store.WorkflowGetParams) (*flow.Version, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var row *sql.Row
	if p.Version == 0 {
		row = c.QueryRowContext(ctx, `SELECT `+versionColumns+`
			FROM docket_workflows w JOIN docket_workflow_versions v
				ON v.name = w.name AND v.version = w.latest_version
			WHERE w.name = ?`, p.Name)
	} else {
		row = c.QueryRowContext(ctx, `SELECT `+versionColumns+`
			FROM docket_workflow_versions v WHERE v.name = ? AND v.version = ?`, p.Name, p.Version)
	}
	v, err := scanVersion(row)
	if err != nil {
		return nil, fmt.Errorf("get workflow %q version %d: %w", p.Name, p.Version, notFound(err))
	}
	return v, nil
}

// WorkflowList implements store.Store.
func (s *Store) WorkflowList(ctx context.Context, p *store.WorkflowListParams) ([]*flow.Version, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rs, err := s.reader.QueryContext(ctx, `SELECT `+versionColumns+`
		FROM docket_workflows w JOIN docket_workflow_versions v
			ON v.name = w.name AND v.version = w.latest_version
		WHERE w.name > ?
		ORDER BY w.name
		LIMIT ?`, p.AfterName, limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	defer func() { _ = rs.Close() }()
	var out []*flow.Version
	for rs.Next() {
		v, err := scanVersion(rs)
		if err != nil {
			return nil, fmt.Errorf("list workflows: %w", err)
		}
		out = append(out, v)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	return out, nil
}

// ---- Runs ----

const runColumns = `id, workflow, version, state, input, output, error, idempotency_key,
	created_at, updated_at, finished_at, cancel_requested`

func scanRun(r scanner) (*flow.Run, error) {
	var (
		run              flow.Run
		id, state, input string
		output, key      sql.NullString
		created, updated int64
		finished         sql.NullInt64
	)
	if err := r.Scan(&id, &run.Workflow, &run.Version, &state, &input, &output, &run.Error, &key,
		&created, &updated, &finished, &run.CancelRequested); err != nil {
		return nil, err
	}
	var err error
	if run.ID, err = uuid.Parse(id); err != nil {
		return nil, fmt.Errorf("run id %q: %w", id, err)
	}
	run.State = flow.RunState(state)
	run.Input = json.RawMessage(input)
	if output.Valid {
		run.Output = json.RawMessage(output.String)
	}
	run.IdempotencyKey = key.String
	run.CreatedAt = fromMicros(created)
	run.UpdatedAt = fromMicros(updated)
	run.FinishedAt = fromNullMicros(finished)
	return &run, nil
}

func queryRuns(ctx context.Context, c conn, query string, args ...any) ([]*flow.Run, error) {
	rs, err := c.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rs.Close() }()
	var out []*flow.Run
	for rs.Next() {
		r, err := scanRun(rs)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// RunInsertMany implements store.Store.
func (s *Store) RunInsertMany(ctx context.Context, p *store.RunInsertManyParams) ([]*store.RunInsertResult, error) {
	var out []*store.RunInsertResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = runInsertMany(ctx, tx, p)
		return err
	})
	return out, err
}

// insertRunSQL inserts one run; a taken idempotency key inserts nothing.
const insertRunSQL = `INSERT INTO docket_runs (id, workflow, version, state, input, idempotency_key, created_at, updated_at)
		VALUES (?, ?, ?, 'RUNNING', ?, ?, ?, ?) ON CONFLICT (workflow, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`

// runInsertMany inserts the runs one statement each; a run whose
// key exists is not inserted (ON CONFLICT DO NOTHING) and read instead.
func runInsertMany(ctx context.Context, tx *sql.Tx, p *store.RunInsertManyParams) ([]*store.RunInsertResult, error) {
	for i, r := range p.Runs {
		if r == nil {
			return nil, fmt.Errorf("insert runs: run %d is nil", i)
		}
		if err := r.Validate(); err != nil {
			return nil, err
		}
	}
	now := micros(p.Now)
	out := make([]*store.RunInsertResult, len(p.Runs))
	var trs []flow.RunTransition
	for i, r := range p.Runs {
		res, err := tx.ExecContext(ctx, insertRunSQL, r.ID.String(), r.Workflow, r.Version, string(r.Input),
			nullString(r.IdempotencyKey), now, now)
		if err != nil {
			return nil, fmt.Errorf("insert run %s: %w", r.ID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, fmt.Errorf("insert run %s: %w", r.ID, err)
		} else if n == 0 {
			e, err := scanRun(tx.QueryRowContext(ctx, `SELECT `+runColumns+` FROM docket_runs
				WHERE workflow = ? AND idempotency_key = ?`, r.Workflow, r.IdempotencyKey))
			if err != nil {
				return nil, fmt.Errorf("insert run %s: read existing: %w", r.ID, err)
			}
			out[i] = &store.RunInsertResult{Run: e, Duplicate: true}
			continue
		}
		out[i] = &store.RunInsertResult{Run: &flow.Run{
			ID: r.ID, Workflow: r.Workflow, Version: r.Version, State: flow.RunRunning, Input: r.Input,
			IdempotencyKey: r.IdempotencyKey, CreatedAt: fromMicros(now), UpdatedAt: fromMicros(now),
		}}
		trs = append(trs, flow.RunTransition{RunID: r.ID, Workflow: r.Workflow, Version: r.Version, To: flow.RunRunning})
	}
	if len(trs) > 0 {
		if err := insertOutbox(ctx, tx, flow.EventRunStateChanged, flow.RunStateChangedData{Transitions: trs}, p.Now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RunGet implements store.Store.
func (s *Store) RunGet(ctx context.Context, id uuid.UUID) (*flow.Run, error) {
	return runGet(ctx, s.reader, id)
}

// RunLock implements store.Store: outside a transaction there is nothing
// to hold, so it reads.
func (s *Store) RunLock(ctx context.Context, id uuid.UUID) (*flow.Run, error) {
	return runGet(ctx, s.reader, id)
}

func runGet(ctx context.Context, c conn, id uuid.UUID) (*flow.Run, error) {
	r, err := scanRun(c.QueryRowContext(ctx, `SELECT `+runColumns+` FROM docket_runs WHERE id = ?`, id.String()))
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, notFound(err))
	}
	return r, nil
}

// RunList implements store.Store.
func (s *Store) RunList(ctx context.Context, p *store.RunListParams) ([]*flow.Run, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var (
		where []string
		args  []any
	)
	if p.Workflow != "" {
		where = append(where, "workflow = ?")
		args = append(args, p.Workflow)
	}
	if len(p.States) > 0 {
		where = append(where, "state IN ("+placeholders(len(p.States))+")")
		for _, st := range p.States {
			args = append(args, string(st))
		}
	}
	if !p.CreatedAfter.IsZero() {
		where = append(where, "created_at >= ?")
		args = append(args, micros(p.CreatedAfter))
	}
	if !p.CreatedBefore.IsZero() {
		where = append(where, "created_at < ?")
		args = append(args, micros(p.CreatedBefore))
	}
	if p.BeforeID != uuid.Nil {
		where = append(where, "id < ?")
		args = append(args, p.BeforeID.String())
	}
	var q strings.Builder
	q.WriteString("SELECT " + runColumns + " FROM docket_runs")
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY id DESC LIMIT ?")
	args = append(args, limit(p.Limit))
	runs, err := queryRuns(ctx, s.reader, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return runs, nil
}

// RunTransition implements store.Store.
func (s *Store) RunTransition(ctx context.Context, p *store.RunTransitionParams) (*flow.Run, error) {
	var r *flow.Run
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		r, err = runTransition(ctx, tx, p)
		return err
	})
	return r, err
}

// runTransition validates p and makes the change it describes in tx, the
// caller's write transaction: Store.RunTransition's and the Tx's.
func runTransition(ctx context.Context, tx conn, p *store.RunTransitionParams) (*flow.Run, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := micros(p.Now)
	var (
		output   any
		errText  string
		finished any
	)
	if p.To.Terminal() {
		finished = now
		errText = p.Error
	}
	if p.To == flow.RunSucceeded {
		output = nullJSON(p.Output)
		errText = ""
	}
	r, err := scanRun(tx.QueryRowContext(ctx, `UPDATE docket_runs
		SET state = ?, output = ?, error = ?, finished_at = ?, updated_at = ?
		WHERE id = ? AND state = ?
		RETURNING `+runColumns, string(p.To), output, errText, finished, now, p.ID.String(), string(p.From)))
	if errors.Is(err, sql.ErrNoRows) {
		var state string
		if err := tx.QueryRowContext(ctx, `SELECT state FROM docket_runs WHERE id = ?`, p.ID.String()).Scan(&state); err != nil {
			return nil, fmt.Errorf("transition run %s: %w", p.ID, notFound(err))
		}
		return nil, &flow.InvalidTransitionError{Of: "run", ID: p.ID.String(), From: state, To: string(p.To)}
	}
	if err != nil {
		return nil, fmt.Errorf("transition run %s: %w", p.ID, err)
	}
	data := flow.RunStateChangedData{Transitions: []flow.RunTransition{{
		RunID: r.ID, Workflow: r.Workflow, Version: r.Version, From: p.From, To: r.State,
	}}}
	if err := insertOutbox(ctx, tx, flow.EventRunStateChanged, data, p.Now); err != nil {
		return nil, err
	}
	return r, nil
}

// ---- Step instances ----

const stepColumns = `run_id, step, step_index, kind, generation, state, job_id, unit_id, output,
	error, confidence, created_at, updated_at, started_at, finished_at`

func scanStep(r scanner) (*flow.StepInstance, error) {
	var (
		st                    flow.StepInstance
		runID, kind, state    string
		jobID, unitID, output sql.NullString
		confidence            sql.NullFloat64
		created, updated      int64
		started, finished     sql.NullInt64
	)
	if err := r.Scan(&runID, &st.Step, &st.Index, &kind, &st.Generation, &state, &jobID, &unitID,
		&output, &st.Error, &confidence, &created, &updated, &started, &finished); err != nil {
		return nil, err
	}
	var err error
	if st.RunID, err = uuid.Parse(runID); err != nil {
		return nil, fmt.Errorf("step run id %q: %w", runID, err)
	}
	if st.JobID, err = parseNullUUID(jobID); err != nil {
		return nil, fmt.Errorf("step job id %q: %w", jobID.String, err)
	}
	if st.UnitID, err = parseNullUUID(unitID); err != nil {
		return nil, fmt.Errorf("step unit id %q: %w", unitID.String, err)
	}
	st.Kind = flow.Kind(kind)
	st.State = flow.StepState(state)
	if output.Valid {
		st.Output = json.RawMessage(output.String)
	}
	if confidence.Valid {
		c := confidence.Float64
		st.Confidence = &c
	}
	st.CreatedAt = fromMicros(created)
	st.UpdatedAt = fromMicros(updated)
	st.StartedAt = fromNullMicros(started)
	st.FinishedAt = fromNullMicros(finished)
	return &st, nil
}

// StepInsertMany implements store.Store.
func (s *Store) StepInsertMany(ctx context.Context, p *store.StepInsertManyParams) ([]*store.StepInsertResult, error) {
	var out []*store.StepInsertResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = stepInsertMany(ctx, tx, p)
		return err
	})
	return out, err
}

// insertStepSQL inserts one step instance; an existing one is kept.
const insertStepSQL = `INSERT INTO docket_steps (run_id, step, step_index, kind, state, job_id, unit_id,
			created_at, updated_at, started_at, timeout_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, step, step_index) DO NOTHING`

func stepInsertMany(ctx context.Context, tx *sql.Tx, p *store.StepInsertManyParams) ([]*store.StepInsertResult, error) {
	for i, sp := range p.Steps {
		if sp == nil {
			return nil, fmt.Errorf("insert steps: step %d is nil", i)
		}
		if err := sp.Validate(); err != nil {
			return nil, err
		}
	}
	now := micros(p.Now)
	out := make([]*store.StepInsertResult, len(p.Steps))
	var trs []flow.StepTransition
	for i, sp := range p.Steps {
		id := store.InstanceID(sp.RunID, sp.Step, sp.Index)
		var started, timeout any
		if sp.State == flow.StepRunning {
			started = now
			if !sp.TimeoutAt.IsZero() {
				timeout = micros(sp.TimeoutAt)
			}
		}
		res, err := tx.ExecContext(ctx, insertStepSQL, sp.RunID.String(), sp.Step, sp.Index, string(sp.Kind), string(sp.State),
			nullUUID(sp.JobID), nullUUID(sp.UnitID), now, now, started, timeout)
		if err != nil {
			return nil, fmt.Errorf("insert step %s: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, fmt.Errorf("insert step %s: %w", id, err)
		} else if n == 0 {
			e, err := scanStep(tx.QueryRowContext(ctx, `SELECT `+stepColumns+` FROM docket_steps
				WHERE run_id = ? AND step = ? AND step_index = ?`, sp.RunID.String(), sp.Step, sp.Index))
			if err != nil {
				return nil, fmt.Errorf("insert step %s: read existing: %w", id, err)
			}
			out[i] = &store.StepInsertResult{Step: e, Duplicate: true}
			continue
		}
		st := &flow.StepInstance{
			RunID: sp.RunID, Step: sp.Step, Index: sp.Index, Kind: sp.Kind, Generation: 1, State: sp.State,
			JobID: sp.JobID, UnitID: sp.UnitID, CreatedAt: fromMicros(now), UpdatedAt: fromMicros(now),
		}
		if sp.State == flow.StepRunning {
			st.StartedAt = fromMicros(now)
		}
		out[i] = &store.StepInsertResult{Step: st}
		trs = append(trs, flow.StepTransition{RunID: sp.RunID, Step: sp.Step, Index: sp.Index, Generation: 1, To: sp.State})
	}
	if len(trs) > 0 {
		if err := insertOutbox(ctx, tx, flow.EventStepStateChanged, flow.StepStateChangedData{Transitions: trs}, p.Now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// StepList implements store.Store.
func (s *Store) StepList(ctx context.Context, runID uuid.UUID) ([]*flow.StepInstance, error) {
	return stepList(ctx, s.reader, runID)
}

func stepList(ctx context.Context, c conn, runID uuid.UUID) ([]*flow.StepInstance, error) {
	rs, err := c.QueryContext(ctx, `SELECT `+stepColumns+` FROM docket_steps
		WHERE run_id = ? ORDER BY step, step_index`, runID.String())
	if err != nil {
		return nil, fmt.Errorf("list steps of run %s: %w", runID, err)
	}
	defer func() { _ = rs.Close() }()
	var out []*flow.StepInstance
	for rs.Next() {
		st, err := scanStep(rs)
		if err != nil {
			return nil, fmt.Errorf("list steps of run %s: %w", runID, err)
		}
		out = append(out, st)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list steps of run %s: %w", runID, err)
	}
	return out, nil
}

// StepGetByJob implements store.Store.
func (s *Store) StepGetByJob(ctx context.Context, jobID uuid.UUID) (*flow.StepInstance, error) {
	return stepGetBy(ctx, s.reader, "job_id", jobID)
}

// StepGetByUnit implements store.Store.
func (s *Store) StepGetByUnit(ctx context.Context, unitID uuid.UUID) (*flow.StepInstance, error) {
	return stepGetBy(ctx, s.reader, "unit_id", unitID)
}

// stepGetBy reads the instance whose column col (job_id or unit_id) is id.
func stepGetBy(ctx context.Context, c conn, col string, id uuid.UUID) (*flow.StepInstance, error) {
	st, err := scanStep(c.QueryRowContext(ctx, `SELECT `+stepColumns+` FROM docket_steps WHERE `+col+` = ?`, id.String()))
	if err != nil {
		return nil, fmt.Errorf("get step by %s %s: %w", col, id, notFound(err))
	}
	return st, nil
}

// StepTransition implements store.Store.
func (s *Store) StepTransition(ctx context.Context, p *store.StepTransitionParams) (*flow.StepInstance, error) {
	var st *flow.StepInstance
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		st, err = stepTransition(ctx, tx, p)
		return err
	})
	return st, err
}

// StepTransitionMany implements store.Store.
func (s *Store) StepTransitionMany(ctx context.Context, p *store.StepTransitionManyParams) ([]*flow.StepInstance, error) {
	var out []*flow.StepInstance
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = stepTransitionMany(ctx, tx, p)
		return err
	})
	return out, err
}

// stepTransition validates p and makes the change it describes in tx, the
// caller's write transaction: Store.StepTransition's and the Tx's.
func stepTransition(ctx context.Context, tx *sql.Tx, p *store.StepTransitionParams) (*flow.StepInstance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	st, err := stepUpdate(ctx, tx, p)
	id := store.InstanceID(p.RunID, p.Step, p.Index)
	if errors.Is(err, sql.ErrNoRows) {
		var state string
		if err := tx.QueryRowContext(ctx, `SELECT state FROM docket_steps WHERE run_id = ? AND step = ? AND step_index = ?`,
			p.RunID.String(), p.Step, p.Index).Scan(&state); err != nil {
			return nil, fmt.Errorf("transition step %s: %w", id, notFound(err))
		}
		return nil, &flow.InvalidTransitionError{Of: "step", ID: id, From: state, To: string(p.To)}
	}
	if err != nil {
		return nil, fmt.Errorf("transition step %s: %w", id, err)
	}
	data := flow.StepStateChangedData{Transitions: []flow.StepTransition{{
		RunID: st.RunID, Step: st.Step, Index: st.Index, Generation: st.Generation, From: p.From, To: st.State,
	}}}
	if err := insertOutbox(ctx, tx, flow.EventStepStateChanged, data, p.Now); err != nil {
		return nil, err
	}
	return st, nil
}

// stepTransitionMany makes the changes of p, guarded, in one statement,
// and writes one outbox row for those made. One statement, not one a
// change: inside the savepoint a storeTx call runs in, every statement's
// end truncates SQLite's in-memory statement journal by walking it from
// its start, so an update a row cost the square of the rows changed
// (9,900 instances skipped by a per-instance `if`: most of 3 s of CPU).
// Output and error travel hex-encoded, so that their bytes arrive as
// they are whatever they hold.
func stepTransitionMany(ctx context.Context, tx *sql.Tx, p *store.StepTransitionManyParams) ([]*flow.StepInstance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(p.Transitions) == 0 {
		return nil, nil
	}
	type change struct {
		Run        string   `json:"r"`
		Step       string   `json:"s"`
		Index      int      `json:"i"`
		Generation int      `json:"g"`
		From       string   `json:"f"`
		To         string   `json:"t"`
		Output     *string  `json:"o"`
		Error      string   `json:"e"`
		Confidence *float64 `json:"c"`
	}
	type key struct {
		run   uuid.UUID
		step  string
		index int
	}
	changes := make([]change, len(p.Transitions))
	from := make(map[key]flow.StepState, len(p.Transitions))
	for i, t := range p.Transitions {
		c := change{Run: t.RunID.String(), Step: t.Step, Index: t.Index, Generation: t.Generation,
			From: string(t.From), To: string(t.To), Error: hex.EncodeToString([]byte(t.Error)), Confidence: t.Confidence}
		if t.Output != nil {
			o := hex.EncodeToString(t.Output)
			c.Output = &o
		}
		changes[i] = c
		from[key{t.RunID, t.Step, t.Index}] = t.From
	}
	js, err := json.Marshal(changes)
	if err != nil {
		return nil, fmt.Errorf("transition %d steps: %w", len(changes), err)
	}
	rows, err := tx.QueryContext(ctx, `UPDATE docket_steps AS s SET state = j.j_to,
			output = CASE WHEN j.j_output IS NULL THEN NULL ELSE CAST(unhex(j.j_output) AS TEXT) END,
			error = CAST(unhex(j.j_error) AS TEXT), confidence = j.j_confidence,
			finished_at = ?2, updated_at = ?2
		FROM (SELECT value->>'r' AS j_run, value->>'s' AS j_step, value->>'i' AS j_index, value->>'g' AS j_generation,
				value->>'f' AS j_from, value->>'t' AS j_to, value->>'o' AS j_output, value->>'e' AS j_error, value->>'c' AS j_confidence
			FROM json_each(?1)) AS j
		WHERE s.run_id = j.j_run AND s.step = j.j_step AND s.step_index = j.j_index
			AND s.state = j.j_from AND s.generation = j.j_generation
		RETURNING `+stepColumns, string(js), micros(p.Now))
	if err != nil {
		return nil, fmt.Errorf("transition %d steps: %w", len(changes), err)
	}
	defer func() { _ = rows.Close() }()
	var (
		out  []*flow.StepInstance
		data flow.StepStateChangedData
	)
	for rows.Next() {
		st, err := scanStep(rows)
		if err != nil {
			return nil, fmt.Errorf("transition %d steps: %w", len(changes), err)
		}
		out = append(out, st)
		data.Transitions = append(data.Transitions, flow.StepTransition{
			RunID: st.RunID, Step: st.Step, Index: st.Index, Generation: st.Generation, From: from[key{st.RunID, st.Step, st.Index}], To: st.State,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("transition %d steps: %w", len(changes), err)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("transition %d steps: %w", len(changes), err)
	}
	if len(out) > 0 {
		if err := insertOutbox(ctx, tx, flow.EventStepStateChanged, data, p.Now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// stepUpdate makes the change of p, guarded by its From and Generation,
// and returns the row changed; sql.ErrNoRows when the guard did not hold
// (or there is no such row). No outbox row.
func stepUpdate(ctx context.Context, tx *sql.Tx, p *store.StepTransitionParams) (*flow.StepInstance, error) {
	now := micros(p.Now)
	var (
		bump                         int
		output, confidence, finished any
		errText                      string
	)
	if p.To == flow.StepPending {
		bump = 1
	}
	if p.To.Done() {
		output, errText, finished = nullJSON(p.Output), p.Error, now
		if p.Confidence != nil {
			confidence = *p.Confidence
		}
	}
	to := string(p.To)
	return scanStep(tx.QueryRowContext(ctx, `UPDATE docket_steps SET state = ?1, generation = generation + ?2,
			job_id = CASE WHEN ?1 = 'RUNNING' THEN ?3 WHEN ?1 = 'PENDING' THEN NULL ELSE job_id END,
			unit_id = CASE WHEN ?1 = 'RUNNING' THEN ?4 WHEN ?1 = 'PENDING' THEN NULL ELSE unit_id END,
			output = ?5, error = ?6, confidence = ?7,
			started_at = CASE WHEN ?1 = 'RUNNING' THEN ?8 WHEN ?1 = 'PENDING' THEN NULL ELSE started_at END,
			timeout_at = CASE WHEN ?1 = 'RUNNING' THEN ?15 ELSE timeout_at END,
			finished_at = ?9, updated_at = ?8
		WHERE run_id = ?10 AND step = ?11 AND step_index = ?12 AND state = ?13 AND generation = ?14
		RETURNING `+stepColumns,
		to, bump, nullUUID(p.JobID), nullUUID(p.UnitID), output, errText, confidence, now, finished,
		p.RunID.String(), p.Step, p.Index, string(p.From), p.Generation, microsOrNull(p.TimeoutAt)))
}
