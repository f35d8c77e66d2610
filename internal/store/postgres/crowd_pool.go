package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// poolShards is how many counter rows a pool has (docket_pool_counters):
// each counting statement moves one, drawn at random, so the takes and
// judgments of a hot pool do not all wait for one row lock.
const poolShards = 16

// txShardKey holds, in the context of a transaction (runTx), the one
// counter row its statements move.
type txShardKey struct{}

// shard is the counter row a statement moves: drawn at random, but one
// per transaction (runTx draws it), so that a transaction of several
// counting statements — a judgment that finalizes its unit — holds one
// counter row, and two such transactions cannot each hold the row the
// other waits for (a deadlock).
func shard(ctx context.Context) int {
	if n, ok := ctx.Value(txShardKey{}).(int); ok {
		return n
	}
	return rand.IntN(poolShards)
}

// unitCounter is the docket_pool_counters column counting regular units in
// state s.
func unitCounter(s crowd.UnitState) string {
	return "units_" + strings.ToLower(string(s))
}

// isFKViolation reports a foreign key violation: a referenced row is
// missing.
func isFKViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}

// isConstraintViolation reports a unique violation of the named rule.
func isConstraintViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == constraint
}

// isUniqueViolation reports a unique violation.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// ---- Tasks ----

const taskColumns = `v.name, v.version, v.hash, v.definition, v.created_at`

func scanTask(r rowScanner) (*crowd.TaskVersion, error) {
	var (
		v   crowd.TaskVersion
		def []byte
	)
	if err := r.Scan(&v.Name, &v.Version, &v.Hash, &def, &v.CreatedAt); err != nil {
		return nil, err
	}
	v.Definition = json.RawMessage(def)
	v.CreatedAt = v.CreatedAt.UTC()
	return &v, nil
}

// TaskPut implements store.Store: as WorkflowPut, the head row of the name
// is locked first so puts of one name run one after the other.
func (s *Store) TaskPut(ctx context.Context, p *store.TaskPutParams) (*crowd.TaskVersion, bool, error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	var (
		v       *crowd.TaskVersion
		created bool
	)
	err := s.withTx(ctx, func(c pgx.Tx) error {
		now := dbTime(p.Now)
		var (
			latest int
			hash   string
		)
		err := c.QueryRow(ctx, `
			INSERT INTO docket_tasks (name, latest_version, latest_hash, created_at, updated_at)
			VALUES ($1, 0, '', $2, $2)
			ON CONFLICT (name) DO UPDATE SET updated_at = docket_tasks.updated_at
			RETURNING latest_version, latest_hash`, p.Name, now).Scan(&latest, &hash)
		if err != nil {
			return err
		}
		if latest > 0 && hash == p.Hash {
			v, err = scanTask(c.QueryRow(ctx, `SELECT `+taskColumns+`
				FROM docket_task_versions v WHERE v.name = $1 AND v.version = $2`, p.Name, latest))
			return err
		}
		v, err = scanTask(c.QueryRow(ctx, `
			WITH head AS (
				UPDATE docket_tasks SET latest_version = $2, latest_hash = $3, updated_at = $5
				WHERE name = $1
			)
			INSERT INTO docket_task_versions AS v (name, version, hash, definition, created_at)
			VALUES ($1, $2, $3, $4::json, $5)
			RETURNING `+taskColumns, p.Name, latest+1, p.Hash, string(p.Definition), now))
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
	return taskGet(ctx, s.pool, p)
}

func taskGet(ctx context.Context, c conn, p *store.TaskGetParams) (*crowd.TaskVersion, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var row pgx.Row
	if p.Version == 0 {
		row = c.QueryRow(ctx, `SELECT `+taskColumns+`
			FROM docket_tasks t JOIN docket_task_versions v ON v.name = t.name AND v.version = t.latest_version
			WHERE t.name = $1`, p.Name)
	} else {
		row = c.QueryRow(ctx, `SELECT `+taskColumns+`
			FROM docket_task_versions v WHERE v.name = $1 AND v.version = $2`, p.Name, p.Version)
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
	rs, err := s.pool.Query(ctx, `SELECT `+taskColumns+`
		FROM docket_tasks t JOIN docket_task_versions v ON v.name = t.name AND v.version = t.latest_version
		WHERE t.name > $1 ORDER BY t.name LIMIT $2`, p.AfterName, limitOrNull(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	out, err := collect(rs, scanTask)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

// collect scans every row of rs with scan.
func collect[T any](rs pgx.Rows, scan func(rowScanner) (T, error)) ([]T, error) {
	defer rs.Close()
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

// ---- Pools ----

// poolSelect reads pools (alias p) with their counters summed over shards.
const poolSelect = `SELECT p.id, p.workflow, p.workflow_version, p.step, p.task, p.task_version, p.status,
	p.priority, p.skills, p.channels, p.judgments_per_unit, p.assignment_seconds, p.settings,
	p.created_at, p.updated_at,
	c.units_new, c.units_judgable, c.units_paused, c.units_finalized, c.units_canceled,
	c.units_golden, c.judgments, c.active_assignments
FROM docket_pools p CROSS JOIN LATERAL (
	SELECT coalesce(sum(units_new), 0)::bigint AS units_new,
		coalesce(sum(units_judgable), 0)::bigint AS units_judgable,
		coalesce(sum(units_paused), 0)::bigint AS units_paused,
		coalesce(sum(units_finalized), 0)::bigint AS units_finalized,
		coalesce(sum(units_canceled), 0)::bigint AS units_canceled,
		coalesce(sum(units_golden), 0)::bigint AS units_golden,
		coalesce(sum(judgments), 0)::bigint AS judgments,
		coalesce(sum(active_assignments), 0)::bigint AS active_assignments
	FROM docket_pool_counters WHERE pool_id = p.id
) c`

func scanPool(r rowScanner) (*crowd.Pool, error) {
	var (
		p        crowd.Pool
		status   string
		settings []byte
		n        [8]int64
	)
	if err := r.Scan(&p.ID, &p.Workflow, &p.WorkflowVersion, &p.Step, &p.Task, &p.TaskVersion, &status,
		&p.Priority, &p.Skills, &p.Channels, &p.JudgmentsPerUnit, &p.AssignmentSeconds, &settings,
		&p.CreatedAt, &p.UpdatedAt, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6], &n[7]); err != nil {
		return nil, err
	}
	p.Status = crowd.PoolStatus(status)
	p.Settings = json.RawMessage(settings)
	p.Counts = crowd.PoolCounts{
		New: int(n[0]), Judgable: int(n[1]), Paused: int(n[2]), Finalized: int(n[3]), Canceled: int(n[4]),
		Golden: int(n[5]), Judgments: int(n[6]), ActiveAssignments: int(n[7]),
	}
	if p.Skills == nil {
		p.Skills = []string{}
	}
	if p.Channels == nil {
		p.Channels = []string{}
	}
	p.CreatedAt = p.CreatedAt.UTC()
	p.UpdatedAt = p.UpdatedAt.UTC()
	return &p, nil
}

// poolCreateSQL inserts a pool, its counter shards and its pool.updated
// outbox row, or nothing when the step's pool exists.
var poolCreateSQL = `
WITH p AS (
	INSERT INTO docket_pools (id, workflow, workflow_version, step, task, task_version, status, priority,
		skills, channels, judgments_per_unit, assignment_seconds, settings, created_at, updated_at)
	VALUES (@id, @workflow, @wv, @step, @task, @tv, 'OPEN', @priority,
		@skills::text[], @channels::text[], @jpu, @seconds, @settings::jsonb, @now, @now)
	ON CONFLICT (workflow, workflow_version, step) DO NOTHING
	RETURNING id
),
c AS (
	INSERT INTO docket_pool_counters (pool_id, shard)
	SELECT p.id, g FROM p, generate_series(0, ` + strconv.Itoa(poolShards-1) + `) AS g
),
o AS (
	INSERT INTO docket_outbox (event_type, data, created_at)
	SELECT 'pool.updated', json_build_object('poolId', p.id, 'to', 'OPEN'), @now FROM p
)
SELECT id FROM p`

// PoolCreate implements store.Store.
func (s *Store) PoolCreate(ctx context.Context, p *store.PoolCreateParams) (*crowd.Pool, bool, error) {
	var (
		pool    *crowd.Pool
		created bool
	)
	err := s.withTx(ctx, func(c pgx.Tx) error {
		var err error
		pool, created, err = poolCreate(ctx, c, p)
		return err
	})
	return pool, created, err
}

func poolCreate(ctx context.Context, c conn, p *store.PoolCreateParams) (*crowd.Pool, bool, error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	settings := "{}"
	if p.Settings != nil {
		settings = string(p.Settings)
	}
	var id uuid.UUID
	err := c.QueryRow(ctx, poolCreateSQL, pgx.NamedArgs{
		"id": p.ID, "workflow": p.Workflow, "wv": p.WorkflowVersion, "step": p.Step, "task": p.Task,
		"tv": p.TaskVersion, "priority": p.Priority, "skills": orEmpty(p.Skills), "channels": orEmpty(p.Channels),
		"jpu": p.JudgmentsPerUnit, "seconds": p.AssignmentSeconds, "settings": settings, "now": dbTime(p.Now),
	}).Scan(&id)
	created := err == nil
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		err = c.QueryRow(ctx, `SELECT id FROM docket_pools WHERE workflow = $1 AND workflow_version = $2 AND step = $3`,
			p.Workflow, p.WorkflowVersion, p.Step).Scan(&id)
	case isFKViolation(err):
		return nil, false, fmt.Errorf("create pool for %s v%d step %q: workflow version or task %s v%d: %w",
			p.Workflow, p.WorkflowVersion, p.Step, p.Task, p.TaskVersion, store.ErrNotFound)
	case isUniqueViolation(err):
		return nil, false, fmt.Errorf("create pool %s: %w", p.ID, store.ErrDuplicate)
	}
	if err != nil {
		return nil, false, fmt.Errorf("create pool for %s v%d step %q: %w", p.Workflow, p.WorkflowVersion, p.Step, err)
	}
	pool, err := poolGet(ctx, c, id)
	return pool, created, err
}

// orEmpty is names, or an empty list for nil (the columns are NOT NULL).
func orEmpty(names []string) []string {
	if names == nil {
		return []string{}
	}
	return names
}

// PoolGet implements store.Store.
func (s *Store) PoolGet(ctx context.Context, id uuid.UUID) (*crowd.Pool, error) {
	return poolGet(ctx, s.pool, id)
}

func poolGet(ctx context.Context, c conn, id uuid.UUID) (*crowd.Pool, error) {
	p, err := scanPool(c.QueryRow(ctx, poolSelect+` WHERE p.id = $1`, id))
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
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if p.Workflow != "" {
		where = append(where, "p.workflow = "+arg(p.Workflow))
	}
	if p.Step != "" {
		where = append(where, "p.step = "+arg(p.Step))
	}
	if len(p.Statuses) > 0 {
		st := make([]string, len(p.Statuses))
		for i, s := range p.Statuses {
			st[i] = string(s)
		}
		where = append(where, "p.status = ANY("+arg(st)+"::text[])")
	}
	if p.BeforeID != uuid.Nil {
		where = append(where, "p.id < "+arg(p.BeforeID))
	}
	q := poolSelect
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY p.id DESC LIMIT " + arg(limitOrNull(p.Limit))
	rs, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	out, err := collect(rs, scanPool)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return out, nil
}

// poolTransitionSQL changes a pool's status, guarded by its status and,
// to COMPLETED, by no open regular unit, and writes its outbox row.
const poolTransitionSQL = `
WITH t AS (
	UPDATE docket_pools SET status = @to, updated_at = @now
	WHERE id = @id AND status = @from
		AND (@to <> 'COMPLETED' OR (SELECT coalesce(sum(units_new + units_judgable + units_paused), 0)
			FROM docket_pool_counters WHERE pool_id = @id) = 0)
	RETURNING id
),
o AS (
	INSERT INTO docket_outbox (event_type, data, created_at)
	SELECT 'pool.updated', json_build_object('poolId', id, 'from', @from::text, 'to', @to::text), @now FROM t
)
SELECT id FROM t`

// PoolTransition implements store.Store.
func (s *Store) PoolTransition(ctx context.Context, p *store.PoolTransitionParams) (*crowd.Pool, error) {
	var out *crowd.Pool
	err := s.withTx(ctx, func(c pgx.Tx) error {
		var err error
		out, err = poolTransition(ctx, c, p)
		return err
	})
	return out, err
}

func poolTransition(ctx context.Context, c conn, p *store.PoolTransitionParams) (*crowd.Pool, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var id uuid.UUID
	err := c.QueryRow(ctx, poolTransitionSQL, pgx.NamedArgs{
		"id": p.ID, "from": string(p.From), "to": string(p.To), "now": dbTime(p.Now),
	}).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		cur, err := poolGet(ctx, c, p.ID)
		if err != nil {
			return nil, fmt.Errorf("transition pool: %w", err)
		}
		ite := &crowd.InvalidTransitionError{Of: "pool", ID: p.ID.String(), From: string(cur.Status), To: string(p.To)}
		if cur.Status == p.From {
			ite.Reason = fmt.Sprintf("%d units are not final", cur.Counts.Open())
		}
		return nil, ite
	}
	if err != nil {
		return nil, fmt.Errorf("transition pool %s: %w", p.ID, err)
	}
	return poolGet(ctx, c, p.ID)
}

// poolCompleteLockSQL locks CLOSED pools with no open regular unit, their
// counters summed in the statement's snapshot: a unit finalized by a
// transaction not committed yet still counts as open, and the next call
// completes its pool. A unit moves between two counters of one shard row
// in one statement, so the sum never shows an open unit as final. The
// sweep over all pools skips pools another caller holds — a completer, or
// a reopen of one of their units, which holds its pool FOR NO KEY UPDATE
// (poolReopen) — and leaves them to its next round. The counters are
// checked before the LIMIT: closed pools that keep an open unit (they
// hand out no assignment, so they may keep it for good) must not fill
// every batch.
const poolCompleteLockSQL = poolCompleteOneLockSQL + ` SKIP LOCKED`

// poolCompleteOneLockSQL is poolCompleteLockSQL waiting for the pools
// another caller holds: a close completing its own pool (@pool) waits for
// a completer or reopen holding it, so that its read afterwards sees what
// they did (a skip let a close read CLOSED while the leader's completer
// was about to commit COMPLETED). Re-checked after the wait, a pool
// completed meanwhile no longer matches.
const poolCompleteOneLockSQL = `
SELECT p.id FROM docket_pools p
WHERE p.status = 'CLOSED' AND (@pool::uuid IS NULL OR p.id = @pool::uuid)
	AND (SELECT coalesce(sum(units_new + units_judgable + units_paused), 0)
		FROM docket_pool_counters WHERE pool_id = p.id) = 0
ORDER BY p.id
LIMIT @max
FOR UPDATE OF p`

// poolCompleteSQL completes the pools poolCompleteLockSQL locked whose
// counters, read again in this statement's snapshot, still show no open
// unit: a reopen that committed between the first statement's snapshot
// and its lock (it held the pool then, or took it after) is seen now.
const poolCompleteSQL = `
WITH t AS (
	UPDATE docket_pools p SET status = 'COMPLETED', updated_at = @now
	WHERE p.id = ANY(@ids::uuid[]) AND p.status = 'CLOSED'
		AND (SELECT coalesce(sum(units_new + units_judgable + units_paused), 0)
			FROM docket_pool_counters WHERE pool_id = p.id) = 0
	RETURNING p.id
),
o AS (
	INSERT INTO docket_outbox (event_type, data, created_at)
	SELECT 'pool.updated', json_build_object('poolId', id, 'from', 'CLOSED', 'to', 'COMPLETED'), @now FROM t
)
SELECT id FROM t ORDER BY id`

// PoolCompleteMany implements store.Store: the pools are locked by one
// statement and completed by a second, in one transaction (see
// poolCompleteSQL).
func (s *Store) PoolCompleteMany(ctx context.Context, p *store.PoolCompleteManyParams) ([]uuid.UUID, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var pool *uuid.UUID
	if p.PoolID != uuid.Nil {
		pool = &p.PoolID
	}
	out := []uuid.UUID{}
	scanID := func(r rowScanner) (uuid.UUID, error) {
		var id uuid.UUID
		return id, r.Scan(&id)
	}
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		lock := poolCompleteLockSQL
		if pool != nil {
			lock = poolCompleteOneLockSQL
		}
		rs, err := tx.Query(ctx, lock, pgx.NamedArgs{"pool": pool, "max": p.Max})
		if err != nil {
			return err
		}
		ids, err := collect(rs, scanID)
		if err != nil || len(ids) == 0 {
			return err
		}
		rs, err = tx.Query(ctx, poolCompleteSQL, pgx.NamedArgs{"ids": ids, "now": dbTime(p.Now)})
		if err != nil {
			return err
		}
		done, err := collect(rs, scanID)
		if err != nil {
			return err
		}
		out = append(out[:0], done...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("complete pools: %w", err)
	}
	return out, nil
}
