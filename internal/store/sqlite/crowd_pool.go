package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// A pool has one counter row (shard 0): the one writer serialises every
// counting statement anyway.
const poolShard = 0

// unitCounter is the docket_pool_counters column counting regular units in
// state s.
func unitCounter(s crowd.UnitState) string {
	return "units_" + strings.ToLower(string(s))
}

func isUnique(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

func isForeignKey(err error) bool {
	return err != nil && strings.Contains(err.Error(), "FOREIGN KEY constraint failed")
}

// encodeNames stores a list of names as a JSON array.
func encodeNames(names []string) string {
	if names == nil {
		names = []string{}
	}
	b, _ := json.Marshal(names) // a []string always encodes
	return string(b)
}

// decodeNames reads a JSON array of names.
func decodeNames(s string) ([]string, error) {
	out := []string{}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("decode names %q: %w", s, err)
	}
	return out, nil
}

// parseUUID decodes a TEXT uuid.
func parseUUID(what, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("%s id %q: %w", what, s, err)
	}
	return id, nil
}

// queryAll scans every row of a query with scan.
func queryAll[T any](ctx context.Context, c conn, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rs, err := c.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rs.Close() }()
	var out []T
	for rs.Next() {
		v, err := scan(rs)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rs.Err()
}

// ---- Tasks ----

const taskColumns = `v.name, v.version, v.hash, v.definition, v.created_at`

func scanTask(r scanner) (*crowd.TaskVersion, error) {
	var (
		v       crowd.TaskVersion
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

// TaskPut implements store.Store; the one writer serialises puts.
func (s *Store) TaskPut(ctx context.Context, p *store.TaskPutParams) (*crowd.TaskVersion, bool, error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	var (
		v       *crowd.TaskVersion
		created bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := micros(p.Now)
		var (
			latest int
			hash   string
		)
		err := tx.QueryRowContext(ctx, `SELECT latest_version, latest_hash FROM docket_tasks WHERE name = ?`, p.Name).Scan(&latest, &hash)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := tx.ExecContext(ctx, `INSERT INTO docket_tasks (name, latest_version, latest_hash, created_at, updated_at)
				VALUES (?, 0, '', ?, ?)`, p.Name, now, now); err != nil {
				return err
			}
		case err != nil:
			return err
		case hash == p.Hash:
			v, err = scanTask(tx.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM docket_task_versions v
				WHERE v.name = ? AND v.version = ?`, p.Name, latest))
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE docket_tasks SET latest_version = ?, latest_hash = ?, updated_at = ?
			WHERE name = ?`, latest+1, p.Hash, now, p.Name); err != nil {
			return err
		}
		v, err = scanTask(tx.QueryRowContext(ctx, `INSERT INTO docket_task_versions (name, version, hash, definition, created_at)
			VALUES (?, ?, ?, ?, ?) RETURNING name, version, hash, definition, created_at`,
			p.Name, latest+1, p.Hash, string(p.Definition), now))
		created = true
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("put task %q: %w", p.Name, err)
	}
	return v, created, nil
}

// TaskGet implements store.Store.
func (s *Store) TaskGet(ctx context.Context, p *store.TaskGetParams) (*crowd.TaskVersion, error) {
	return taskGet(ctx, s.reader, p)
}

func taskGet(ctx context.Context, c conn, p *store.TaskGetParams) (*crowd.TaskVersion, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var row *sql.Row
	if p.Version == 0 {
		row = c.QueryRowContext(ctx, `SELECT `+taskColumns+`
			FROM docket_tasks t JOIN docket_task_versions v ON v.name = t.name AND v.version = t.latest_version
			WHERE t.name = ?`, p.Name)
	} else {
		row = c.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM docket_task_versions v
			WHERE v.name = ? AND v.version = ?`, p.Name, p.Version)
	}
	v, err := scanTask(row)
	if err != nil {
		return nil, fmt.Errorf("get task %q version %d: %w", p.Name, p.Version, notFound(err))
	}
	return v, nil
}

// TaskList implements store.Store.
func (s *Store) TaskList(ctx context.Context, p *store.TaskListParams) ([]*crowd.TaskVersion, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	out, err := queryAll(ctx, s.reader, scanTask, `SELECT `+taskColumns+`
		FROM docket_tasks t JOIN docket_task_versions v ON v.name = t.name AND v.version = t.latest_version
		WHERE t.name > ? ORDER BY t.name LIMIT ?`, p.AfterName, limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

// ---- Pools ----

const poolSelect = `SELECT p.id, p.workflow, p.workflow_version, p.step, p.task, p.task_version, p.status,
	p.priority, p.skills, p.channels, p.judgments_per_unit, p.assignment_seconds, p.settings,
	p.created_at, p.updated_at,
	coalesce(c.units_new, 0), coalesce(c.units_judgable, 0), coalesce(c.units_paused, 0),
	coalesce(c.units_finalized, 0), coalesce(c.units_canceled, 0), coalesce(c.units_golden, 0),
	coalesce(c.judgments, 0), coalesce(c.active_assignments, 0)
FROM docket_pools p LEFT JOIN docket_pool_counters c ON c.pool_id = p.id AND c.shard = 0`

func scanPool(r scanner) (*crowd.Pool, error) {
	var (
		p                         crowd.Pool
		id, status, skills, chans string
		settings                  string
		created, updated          int64
		n                         [8]int
	)
	if err := r.Scan(&id, &p.Workflow, &p.WorkflowVersion, &p.Step, &p.Task, &p.TaskVersion, &status,
		&p.Priority, &skills, &chans, &p.JudgmentsPerUnit, &p.AssignmentSeconds, &settings,
		&created, &updated, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6], &n[7]); err != nil {
		return nil, err
	}
	var err error
	if p.ID, err = parseUUID("pool", id); err != nil {
		return nil, err
	}
	if p.Skills, err = decodeNames(skills); err != nil {
		return nil, err
	}
	if p.Channels, err = decodeNames(chans); err != nil {
		return nil, err
	}
	p.Status = crowd.PoolStatus(status)
	p.Settings = json.RawMessage(settings)
	p.Counts = crowd.PoolCounts{New: n[0], Judgable: n[1], Paused: n[2], Finalized: n[3], Canceled: n[4],
		Golden: n[5], Judgments: n[6], ActiveAssignments: n[7]}
	p.CreatedAt, p.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &p, nil
}

// PoolCreate implements store.Store.
func (s *Store) PoolCreate(ctx context.Context, p *store.PoolCreateParams) (*crowd.Pool, bool, error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	var (
		pool    *crowd.Pool
		created bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		pool, created, err = poolCreate(ctx, tx, p)
		return err
	})
	return pool, created, err
}

func poolCreate(ctx context.Context, tx *sql.Tx, p *store.PoolCreateParams) (*crowd.Pool, bool, error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	settings := "{}"
	if p.Settings != nil {
		settings = string(p.Settings)
	}
	now := micros(p.Now)
	res, err := tx.ExecContext(ctx, `INSERT INTO docket_pools (id, workflow, workflow_version, step, task, task_version,
		status, priority, skills, channels, judgments_per_unit, assignment_seconds, settings, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, 'OPEN', ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (workflow, workflow_version, step) DO NOTHING`,
		p.ID.String(), p.Workflow, p.WorkflowVersion, p.Step, p.Task, p.TaskVersion, p.Priority,
		encodeNames(p.Skills), encodeNames(p.Channels), p.JudgmentsPerUnit, p.AssignmentSeconds, settings, now, now)
	what := fmt.Sprintf("create pool for %s v%d step %q", p.Workflow, p.WorkflowVersion, p.Step)
	switch {
	case isForeignKey(err):
		return nil, false, fmt.Errorf("%s: workflow version or task %s v%d: %w", what, p.Task, p.TaskVersion, store.ErrNotFound)
	case isUnique(err):
		return nil, false, fmt.Errorf("create pool %s: %w", p.ID, store.ErrDuplicate)
	case err != nil:
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		var id string
		if err := tx.QueryRowContext(ctx, `SELECT id FROM docket_pools WHERE workflow = ? AND workflow_version = ? AND step = ?`,
			p.Workflow, p.WorkflowVersion, p.Step).Scan(&id); err != nil {
			return nil, false, fmt.Errorf("%s: %w", what, err)
		}
		pool, err := poolGet(ctx, tx, uuid.MustParse(id))
		return pool, false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO docket_pool_counters (pool_id, shard) VALUES (?, ?)`, p.ID.String(), poolShard); err != nil {
		return nil, false, fmt.Errorf("%s: counters: %w", what, err)
	}
	if err := insertOutbox(ctx, tx, crowd.EventPoolUpdated, crowd.PoolUpdatedData{PoolID: p.ID, To: crowd.PoolOpen}, p.Now); err != nil {
		return nil, false, err
	}
	pool, err := poolGet(ctx, tx, p.ID)
	return pool, true, err
}

// PoolGet implements store.Store.
func (s *Store) PoolGet(ctx context.Context, id uuid.UUID) (*crowd.Pool, error) {
	return poolGet(ctx, s.reader, id)
}

func poolGet(ctx context.Context, c conn, id uuid.UUID) (*crowd.Pool, error) {
	p, err := scanPool(c.QueryRowContext(ctx, poolSelect+` WHERE p.id = ?`, id.String()))
	if err != nil {
		return nil, fmt.Errorf("get pool %s: %w", id, notFound(err))
	}
	return p, nil
}

// PoolList implements store.Store.
func (s *Store) PoolList(ctx context.Context, p *store.PoolListParams) ([]*crowd.Pool, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var (
		where []string
		args  []any
	)
	if p.Workflow != "" {
		where, args = append(where, "p.workflow = ?"), append(args, p.Workflow)
	}
	if p.Step != "" {
		where, args = append(where, "p.step = ?"), append(args, p.Step)
	}
	if len(p.Statuses) > 0 {
		where = append(where, "p.status IN ("+placeholders(len(p.Statuses))+")")
		for _, st := range p.Statuses {
			args = append(args, string(st))
		}
	}
	if p.BeforeID != uuid.Nil {
		where, args = append(where, "p.id < ?"), append(args, p.BeforeID.String())
	}
	q := poolSelect
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY p.id DESC LIMIT ?"
	out, err := queryAll(ctx, s.reader, scanPool, q, append(args, limit(p.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return out, nil
}

// PoolTransition implements store.Store.
func (s *Store) PoolTransition(ctx context.Context, p *store.PoolTransitionParams) (*crowd.Pool, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out *crowd.Pool
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = poolTransition(ctx, tx, p)
		return err
	})
	return out, err
}

func poolTransition(ctx context.Context, tx *sql.Tx, p *store.PoolTransitionParams) (*crowd.Pool, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	cur, err := poolGet(ctx, tx, p.ID)
	if err != nil {
		return nil, fmt.Errorf("transition pool: %w", err)
	}
	ite := &crowd.InvalidTransitionError{Of: "pool", ID: p.ID.String(), From: string(cur.Status), To: string(p.To)}
	if cur.Status != p.From {
		return nil, ite
	}
	if p.To == crowd.PoolCompleted && cur.Counts.Open() > 0 {
		ite.Reason = fmt.Sprintf("%d units are not final", cur.Counts.Open())
		return nil, ite
	}
	if _, err := tx.ExecContext(ctx, `UPDATE docket_pools SET status = ?, updated_at = ? WHERE id = ?`,
		string(p.To), micros(p.Now), p.ID.String()); err != nil {
		return nil, fmt.Errorf("transition pool %s: %w", p.ID, err)
	}
	if err := insertOutbox(ctx, tx, crowd.EventPoolUpdated, crowd.PoolUpdatedData{PoolID: p.ID, From: p.From, To: p.To}, p.Now); err != nil {
		return nil, err
	}
	return poolGet(ctx, tx, p.ID)
}

// PoolCompleteMany implements store.Store: in one write transaction (the
// one writer: nothing moves meanwhile), the CLOSED pools whose counters
// show no open regular unit become COMPLETED, with their outbox rows.
func (s *Store) PoolCompleteMany(ctx context.Context, p *store.PoolCompleteManyParams) ([]uuid.UUID, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var pool any
	if p.PoolID != uuid.Nil {
		pool = p.PoolID.String()
	}
	out := []uuid.UUID{}
	err := s.write(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		ids, err := queryAll(ctx, tx, func(r scanner) (uuid.UUID, error) {
			var id string
			if err := r.Scan(&id); err != nil {
				return uuid.Nil, err
			}
			return parseUUID("pool", id)
		}, `UPDATE docket_pools SET status = 'COMPLETED', updated_at = ?
			WHERE id IN (SELECT p.id FROM docket_pools p LEFT JOIN docket_pool_counters c ON c.pool_id = p.id AND c.shard = 0
				WHERE p.status = 'CLOSED' AND (? IS NULL OR p.id = ?)
					AND coalesce(c.units_new + c.units_judgable + c.units_paused, 0) = 0
				ORDER BY p.id LIMIT ?)
			RETURNING id`, micros(p.Now), pool, pool, p.Max)
		if err != nil {
			return err
		}
		slices.SortFunc(ids, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
		for _, id := range ids {
			if err := insertOutbox(ctx, tx, crowd.EventPoolUpdated, crowd.PoolUpdatedData{PoolID: id, From: crowd.PoolClosed, To: crowd.PoolCompleted}, p.Now); err != nil {
				return err
			}
		}
		out = append(out, ids...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("complete pools: %w", err)
	}
	return out, nil
}
