package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
)

// insertOutboxData writes one outbox row with data encoded by encoding/json.
func insertOutboxData(ctx context.Context, c conn, eventType string, data any, now time.Time) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode %s outbox row: %w", eventType, err)
	}
	if _, err := c.Exec(ctx, insertStateChangedSQL, eventType, string(b), now); err != nil {
		return fmt.Errorf("write %s outbox row: %w", eventType, err)
	}
	return nil
}

// jsonText is b as a text parameter cast to json(b) in SQL; nil is NULL.
func jsonText(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// nullUUID is id as a parameter; uuid.Nil is NULL.
func nullUUID(id uuid.UUID) any {
	if id == uuid.Nil {
		return nil
	}
	return id
}

func uuidOrNil(id *uuid.UUID) uuid.UUID {
	if id == nil {
		return uuid.Nil
	}
	return *id
}

// ---- Definitions ----

const versionColumns = `v.name, v.version, v.hash, v.definition, v.created_at`

func scanVersion(r rowScanner) (*flow.Version, error) {
	var v flow.Version
	var def []byte
	if err := r.Scan(&v.Name, &v.Version, &v.Hash, &def, &v.CreatedAt); err != nil {
		return nil, err
	}
	v.Definition = json.RawMessage(def)
	v.CreatedAt = v.CreatedAt.UTC()
	return &v, nil
}

// WorkflowPut implements store.Store. The head row of the name is locked
// first (inserted, or updated in place by ON CONFLICT), so concurrent puts
// of one name run one after the other and each sees the version the
// previous one stored.
func (s *Store) WorkflowPut(ctx context.Context, p *store.WorkflowPutParams) (*flow.Version, bool, error) {
	var (
		v       *flow.Version
		created bool
	)
	err := s.withTx(ctx, func(c pgx.Tx) error {
		now := dbTime(p.Now)
		var (
			latest int
			hash   string
		)
		err := c.QueryRow(ctx, `
			INSERT INTO docket_workflows (name, latest_version, latest_hash, created_at, updated_at)
			VALUES ($1, 0, '', $2, $2)
			ON CONFLICT (name) DO UPDATE SET updated_at = docket_workflows.updated_at
			RETURNING latest_version, latest_hash`, p.Name, now).Scan(&latest, &hash)
		if err != nil {
			return err
		}
		if latest > 0 && hash == p.Hash {
			v, err = scanVersion(c.QueryRow(ctx, `SELECT `+versionColumns+`
				FROM docket_workflow_versions v WHERE v.name = $1 AND v.version = $2`, p.Name, latest))
			return err
		}
		v, err = scanVersion(c.QueryRow(ctx, `
			WITH head AS (
				UPDATE docket_workflows SET latest_version = $2, latest_hash = $3, updated_at = $5
				WHERE name = $1
			)
			INSERT INTO docket_workflow_versions AS v (name, version, hash, definition, created_at)
			VALUES ($1, $2, $3, $4::json, $5)
			RETURNING `+versionColumns, p.Name, latest+1, p.Hash, string(p.Definition), now))
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
	return workflowGet(ctx, s.pool, p)
}

func workflowGet(ctx context.Context, c conn, p *store.WorkflowGetParams) (*flow.Version, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Version > math.MaxInt32 {
		// The column is an integer: no such version (the driver would
		// refuse to encode it, an internal error).
		return nil, fmt.Errorf("get workflow %q version %d: %w", p.Name, p.Version, store.ErrNotFound)
	}
	var row pgx.Row
	if p.Version == 0 {
		row = c.QueryRow(ctx, `SELECT `+versionColumns+`
			FROM docket_workflows w JOIN docket_workflow_versions v
				ON v.name = w.name AND v.version = w.latest_version
			WHERE w.name = $1`, p.Name)
	} else {
		row = c.QueryRow(ctx, `SELECT `+versionColumns+`
			FROM docket_workflow_versions v WHERE v.name = $1 AND v.version = $2`, p.Name, p.Version)
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
	rs, err := s.pool.Query(ctx, `SELECT `+versionColumns+`
		FROM docket_workflows w JOIN docket_workflow_versions v
			ON v.name = w.name AND v.version = w.latest_version
		WHERE w.name > $1
		ORDER BY w.name
		LIMIT $2`, p.AfterName, limitOrNull(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	defer rs.Close()
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

func scanRun(r rowScanner) (*flow.Run, error) {
	var (
		run           flow.Run
		state         string
		input, output []byte
		key           *string
		finished      *time.Time
	)
	if err := r.Scan(&run.ID, &run.Workflow, &run.Version, &state, &input, &output, &run.Error, &key,
		&run.CreatedAt, &run.UpdatedAt, &finished, &run.CancelRequested); err != nil {
		return nil, err
	}
	run.State = flow.RunState(state)
	run.Input = json.RawMessage(input)
	if output != nil {
		run.Output = json.RawMessage(output)
	}
	run.IdempotencyKey = deref(key)
	run.CreatedAt = run.CreatedAt.UTC()
	run.UpdatedAt = run.UpdatedAt.UTC()
	run.FinishedAt = utcOrZero(finished)
	return &run, nil
}

func queryRuns(ctx context.Context, c conn, sql string, args ...any) ([]*flow.Run, error) {
	rs, err := c.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
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

// runInsertSQL inserts a batch from parallel arrays; rows whose
// idempotency key exists are skipped and read afterwards, in a new
// snapshot that sees concurrently committed keys. The rows are inserted in
// key order: a batch waits on a key another uncommitted batch inserted,
// and two batches of the same keys taking them in different orders each
// waited on the other (a deadlock, aborted as ErrContention).
const runInsertSQL = `
INSERT INTO docket_runs (id, workflow, version, state, input, idempotency_key, created_at, updated_at)
SELECT id, workflow, version, 'RUNNING', input::jsonb, NULLIF(key, ''), $6, $6
FROM unnest($1::uuid[], $2::text[], $3::integer[], $4::text[], $5::text[])
	AS u(id, workflow, version, input, key)
ORDER BY workflow, key, id
ON CONFLICT (workflow, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id`

// RunInsertMany implements store.Store.
func (s *Store) RunInsertMany(ctx context.Context, p *store.RunInsertManyParams) ([]*store.RunInsertResult, error) {
	var out []*store.RunInsertResult
	err := s.withTx(ctx, func(c pgx.Tx) error {
		var err error
		out, err = runInsertMany(ctx, c, p)
		return err
	})
	return out, err
}

func runInsertMany(ctx context.Context, c conn, p *store.RunInsertManyParams) ([]*store.RunInsertResult, error) {
	now := dbTime(p.Now)
	type key struct{ workflow, key string }
	firstOf := make([]int, len(p.Runs))
	first := map[key]int{}
	var (
		ids               []uuid.UUID
		workflows, inputs []string
		keys              []string
		versions          []int32
	)
	for i, r := range p.Runs {
		if r == nil {
			return nil, fmt.Errorf("insert runs: run %d is nil", i)
		}
		if err := r.Validate(); err != nil {
			return nil, err
		}
		firstOf[i] = i
		if r.IdempotencyKey != "" {
			k := key{r.Workflow, r.IdempotencyKey}
			if j, ok := first[k]; ok {
				firstOf[i] = j
				continue
			}
			first[k] = i
		}
		ids = append(ids, r.ID)
		workflows = append(workflows, r.Workflow)
		versions = append(versions, int32(r.Version))
		inputs = append(inputs, string(r.Input))
		keys = append(keys, r.IdempotencyKey)
	}
	rs, err := c.Query(ctx, runInsertSQL, ids, workflows, versions, inputs, keys, now)
	if err != nil {
		return nil, fmt.Errorf("insert runs: %w", err)
	}
	inserted := make(map[uuid.UUID]bool, len(ids))
	for rs.Next() {
		var id uuid.UUID
		if err := rs.Scan(&id); err != nil {
			rs.Close()
			return nil, fmt.Errorf("insert runs: %w", err)
		}
		inserted[id] = true
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("insert runs: %w", err)
	}
	out := make([]*store.RunInsertResult, len(p.Runs))
	var (
		missWorkflows, missKeys []string
		trs                     []flow.RunTransition
	)
	for i, r := range p.Runs {
		if firstOf[i] != i {
			continue
		}
		if !inserted[r.ID] {
			missWorkflows = append(missWorkflows, r.Workflow)
			missKeys = append(missKeys, r.IdempotencyKey)
			continue
		}
		out[i] = &store.RunInsertResult{Run: &flow.Run{
			ID: r.ID, Workflow: r.Workflow, Version: r.Version, State: flow.RunRunning,
			Input: r.Input, IdempotencyKey: r.IdempotencyKey, CreatedAt: now, UpdatedAt: now,
		}}
		trs = append(trs, flow.RunTransition{RunID: r.ID, Workflow: r.Workflow, Version: r.Version, To: flow.RunRunning})
	}
	existing := map[key]*flow.Run{}
	if len(missKeys) > 0 {
		runs, err := queryRuns(ctx, c, `SELECT `+runColumns+` FROM docket_runs
			WHERE (workflow, idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, missWorkflows, missKeys)
		if err != nil {
			return nil, fmt.Errorf("insert runs: read existing: %w", err)
		}
		for _, r := range runs {
			existing[key{r.Workflow, r.IdempotencyKey}] = r
		}
	}
	for i, r := range p.Runs {
		switch {
		case out[i] != nil:
		case firstOf[i] == i:
			e := existing[key{r.Workflow, r.IdempotencyKey}]
			if e == nil {
				return nil, fmt.Errorf("insert run %s: not inserted and no run with its key", r.ID)
			}
			out[i] = &store.RunInsertResult{Run: e, Duplicate: true}
		default:
			out[i] = &store.RunInsertResult{Run: out[firstOf[i]].Run, Duplicate: true}
		}
	}
	if len(trs) > 0 {
		if err := insertOutboxData(ctx, c, flow.EventRunStateChanged, flow.RunStateChangedData{Transitions: trs}, now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RunGet implements store.Store.
func (s *Store) RunGet(ctx context.Context, id uuid.UUID) (*flow.Run, error) {
	return runGet(ctx, s.pool, id, false)
}

// RunLock implements store.Store.
func (s *Store) RunLock(ctx context.Context, id uuid.UUID) (*flow.Run, error) {
	return runGet(ctx, s.pool, id, true)
}

func runGet(ctx context.Context, c conn, id uuid.UUID, lock bool) (*flow.Run, error) {
	sql := `SELECT ` + runColumns + ` FROM docket_runs WHERE id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	r, err := scanRun(c.QueryRow(ctx, sql, id))
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
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if p.Workflow != "" {
		where = append(where, "workflow = "+arg(p.Workflow))
	}
	if len(p.States) > 0 {
		states := make([]string, len(p.States))
		for i, st := range p.States {
			states[i] = string(st)
		}
		where = append(where, "state = ANY("+arg(states)+"::text[])")
	}
	if !p.CreatedAfter.IsZero() {
		where = append(where, "created_at >= "+arg(dbTime(p.CreatedAfter)))
	}
	if !p.CreatedBefore.IsZero() {
		where = append(where, "created_at < "+arg(dbTime(p.CreatedBefore)))
	}
	if p.BeforeID != uuid.Nil {
		where = append(where, "id < "+arg(p.BeforeID))
	}
	var sql strings.Builder
	sql.WriteString("SELECT " + runColumns + " FROM docket_runs")
	if len(where) > 0 {
		sql.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	sql.WriteString(" ORDER BY id DESC LIMIT " + arg(limitOrNull(p.Limit)))
	runs, err := queryRuns(ctx, s.pool, sql.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return runs, nil
}

// runTransitionSQL makes one guarded change and writes its outbox row.
const runTransitionSQL = `
WITH t AS (
	UPDATE docket_runs SET state = @to, output = @output::jsonb, error = @error,
		finished_at = @finished, updated_at = @now
	WHERE id = @id AND state = @from
	RETURNING *
),
o AS (
	INSERT INTO docket_outbox (event_type, data, created_at)
	SELECT 'run.state_changed', json_build_object('transitions', json_build_array(json_build_object(
		'runId', id, 'workflow', workflow, 'version', version, 'from', @from::text, 'to', state))), @now
	FROM t
)
SELECT ` + runColumns + ` FROM t`

// RunTransition implements store.Store.
func (s *Store) RunTransition(ctx context.Context, p *store.RunTransitionParams) (*flow.Run, error) {
	return runTransition(ctx, s.pool, p)
}

func runTransition(ctx context.Context, c conn, p *store.RunTransitionParams) (*flow.Run, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := dbTime(p.Now)
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
		output = jsonText(p.Output)
		errText = ""
	}
	r, err := scanRun(c.QueryRow(ctx, runTransitionSQL, pgx.NamedArgs{
		"id": p.ID, "from": string(p.From), "to": string(p.To), "output": output,
		"error": errText, "finished": finished, "now": now,
	}))
	if errors.Is(err, pgx.ErrNoRows) {
		var state string
		if err := c.QueryRow(ctx, `SELECT state FROM docket_runs WHERE id = $1`, p.ID).Scan(&state); err != nil {
			return nil, fmt.Errorf("transition run %s: %w", p.ID, notFound(err))
		}
		return nil, &flow.InvalidTransitionError{Of: "run", ID: p.ID.String(), From: state, To: string(p.To)}
	}
	if err != nil {
		return nil, fmt.Errorf("transition run %s: %w", p.ID, err)
	}
	return r, nil
}

// ---- Step instances ----

const stepColumns = `run_id, step, step_index, kind, generation, state, job_id, unit_id, output,
	error, confidence, created_at, updated_at, started_at, finished_at`

func scanStep(r rowScanner) (*flow.StepInstance, error) {
	var (
		st                flow.StepInstance
		kind, state       string
		jobID, unitID     *uuid.UUID
		output            []byte
		started, finished *time.Time
	)
	if err := r.Scan(&st.RunID, &st.Step, &st.Index, &kind, &st.Generation, &state, &jobID, &unitID,
		&output, &st.Error, &st.Confidence, &st.CreatedAt, &st.UpdatedAt, &started, &finished); err != nil {
		return nil, err
	}
	st.Kind = flow.Kind(kind)
	st.State = flow.StepState(state)
	st.JobID = uuidOrNil(jobID)
	st.UnitID = uuidOrNil(unitID)
	if output != nil {
		st.Output = json.RawMessage(output)
	}
	st.CreatedAt = st.CreatedAt.UTC()
	st.UpdatedAt = st.UpdatedAt.UTC()
	st.StartedAt = utcOrZero(started)
	st.FinishedAt = utcOrZero(finished)
	return &st, nil
}

func querySteps(ctx context.Context, c conn, sql string, args ...any) ([]*flow.StepInstance, error) {
	rs, err := c.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []*flow.StepInstance
	for rs.Next() {
		st, err := scanStep(rs)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, rs.Err()
}

// stepInsertSQL inserts instances from parallel arrays, skipping those
// whose (run, step, index) exists: they are read afterwards.
const stepInsertSQL = `
INSERT INTO docket_steps (run_id, step, step_index, kind, state, job_id, unit_id,
	created_at, updated_at, started_at, timeout_at)
SELECT run_id, step, step_index, kind, state, job_id, unit_id, $8, $8,
	CASE WHEN state = 'RUNNING' THEN $8::timestamptz END,
	CASE WHEN state = 'RUNNING' THEN timeout_at END
FROM unnest($1::uuid[], $2::text[], $3::integer[], $4::text[], $5::text[], $6::uuid[], $7::uuid[], $9::timestamptz[])
	AS u(run_id, step, step_index, kind, state, job_id, unit_id, timeout_at)
ON CONFLICT (run_id, step, step_index) DO NOTHING
RETURNING run_id, step, step_index`

type stepKey struct {
	run   uuid.UUID
	step  string
	index int
}

// StepInsertMany implements store.Store.
func (s *Store) StepInsertMany(ctx context.Context, p *store.StepInsertManyParams) ([]*store.StepInsertResult, error) {
	var out []*store.StepInsertResult
	err := s.withTx(ctx, func(c pgx.Tx) error {
		var err error
		out, err = stepInsertMany(ctx, c, p)
		return err
	})
	return out, err
}

func stepInsertMany(ctx context.Context, c conn, p *store.StepInsertManyParams) ([]*store.StepInsertResult, error) {
	now := dbTime(p.Now)
	firstOf := make([]int, len(p.Steps))
	first := map[stepKey]int{}
	var (
		runs                []uuid.UUID
		steps, kinds, state []string
		indexes             []int32
		jobs, units         []*uuid.UUID
		timeouts            []*time.Time
	)
	ptr := func(id uuid.UUID) *uuid.UUID {
		if id == uuid.Nil {
			return nil
		}
		return &id
	}
	for i, sp := range p.Steps {
		if sp == nil {
			return nil, fmt.Errorf("insert steps: step %d is nil", i)
		}
		if err := sp.Validate(); err != nil {
			return nil, err
		}
		k := stepKey{sp.RunID, sp.Step, sp.Index}
		if j, ok := first[k]; ok {
			firstOf[i] = j
			continue
		}
		first[k], firstOf[i] = i, i
		runs = append(runs, sp.RunID)
		steps = append(steps, sp.Step)
		indexes = append(indexes, int32(sp.Index))
		kinds = append(kinds, string(sp.Kind))
		state = append(state, string(sp.State))
		jobs = append(jobs, ptr(sp.JobID))
		units = append(units, ptr(sp.UnitID))
		var timeout *time.Time
		if !sp.TimeoutAt.IsZero() {
			t := dbTime(sp.TimeoutAt)
			timeout = &t
		}
		timeouts = append(timeouts, timeout)
	}
	rs, err := c.Query(ctx, stepInsertSQL, runs, steps, indexes, kinds, state, jobs, units, now, timeouts)
	if err != nil {
		return nil, fmt.Errorf("insert steps: %w", err)
	}
	inserted := map[stepKey]bool{}
	for rs.Next() {
		var k stepKey
		if err := rs.Scan(&k.run, &k.step, &k.index); err != nil {
			rs.Close()
			return nil, fmt.Errorf("insert steps: %w", err)
		}
		inserted[k] = true
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("insert steps: %w", err)
	}
	out := make([]*store.StepInsertResult, len(p.Steps))
	var (
		missRuns  []uuid.UUID
		missSteps []string
		missIdx   []int32
		trs       []flow.StepTransition
	)
	for i, sp := range p.Steps {
		if firstOf[i] != i {
			continue
		}
		if !inserted[stepKey{sp.RunID, sp.Step, sp.Index}] {
			missRuns = append(missRuns, sp.RunID)
			missSteps = append(missSteps, sp.Step)
			missIdx = append(missIdx, int32(sp.Index))
			continue
		}
		st := &flow.StepInstance{
			RunID: sp.RunID, Step: sp.Step, Index: sp.Index, Kind: sp.Kind, Generation: 1,
			State: sp.State, JobID: sp.JobID, UnitID: sp.UnitID, CreatedAt: now, UpdatedAt: now,
		}
		if sp.State == flow.StepRunning {
			st.StartedAt = now
		}
		out[i] = &store.StepInsertResult{Step: st}
		trs = append(trs, flow.StepTransition{RunID: sp.RunID, Step: sp.Step, Index: sp.Index, Generation: 1, To: sp.State})
	}
	existing := map[stepKey]*flow.StepInstance{}
	if len(missRuns) > 0 {
		rows, err := querySteps(ctx, c, `SELECT `+stepColumns+` FROM docket_steps
			WHERE (run_id, step, step_index) IN (SELECT * FROM unnest($1::uuid[], $2::text[], $3::integer[]))`,
			missRuns, missSteps, missIdx)
		if err != nil {
			return nil, fmt.Errorf("insert steps: read existing: %w", err)
		}
		for _, st := range rows {
			existing[stepKey{st.RunID, st.Step, st.Index}] = st
		}
	}
	for i, sp := range p.Steps {
		switch {
		case out[i] != nil:
		case firstOf[i] == i:
			e := existing[stepKey{sp.RunID, sp.Step, sp.Index}]
			if e == nil {
				return nil, fmt.Errorf("insert step %s: not inserted and not found", store.InstanceID(sp.RunID, sp.Step, sp.Index))
			}
			out[i] = &store.StepInsertResult{Step: e, Duplicate: true}
		default:
			out[i] = &store.StepInsertResult{Step: out[firstOf[i]].Step, Duplicate: true}
		}
	}
	if len(trs) > 0 {
		if err := insertOutboxData(ctx, c, flow.EventStepStateChanged, flow.StepStateChangedData{Transitions: trs}, now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// StepList implements store.Store.
func (s *Store) StepList(ctx context.Context, runID uuid.UUID) ([]*flow.StepInstance, error) {
	return stepList(ctx, s.pool, runID)
}

func stepList(ctx context.Context, c conn, runID uuid.UUID) ([]*flow.StepInstance, error) {
	out, err := querySteps(ctx, c, `SELECT `+stepColumns+` FROM docket_steps
		WHERE run_id = $1 ORDER BY step, step_index`, runID)
	if err != nil {
		return nil, fmt.Errorf("list steps of run %s: %w", runID, err)
	}
	return out, nil
}

// StepGetByJob implements store.Store.
func (s *Store) StepGetByJob(ctx context.Context, jobID uuid.UUID) (*flow.StepInstance, error) {
	return stepGetBy(ctx, s.pool, "job_id", jobID)
}

// StepGetByUnit implements store.Store.
func (s *Store) StepGetByUnit(ctx context.Context, unitID uuid.UUID) (*flow.StepInstance, error) {
	return stepGetBy(ctx, s.pool, "unit_id", unitID)
}

// stepGetBy reads the instance whose column col (job_id or unit_id) is id.
func stepGetBy(ctx context.Context, c conn, col string, id uuid.UUID) (*flow.StepInstance, error) {
	st, err := scanStep(c.QueryRow(ctx, `SELECT `+stepColumns+` FROM docket_steps WHERE `+col+` = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("get step by %s %s: %w", col, id, notFound(err))
	}
	return st, nil
}

// stepTransitionSQL makes one change guarded by state and generation and
// writes its outbox row. The values are computed by stepChange.
const stepTransitionSQL = `
WITH t AS (
	UPDATE docket_steps SET state = @to, generation = generation + @bump,
		job_id = CASE WHEN @to = 'RUNNING' THEN @job::uuid WHEN @to = 'PENDING' THEN NULL ELSE job_id END,
		unit_id = CASE WHEN @to = 'RUNNING' THEN @unit::uuid WHEN @to = 'PENDING' THEN NULL ELSE unit_id END,
		output = @output::jsonb, error = @error, confidence = @confidence,
		started_at = CASE WHEN @to = 'RUNNING' THEN @now WHEN @to = 'PENDING' THEN NULL ELSE started_at END,
		timeout_at = CASE WHEN @to = 'RUNNING' THEN @timeout::timestamptz ELSE timeout_at END,
		finished_at = @finished, updated_at = @now
	WHERE run_id = @run AND step = @step AND step_index = @index
		AND state = @from AND generation = @generation
	RETURNING *
),
o AS (
	INSERT INTO docket_outbox (event_type, data, created_at)
	SELECT 'step.state_changed', json_build_object('transitions', json_build_array(json_build_object(
		'runId', run_id, 'step', step, 'index', step_index, 'generation', generation,
		'from', @from::text, 'to', state))), @now
	FROM t
)
SELECT ` + stepColumns + ` FROM t`

// stepTransitionManySQL makes the changes given as parallel arrays, each
// guarded by state and generation, and writes one outbox row for those
// made. $10 is Now.
const stepTransitionManySQL = `
WITH v AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::int[], $5::text[], $6::text[], $7::text[], $8::text[], $9::float8[])
		AS v(run, step, idx, gen, from_state, to_state, output, error, confidence)
),
t AS (
	UPDATE docket_steps s SET state = v.to_state, output = v.output::jsonb, error = v.error,
		confidence = v.confidence, finished_at = $10, updated_at = $10
	FROM v
	WHERE s.run_id = v.run AND s.step = v.step AND s.step_index = v.idx
		AND s.state = v.from_state AND s.generation = v.gen
	RETURNING s.*, v.from_state
),
o AS (
	INSERT INTO docket_outbox (event_type, data, created_at)
	SELECT 'step.state_changed', json_build_object('transitions', json_agg(json_build_object(
		'runId', run_id, 'step', step, 'index', step_index, 'generation', generation,
		'from', from_state, 'to', state))), $10
	FROM t HAVING count(*) > 0
)
SELECT ` + stepColumns + ` FROM t`

// StepTransitionMany implements store.Store.
func (s *Store) StepTransitionMany(ctx context.Context, p *store.StepTransitionManyParams) ([]*flow.StepInstance, error) {
	return stepTransitionMany(ctx, s.pool, p)
}

// StepTransitionMany implements store.Tx.
func (t *storeTx) StepTransitionMany(ctx context.Context, p *store.StepTransitionManyParams) ([]*flow.StepInstance, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return stepTransitionMany(ctx, t.tx, p)
}

func stepTransitionMany(ctx context.Context, c conn, p *store.StepTransitionManyParams) ([]*flow.StepInstance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(p.Transitions) == 0 {
		return nil, nil
	}
	n := len(p.Transitions)
	var (
		runs        = make([]uuid.UUID, n)
		steps       = make([]string, n)
		idx, gens   = make([]int32, n), make([]int32, n)
		from, to    = make([]string, n), make([]string, n)
		outputs     = make([]*string, n)
		errs        = make([]string, n)
		confidences = make([]*float64, n)
	)
	for i, t := range p.Transitions {
		runs[i], steps[i], idx[i], gens[i] = t.RunID, t.Step, int32(t.Index), int32(t.Generation)
		from[i], to[i], errs[i], confidences[i] = string(t.From), string(t.To), t.Error, t.Confidence
		if t.Output != nil {
			o := string(t.Output)
			outputs[i] = &o
		}
	}
	out, err := querySteps(ctx, c, stepTransitionManySQL, runs, steps, idx, gens, from, to, outputs, errs, confidences, dbTime(p.Now))
	if err != nil {
		return nil, fmt.Errorf("transition %d steps: %w", n, err)
	}
	return out, nil
}

// StepTransition implements store.Store.
func (s *Store) StepTransition(ctx context.Context, p *store.StepTransitionParams) (*flow.StepInstance, error) {
	return stepTransition(ctx, s.pool, p)
}

func stepTransition(ctx context.Context, c conn, p *store.StepTransitionParams) (*flow.StepInstance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := dbTime(p.Now)
	args := pgx.NamedArgs{
		"run": p.RunID, "step": p.Step, "index": p.Index, "generation": p.Generation,
		"from": string(p.From), "to": string(p.To), "now": now, "bump": 0,
		"job": nullUUID(p.JobID), "unit": nullUUID(p.UnitID),
		"output": nil, "error": "", "confidence": nil, "finished": nil, "timeout": nil,
	}
	if !p.TimeoutAt.IsZero() {
		args["timeout"] = dbTime(p.TimeoutAt)
	}
	if p.To == flow.StepPending {
		args["bump"] = 1
	}
	if p.To.Done() {
		args["output"] = jsonText(p.Output)
		args["error"] = p.Error
		args["confidence"] = p.Confidence
		args["finished"] = now
	}
	st, err := scanStep(c.QueryRow(ctx, stepTransitionSQL, args))
	id := store.InstanceID(p.RunID, p.Step, p.Index)
	if errors.Is(err, pgx.ErrNoRows) {
		var state string
		if err := c.QueryRow(ctx, `SELECT state FROM docket_steps WHERE run_id = $1 AND step = $2 AND step_index = $3`,
			p.RunID, p.Step, p.Index).Scan(&state); err != nil {
			return nil, fmt.Errorf("transition step %s: %w", id, notFound(err))
		}
		return nil, &flow.InvalidTransitionError{Of: "step", ID: id, From: state, To: string(p.To)}
	}
	if err != nil {
		return nil, fmt.Errorf("transition step %s: %w", id, err)
	}
	return st, nil
}
