package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// copyMinJobs: batches larger than this without idempotency keys are
// written with COPY, which is several times cheaper per row than INSERT.
const copyMinJobs = 50

// insertUnnestSQL inserts a batch from parallel arrays in one statement
// that also writes the outbox row and the wakeups. Rows whose idempotency
// key exists are skipped (the caller fetches them afterwards, in a new
// snapshot that sees concurrently committed keys).
var insertUnnestSQL = `
WITH ins AS (
	INSERT INTO docket_jobs (id, job_type, queue, priority, payload, idempotency_key, state,
		max_attempts, run_at, sort_at, timeout_ms, created_at, updated_at)
	SELECT id, job_type, queue, priority, payload::jsonb, NULLIF(idempotency_key, ''), state,
		max_attempts, run_at, sort_at, timeout_ms, $12::timestamptz, $12::timestamptz
	FROM unnest($1::uuid[], $2::text[], $3::text[], $4::smallint[], $5::text[], $6::text[],
		$7::text[], $8::integer[], $9::timestamptz[], $10::timestamptz[], $11::bigint[])
		AS u(id, job_type, queue, priority, payload, idempotency_key, state,
			max_attempts, run_at, sort_at, timeout_ms)
	ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
	RETURNING *
),
outbox AS (` + outboxStateChanged("ins", "''::text", "state", "$12::timestamptz") + `),
notify AS (` + notifyAvailable("ins", "$12::timestamptz") + `)
SELECT ` + jobColumns + ` FROM ins WHERE ` + notifyGuard("notify")

// insertExistingSQL reads the rows that own conflicting idempotency keys.
const insertExistingSQL = `SELECT ` + jobColumns + ` FROM docket_jobs WHERE idempotency_key = ANY($1::text[])`

// insertCopyFinishSQL writes the outbox row and the wakeups of a COPY batch.
const insertCopyFinishSQL = `
WITH outbox AS (
	INSERT INTO docket_outbox (event_type, data, created_at) VALUES ('job.state_changed', $1::json, $2)
)
SELECT pg_notify('` + channelJobAvailable + `', queue) FROM unnest($3::text[]) AS queue`

// insertPlan is a validated batch: the jobs as they will be stored, and
// which of them are later duplicates of an idempotency key in the batch.
type insertPlan struct {
	now    time.Time
	params []*store.JobInsertParams
	// prepare, when set, fills params[i], which row then checks: the
	// batch streams through COPY as its jobs are prepared (see
	// store.JobInsertManyParams.Prepare).
	prepare func(i int) error
	batch   *store.JobInsertManyParams // what prepare fills
	// rows[i] is job i as stored, once row(i) has made it: the COPY path
	// makes each as it encodes it, so the work overlaps the server's.
	rows []*job.Row
	slab []job.Row // where row makes the next rows
	// firstOf[i] is the index of the first job with job i's idempotency
	// key (i itself for the first), or -1 when job i has no key; nil when
	// no job has a key.
	firstOf []int
}

// planInsert validates p; the rows are made by row. A batch with Prepare
// set goes through COPY, its jobs prepared and checked as they are sent,
// when it is large enough (and the caller may stream it: stream); else it
// is prepared here, first.
func (s *Store) planInsert(p *store.JobInsertManyParams, stream bool) (*insertPlan, error) {
	if p.Prepare != nil && (!stream || len(p.Jobs) <= copyMinJobs) {
		if err := p.PrepareAll(); err != nil {
			return nil, err
		}
	}
	plan := &insertPlan{now: dbTime(p.Now), params: p.Jobs, prepare: p.Prepare, batch: p}
	plan.rows = make([]*job.Row, len(p.Jobs))
	if plan.prepare != nil {
		return plan, nil
	}
	var firstByKey map[string]int
	for i, jp := range p.Jobs {
		if err := checkInsert(i, jp); err != nil {
			return nil, err
		}
		k := jp.IdempotencyKey
		if k == "" {
			continue
		}
		if plan.firstOf == nil {
			plan.firstOf = make([]int, len(p.Jobs))
			for j := range plan.firstOf {
				plan.firstOf[j] = -1
			}
			firstByKey = map[string]int{}
		}
		first, seen := firstByKey[k]
		if !seen {
			first = i
			firstByKey[k] = i
		}
		plan.firstOf[i] = first
	}
	return plan, nil
}

// checkInsert validates job i of a batch.
func checkInsert(i int, jp *store.JobInsertParams) error {
	if jp == nil {
		return fmt.Errorf("insert jobs: job %d is nil", i)
	}
	if jp.ID == uuid.Nil {
		return fmt.Errorf("insert jobs: job %d has no id", i)
	}
	// The columns are smallint and integer (copyReader writes them as
	// such): out of range is an error, never a wrapped value.
	if jp.Priority < math.MinInt16 || jp.Priority > math.MaxInt16 {
		return fmt.Errorf("insert jobs: job %d: priority %d out of range", i, jp.Priority)
	}
	if jp.MaxAttempts < math.MinInt32 || jp.MaxAttempts > math.MaxInt32 {
		return fmt.Errorf("insert jobs: job %d: max attempts %d out of range", i, jp.MaxAttempts)
	}
	if jp.State != "" && jp.State != job.StateQueued && jp.State != job.StateCreated {
		return fmt.Errorf("insert jobs: job %d: state must be %s or %s, got %q",
			i, job.StateQueued, job.StateCreated, jp.State)
	}
	return nil
}

// rowSlab is how many rows insertPlan.row allocates at a time.
const rowSlab = 256

// first is plan.firstOf[i]: -1 for a job without a key.
func (p *insertPlan) first(i int) int {
	if p.firstOf == nil {
		return -1
	}
	return p.firstOf[i]
}

// row makes job i's row as it will be stored, with every default filled
// in, and returns it: after preparing and checking the job, when the plan
// prepares its jobs as they are sent.
func (p *insertPlan) row(i int) (*job.Row, error) {
	if p.prepare != nil {
		if err := p.batch.Prepared(i, p.prepare); err != nil {
			return nil, err
		}
		if err := checkInsert(i, p.params[i]); err != nil {
			return nil, err
		}
	}
	jp := p.params[i]
	state := jp.State
	if state == "" {
		state = job.StateQueued
	}
	queue := jp.Queue
	if queue == "" {
		queue = jp.Type
	}
	payload := jp.Payload
	if payload == nil {
		payload = json.RawMessage("null")
	}
	runAt := p.now
	if !jp.RunAt.IsZero() {
		runAt = dbTime(jp.RunAt)
	}
	if len(p.slab) == 0 {
		// Rows are allocated a slab at a time, as they are made: one
		// allocation of a whole batch of 5,000, up front (a megabyte to
		// zero and fault in), held the COPY back by ~0.3 µs a job.
		p.slab = make([]job.Row, min(rowSlab, len(p.params)-i))
	}
	r := &p.slab[0]
	p.slab = p.slab[1:]
	p.rows[i] = r
	*r = job.Row{
		ID:             jp.ID,
		Type:           jp.Type,
		Queue:          queue,
		Priority:       jp.Priority,
		Payload:        payload,
		IdempotencyKey: jp.IdempotencyKey,
		State:          state,
		MaxAttempts:    jp.MaxAttempts,
		RunAt:          runAt,
		Timeout:        jp.Timeout.Truncate(time.Millisecond),
		Version:        1,
		CreatedAt:      p.now,
		UpdatedAt:      p.now,
	}
	return r, nil
}

// useCopy reports whether the batch goes through COPY (a prepared one
// always: planInsert prepared the others first).
func (p *insertPlan) useCopy() bool {
	return p.prepare != nil || p.firstOf == nil && len(p.params) > copyMinJobs
}

// sortAt is the acquisition order key of a job entering QUEUED, computed
// in microseconds exactly as the SQL of the other transitions does.
func (s *Store) sortAt(runAt time.Time, priority int) time.Time {
	return runAt.Add(time.Duration(int64(priority)*s.agingMicros) * time.Microsecond)
}

// JobInsertMany implements store.Store.
func (s *Store) JobInsertMany(ctx context.Context, p *store.JobInsertManyParams) ([]*store.JobInsertResult, error) {
	plan, err := s.planInsert(p, true)
	if err != nil {
		return nil, err
	}
	if len(plan.params) == 0 {
		return []*store.JobInsertResult{}, nil
	}
	if !plan.useCopy() {
		// One statement is its own transaction; fetching the owners of
		// conflicting keys afterwards needs none.
		return s.insertUnnest(ctx, pgxQuerier{s.pool}, plan)
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	defer c.Release() // a connection left in a transaction is closed, not reused
	return s.insertCopy(ctx, c.Conn(), plan, true)
}

// JobNotifyInserted implements store.Store: the commit's NOTIFY wakes
// every process's workers, this process's through the listener; this
// wakes this process's at once, without that round trip.
func (s *Store) JobNotifyInserted(p *store.JobNotifyInsertedParams) {
	s.hub.PublishAvailable(p.Now, p.Jobs...)
}

// JobInsertManyTx implements store.Store: tx is a pgx.Tx or a *sql.Tx on the
// pgx stdlib driver.
func (s *Store) JobInsertManyTx(ctx context.Context, tx any, p *store.JobInsertManyParams) ([]*store.JobInsertResult, error) {
	var q querier
	switch tx := tx.(type) {
	case pgx.Tx:
		// Not streamed: a job failing its preparation mid-COPY would
		// abort the caller's transaction.
		plan, err := s.planInsert(p, false)
		if err != nil {
			return nil, err
		}
		if len(plan.params) == 0 {
			return []*store.JobInsertResult{}, nil
		}
		if plan.useCopy() {
			return s.insertCopy(ctx, tx.Conn(), plan, false)
		}
		return s.insertUnnest(ctx, pgxQuerier{tx}, plan)
	case *sql.Tx:
		if tx == nil {
			return nil, fmt.Errorf("insert jobs: nil %T: %w", tx, store.ErrUnsupportedTx)
		}
		q = sqlQuerier{tx}
	default:
		return nil, fmt.Errorf("insert jobs: %T: %w", tx, store.ErrUnsupportedTx)
	}
	plan, err := s.planInsert(p, false)
	if err != nil {
		return nil, err
	}
	if len(plan.params) == 0 {
		return []*store.JobInsertResult{}, nil
	}
	return s.insertUnnest(ctx, q, plan)
}

// insertUnnest inserts the plan's first occurrence of each key (and every
// job without one) in one statement, then reads the existing owners of the
// keys that conflicted.
func (s *Store) insertUnnest(ctx context.Context, q querier, plan *insertPlan) ([]*store.JobInsertResult, error) {
	n := len(plan.params)
	jobs := make([]*job.Row, n)
	for i := range jobs {
		var err error
		if jobs[i], err = plan.row(i); err != nil {
			return nil, err
		}
	}
	var (
		ids        = make([][16]byte, 0, n) // see JobFinishMany
		types      = make([]string, 0, n)
		queues     = make([]string, 0, n)
		priorities = make([]int, 0, n)
		payloads   = make([]string, 0, n)
		keys       = make([]string, 0, n)
		states     = make([]string, 0, n)
		maxes      = make([]int, 0, n)
		runAts     = make([]time.Time, 0, n)
		sortAts    = make([]time.Time, 0, n)
		timeouts   = make([]int64, 0, n)
	)
	// Rows are inserted in the order of the arrays, and an insert waits
	// on a concurrent one of the same idempotency key: keyed rows go
	// first, sorted by key, so batches sharing keys never deadlock.
	order := make([]int, 0, n)
	for i := range jobs {
		if f := plan.first(i); f < 0 || f == i { // skip later duplicates of a key
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ka, kb := jobs[a].IdempotencyKey, jobs[b].IdempotencyKey
		switch {
		case ka == kb:
			return 0
		case ka == "":
			return 1
		case kb == "":
			return -1
		}
		return strings.Compare(ka, kb)
	})
	for _, i := range order {
		j := jobs[i]
		ids = append(ids, j.ID)
		types = append(types, j.Type)
		queues = append(queues, j.Queue)
		priorities = append(priorities, j.Priority)
		payloads = append(payloads, string(j.Payload))
		keys = append(keys, j.IdempotencyKey)
		states = append(states, string(j.State))
		maxes = append(maxes, j.MaxAttempts)
		runAts = append(runAts, j.RunAt)
		sortAts = append(sortAts, s.sortAt(j.RunAt, j.Priority))
		timeouts = append(timeouts, j.Timeout.Milliseconds())
	}
	rs, err := q.query(ctx, insertUnnestSQL,
		ids, types, queues, priorities, payloads, keys, states, maxes, runAts, sortAts, timeouts, plan.now)
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	inserted, err := collectJobs(rs)
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	byID := make(map[uuid.UUID]*job.Row, len(inserted))
	for _, row := range inserted {
		byID[row.ID] = row
	}

	// Keys whose first occurrence was not inserted belong to existing rows.
	var conflicted []string
	for i, j := range jobs {
		if plan.first(i) == i && byID[j.ID] == nil {
			conflicted = append(conflicted, j.IdempotencyKey)
		}
	}
	byKey := map[string]*job.Row{}
	if len(conflicted) > 0 {
		rs, err := q.query(ctx, insertExistingSQL, conflicted)
		if err != nil {
			return nil, fmt.Errorf("insert jobs: read existing idempotency keys: %w", err)
		}
		existing, err := collectJobs(rs)
		if err != nil {
			return nil, fmt.Errorf("insert jobs: read existing idempotency keys: %w", err)
		}
		for _, row := range existing {
			byKey[row.IdempotencyKey] = row
		}
	}

	out := make([]*store.JobInsertResult, n)
	for i, j := range jobs {
		first := plan.first(i)
		switch {
		case first < 0 || first == i:
			if row := byID[j.ID]; row != nil {
				out[i] = &store.JobInsertResult{Job: row}
				continue
			}
			if first < 0 {
				return nil, fmt.Errorf("insert jobs: job %s was not inserted", j.ID)
			}
			row := byKey[j.IdempotencyKey]
			if row == nil {
				return nil, fmt.Errorf("insert jobs: idempotency key %q conflicted but its job is gone", j.IdempotencyKey)
			}
			out[i] = &store.JobInsertResult{Job: row, Duplicate: true}
		default:
			out[i] = &store.JobInsertResult{Job: out[first].Job, Duplicate: true}
		}
	}
	return out, nil
}

// insertCopy writes a batch without idempotency keys with COPY, then its
// outbox row and wakeups, on c: in a transaction of its own when own (the
// BEGIN goes with the COPY and the COMMIT with the outbox row, two round
// trips fewer), else in the caller's, open on c. The rows are returned as
// planned: a COPY batch stores exactly the planned values.
//
// The rows are made and encoded a chunk at a time as COPY sends them
// (copyReader), and the outbox event with them: the client's work
// overlaps the database's instead of preceding it.
func (s *Store) insertCopy(ctx context.Context, c *pgx.Conn, plan *insertPlan, own bool) (_ []*store.JobInsertResult, err error) {
	sql := copyJobsSQL
	if own {
		sql = "BEGIN; " + copyJobsSQL
		defer func() {
			if err != nil && !c.IsClosed() && c.PgConn().TxStatus() != 'I' {
				_, _ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
			}
		}()
	}
	r := newCopyReader(plan, s.agingMicros)
	_, err = c.PgConn().CopyFrom(ctx, r, sql)
	if rerr := r.close(); rerr != nil {
		return nil, rerr // a job's own error, not the server's report of the abandoned COPY
	}
	if err != nil {
		return nil, fmt.Errorf("insert jobs: copy: %w", err)
	}
	if own {
		var b pgx.Batch
		b.Queue(insertCopyFinishSQL, r.event.JSON(), plan.now, r.dueQueues)
		b.Queue("COMMIT")
		br := c.SendBatch(ctx, &b)
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("insert jobs: write outbox: %w", err)
		}
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("insert jobs: commit: %w", err)
		}
		if err := br.Close(); err != nil {
			return nil, fmt.Errorf("insert jobs: commit: %w", err)
		}
	} else if _, err := c.Exec(ctx, insertCopyFinishSQL, r.event.JSON(), plan.now, r.dueQueues); err != nil {
		return nil, fmt.Errorf("insert jobs: write outbox: %w", err)
	}
	out := make([]*store.JobInsertResult, len(plan.rows))
	results := make([]store.JobInsertResult, len(plan.rows))
	for i, row := range plan.rows {
		results[i].Job = row
		out[i] = &results[i]
	}
	return out, nil
}
