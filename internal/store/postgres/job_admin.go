package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// guardedRetries bounds how often a guarded single-row change is retried
// when the row changed between the statement's snapshot and its lock.
const guardedRetries = 10

// JobGet implements store.Store.
func (s *Store) JobGet(ctx context.Context, id uuid.UUID) (*job.Row, error) {
	return jobGet(ctx, s.pool, id)
}

// JobQueueOf implements store.Store.
func (s *Store) JobQueueOf(ctx context.Context, id uuid.UUID) (string, error) {
	var q string
	if err := s.pool.QueryRow(ctx, `SELECT queue FROM docket_jobs WHERE id = $1`, id).Scan(&q); err != nil {
		return "", fmt.Errorf("get queue of job %s: %w", id, notFound(err))
	}
	return q, nil
}

// jobGet reads one job through c.
func jobGet(ctx context.Context, c conn, id uuid.UUID) (*job.Row, error) {
	row, err := scanJob(c.QueryRow(ctx, `SELECT `+jobColumns+` FROM docket_jobs WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, notFound(err))
	}
	return row, nil
}

// JobList implements store.Store. Only the filters given appear in the SQL,
// so each combination is planned on its own indexes.
func (s *Store) JobList(ctx context.Context, p *store.JobListParams) ([]*job.Row, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if byTypeWaiting(p) {
		return s.jobListByType(ctx, p)
	}
	sql, args := jobListSQL(p)
	rows, err := s.queryJobs(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return rows, nil
}

// byTypeWaiting reports whether p is a listing by type that may hold
// waiting jobs (no state, or QUEUED or RUNNING among its states), without a
// payload search: jobListByTypeSQL reads it.
func byTypeWaiting(p *store.JobListParams) bool {
	return len(p.Types) > 0 && p.Payload == nil && (len(p.States) == 0 || listsWaiting(p.States))
}

// jobListByType reads a listing by type through jobListByTypeSQL in a
// read-only transaction that turns sequential scans off: the waiting
// parts read every QUEUED (or RUNNING) job of the filters, and with a
// backlog that is a large share of the table the planner estimates a
// parallel sequential scan of the whole table cheaper than the partial
// index that holds exactly those rows (0.12 s against 0.04–0.06 s at
// 1,000,000 jobs with 140,000 queued, and the scan grows with the table,
// the index with the backlog).
func (s *Store) jobListByType(ctx context.Context, p *store.JobListParams) ([]*job.Row, error) {
	if p.Limit > 0 {
		// A common type fills its page from the newest jobs at once.
		sql, args := jobListByTypeWindowSQL(p)
		rows, err := s.queryJobs(ctx, sql, args...)
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		if len(rows) == p.Limit {
			return rows, nil
		}
	}
	sql, args := jobListByTypeSQL(p)
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	rs, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	rows, err := collectJobs(rs)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return rows, nil
}

// typeListWindow is how many of the newest jobs (below the cursor) a
// listing by type over waiting states reads first: when they hold a full
// page of matches, that page is exact (every job between them and the
// cursor was read) and the merge is not needed. One type of nine fills a
// page of 51 from 2,000 jobs.
const typeListWindow = 2_000

// jobListByTypeWindowSQL keeps, of the newest typeListWindow jobs below
// the cursor (a walk of the primary key), those p selects, newest first,
// at most p.Limit: JobList's answer when there are p.Limit of them.
func jobListByTypeWindowSQL(p *store.JobListParams) (string, []any) {
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	inner := ""
	if p.BeforeID != uuid.Nil {
		inner = " WHERE id < " + arg(p.BeforeID)
	}
	where := []string{"job_type = ANY(" + arg(p.Types) + "::text[])"}
	if len(p.States) > 0 {
		states := make([]string, len(p.States))
		for i, st := range p.States {
			states[i] = string(st)
		}
		where = append(where, "state = ANY("+arg(states)+"::text[])")
	}
	if len(p.Queues) > 0 {
		where = append(where, "queue = ANY("+arg(p.Queues)+"::text[])")
	}
	if p.Priority != nil {
		where = append(where, "priority = "+arg(*p.Priority))
	}
	return "SELECT " + jobColumns + " FROM (SELECT * FROM docket_jobs" + inner + " ORDER BY id DESC LIMIT " + arg(typeListWindow) +
		") j WHERE " + strings.Join(where, " AND ") + " ORDER BY id DESC LIMIT " + arg(p.Limit), args
}

// jobListByTypeSQL is a listing by type that may hold waiting jobs, as a
// merge of bounded reads, one per kind of state, each through the index
// that holds its rows:
//   - finished (and RETRY) jobs, one read per type, backwards through
//     docket_jobs_type_id (whose predicate leaves waiting jobs out), at
//     most a page: the read a type filter over all states used to skip,
//     walking the primary key from the newest job until it had a page
//     (the whole table for a type with no recent job: 0.5–0.8 s at
//     1,000,000 jobs);
//   - RUNNING jobs through docket_jobs_lease_expiry: as many as run;
//   - QUEUED jobs through docket_jobs_acquire: the backlog.
//
// The waiting reads are fenced (OFFSET 0) so that their own ORDER BY id
// cannot turn them back into a walk of the primary key; each keeps a
// page, and the ids of the three are merged, newest first. The waiting
// reads cost what the backlog holds, not what the table holds; no index
// entry is added on the hot path.
func jobListByTypeSQL(p *store.JobListParams) (string, []any) {
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var common []string
	if len(p.Queues) > 0 {
		common = append(common, "queue = ANY("+arg(p.Queues)+"::text[])")
	}
	if p.Priority != nil {
		common = append(common, "priority = "+arg(*p.Priority))
	}
	if p.BeforeID != uuid.Nil {
		common = append(common, "id < "+arg(p.BeforeID))
	}
	limit := arg(limitOrNull(p.Limit))
	and := func(where ...string) string { return strings.Join(append(where, common...), " AND ") }
	var finished []string
	wantQueued, wantRunning := len(p.States) == 0, len(p.States) == 0
	for _, st := range p.States {
		switch st {
		case job.StateQueued:
			wantQueued = true
		case job.StateRunning:
			wantRunning = true
		default:
			finished = append(finished, string(st))
		}
	}
	var parts []string
	if len(p.States) == 0 || len(finished) > 0 {
		stateWhere := []string{finishedPredicate}
		if len(finished) > 0 {
			stateWhere = append(stateWhere, "state = ANY("+arg(finished)+"::text[])")
		}
		for _, t := range p.Types {
			parts = append(parts, "(SELECT id FROM docket_jobs WHERE "+and(append([]string{"job_type = " + arg(t)}, stateWhere...)...)+
				" ORDER BY id DESC LIMIT "+limit+")")
		}
	}
	types := arg(p.Types)
	for _, w := range []struct {
		want  bool
		state string
	}{{wantRunning, "RUNNING"}, {wantQueued, "QUEUED"}} {
		if w.want {
			parts = append(parts, "(SELECT id FROM (SELECT id FROM docket_jobs WHERE "+
				and("state = '"+w.state+"'", "job_type = ANY("+types+"::text[])")+" OFFSET 0) w ORDER BY id DESC LIMIT "+limit+")")
		}
	}
	return "WITH ids AS MATERIALIZED (" + strings.Join(parts, " UNION ALL ") + ") SELECT " + jobColumns +
		" FROM docket_jobs WHERE id IN (SELECT id FROM ids) ORDER BY id DESC LIMIT " + limit, args
}

// jobListSQL is JobList's statement and its arguments.
func jobListSQL(p *store.JobListParams) (string, []any) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	finished := len(p.States) > 0 && !listsWaiting(p.States)
	if finished && p.Payload == nil {
		return finishedListSQL(p, arg), args
	}
	switch {
	case len(p.States) == 1:
		// Equality, not ANY: the (state, id) index then yields the ids in
		// order, so a page is read backwards from the newest, no sort.
		where = append(where, "state = "+arg(string(p.States[0])))
	case len(p.States) > 1:
		states := make([]string, len(p.States))
		for i, st := range p.States {
			states[i] = string(st)
		}
		where = append(where, "state = ANY("+arg(states)+"::text[])")
	}
	if finished {
		where = append(where, finishedPredicate)
	}
	where = append(where, listFilters(p, arg)...)
	var sql strings.Builder
	if p.Payload != nil {
		// The window of the newest rows first, then the match in it; the
		// cursor and the limit apply to what matched.
		where = payloadWindow(&sql, where, p.Payload, finished, arg)
	} else {
		sql.WriteString("SELECT " + jobColumns + " FROM docket_jobs")
	}
	if p.BeforeID != uuid.Nil {
		where = append(where, "id < "+arg(p.BeforeID))
	}
	if len(where) > 0 {
		sql.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	sql.WriteString(" ORDER BY id DESC LIMIT " + arg(limitOrNull(p.Limit)))
	return sql.String(), args
}

// listFilters are JobList's filters other than the states and the cursor.
func listFilters(p *store.JobListParams, arg func(any) string) []string {
	var where []string
	if len(p.Types) > 0 {
		where = append(where, "job_type = ANY("+arg(p.Types)+"::text[])")
	}
	if len(p.Queues) > 0 {
		where = append(where, "queue = ANY("+arg(p.Queues)+"::text[])")
	}
	if p.Priority != nil {
		where = append(where, "priority = "+arg(*p.Priority))
	}
	return where
}

// finishedListSQL lists jobs whose states are all finished: the ids first,
// from docket_jobs_state_id alone (it includes queue and job_type, so those
// filters need no heap), then the rows. Read in one statement, the planner
// walks the primary key backwards and filters the heap, on the estimate
// that the states are spread evenly over the ids; they are not (the newest
// jobs are the waiting ones), and a DEAD page behind a backlog of 100,000
// waiting jobs took 0.2–0.8 s (docs/benchmarks.md, "Web pages at 1,000,000
// jobs"). Each state is its own backwards walk of the index, by equality
// (so in id order, no sort) and limited, and several states merge those
// walks: with state = ANY(…) the planner reads every entry of the states and
// sorts, or walks the primary key. A type filter is served the same way:
// there is no index on job_type (docs/benchmarks.md, "Index entries per
// job").
func finishedListSQL(p *store.JobListParams, arg func(any) string) string {
	var states []string
	for _, st := range p.States {
		if !slices.Contains(states, string(st)) {
			states = append(states, string(st))
		}
	}
	filters := listFilters(p, arg)
	if p.BeforeID != uuid.Nil {
		filters = append(filters, "id < "+arg(p.BeforeID))
	}
	limit := arg(limitOrNull(p.Limit))
	walk := func(state string) string {
		where := append([]string{"state = " + arg(state), finishedPredicate}, filters...)
		return "SELECT id FROM docket_jobs WHERE " + strings.Join(where, " AND ") + " ORDER BY id DESC LIMIT " + limit
	}
	var ids string
	if len(states) == 1 {
		ids = walk(states[0])
	} else {
		arms := make([]string, len(states))
		for i, st := range states {
			arms[i] = "(" + walk(st) + ")"
		}
		ids = "SELECT id FROM (" + strings.Join(arms, " UNION ALL ") + ") w ORDER BY id DESC LIMIT " + limit
	}
	return "WITH ids AS MATERIALIZED (" + ids + ") SELECT " + jobColumns +
		" FROM docket_jobs WHERE id IN (SELECT id FROM ids) ORDER BY id DESC"
}

// finishedPredicate is the predicate of the partial indexes
// docket_jobs_state_id, spelled out in listings
// that imply it so that a generic plan can use them as well.
const finishedPredicate = "state NOT IN ('QUEUED', 'RUNNING')"

// listsWaiting reports whether states holds QUEUED or RUNNING.
func listsWaiting(states []job.State) bool {
	for _, st := range states {
		if st == job.StateQueued || st == job.StateRunning {
			return true
		}
	}
	return false
}

// JobCount implements store.Store.
func (s *Store) JobCount(ctx context.Context) ([]*store.JobCount, error) {
	rs, err := s.pool.Query(ctx, `
		SELECT queue, state, count(*) FROM docket_jobs GROUP BY queue, state ORDER BY queue, state`)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	defer rs.Close()
	var out []*store.JobCount
	for rs.Next() {
		var (
			c     store.JobCount
			state string
		)
		if err := rs.Scan(&c.Queue, &state, &c.Count); err != nil {
			return nil, fmt.Errorf("count jobs: %w", err)
		}
		c.State = job.State(state)
		out = append(out, &c)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	return out, nil
}

// attemptListSQL reads the job's finished attempts and, as a last row of
// kind 1, the job itself, so one snapshot answers "does it exist" and "is an
// attempt running". The successful attempt, which has no history row of its
// own (finishSQL), is read from the job row after the others; a SUCCESS
// reached another way (JobTransition) wrote a row, and NOT EXISTS keeps it
// from showing twice.
const attemptListSQL = `
SELECT 0 AS kind, a.id AS seq, a.attempt, a.node, a.started_at, a.finished_at, a.outcome, a.error, ''
FROM docket_job_attempts a WHERE a.job_id = $1
UNION ALL
SELECT 0, 9223372036854775807, j.attempt, coalesce(j.lease_owner, ''),
	coalesce(j.attempted_at, j.finished_at), j.finished_at, 'success', '', ''
FROM docket_jobs j WHERE j.id = $1 AND j.state = 'SUCCESS' AND NOT EXISTS (
	SELECT 1 FROM docket_job_attempts a WHERE a.job_id = $1 AND a.attempt = j.attempt)
UNION ALL
SELECT 1, 0, j.attempt, coalesce(j.lease_owner, ''), j.attempted_at, NULL, '', '', j.state
FROM docket_jobs j WHERE j.id = $1
ORDER BY kind, seq`

// JobAttemptList implements store.Store.
func (s *Store) JobAttemptList(ctx context.Context, id uuid.UUID) ([]*job.Attempt, error) {
	rs, err := s.pool.Query(ctx, attemptListSQL, id)
	if err != nil {
		return nil, fmt.Errorf("list attempts of job %s: %w", id, err)
	}
	defer rs.Close()
	var (
		out   []*job.Attempt
		found bool
	)
	for rs.Next() {
		var (
			kind, seq         int64
			a                 job.Attempt
			started, finished *time.Time
			outcome, jobState string
		)
		if err := rs.Scan(&kind, &seq, &a.Attempt, &a.Node, &started, &finished, &outcome, &a.Error, &jobState); err != nil {
			return nil, fmt.Errorf("list attempts of job %s: %w", id, err)
		}
		a.JobID = id
		a.StartedAt = utcOrZero(started)
		a.FinishedAt = utcOrZero(finished)
		a.Outcome = job.Outcome(outcome)
		if kind == 1 {
			found = true
			if job.State(jobState) != job.StateRunning {
				continue
			}
			a.Outcome = job.OutcomeRunning
		}
		out = append(out, &a)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list attempts of job %s: %w", id, err)
	}
	if !found {
		return nil, fmt.Errorf("list attempts of job %s: %w", id, store.ErrNotFound)
	}
	return out, nil
}

// transitionSQL makes one state change by the state machine. @last_error is
// NULL (keep the column) unless job.SetsLastError says the change replaces
// it: the coalesce must stay the only writer of last_error here, so the
// statement agrees with that function. The job is
// joined a second time as prev for the values the UPDATE overwrites (the
// lease owner of the ending attempt); prev must agree with the guard, so a
// row that changed after the snapshot is refused and the caller re-reads.
var transitionSQL = `
WITH t AS (
	UPDATE docket_jobs j SET
		state = @to::text,
		attempt = CASE WHEN @to::text = 'RUNNING' THEN j.attempt + 1 ELSE j.attempt END,
		attempt_base = CASE WHEN @to::text = 'QUEUED' AND @from::text IN ('DEAD', 'CANCELED')
			THEN j.attempt ELSE j.attempt_base END,
		run_at = CASE WHEN @to::text IN ('QUEUED', 'RETRY') THEN @run_at::timestamptz ELSE j.run_at END,
		sort_at = CASE WHEN @to::text = 'QUEUED'
			THEN @run_at::timestamptz + j.priority * @aging_us::bigint * interval '1 microsecond'
			ELSE j.sort_at END,
		lease_owner = CASE WHEN @to::text = 'RUNNING' THEN @owner::text END,
		lease_expires_at = CASE WHEN @to::text = 'RUNNING' THEN @lease_expires_at::timestamptz END,
		attempted_at = CASE WHEN @to::text = 'RUNNING' THEN @now::timestamptz ELSE j.attempted_at END,
		progress = CASE WHEN @to::text = 'RUNNING' THEN 0 ELSE j.progress END,
		progress_message = CASE WHEN @to::text = 'RUNNING' THEN '' ELSE j.progress_message END,
		cancel_requested = CASE WHEN @to::text IN ('RUNNING', 'QUEUED') THEN false ELSE j.cancel_requested END,
		result = CASE WHEN @to::text = 'SUCCESS' THEN @result::jsonb ELSE j.result END,
		last_error = coalesce(@last_error::text, j.last_error),
		finished_at = CASE WHEN @to::text IN ('SUCCESS', 'DEAD', 'CANCELED') THEN @now::timestamptz END,
		updated_at = @now::timestamptz,
		version = j.version + 1
	FROM docket_jobs prev
	WHERE j.id = @id::uuid AND prev.id = j.id
		AND j.state = @from::text AND prev.state = @from::text
		AND (@from::text <> 'RUNNING' OR (j.attempt = @attempt::integer AND prev.attempt = @attempt::integer))
	RETURNING j.*, prev.lease_owner AS prev_owner
),
attempts AS (
	INSERT INTO docket_job_attempts (job_id, attempt, node, started_at, finished_at, outcome, error)
	SELECT id, attempt, coalesce(prev_owner, ''), coalesce(attempted_at, @now::timestamptz), @now::timestamptz,
		@outcome::text, CASE WHEN state = 'SUCCESS' THEN '' ELSE @error::text END
	FROM t WHERE @from::text = 'RUNNING'
),
outbox AS (` + outboxStateChanged("t", "@from::text", "state", "@now::timestamptz") + `),
notify AS (` + notifyAvailable("t", "@now::timestamptz") + `)
SELECT ` + jobColumns + ` FROM t WHERE ` + notifyGuard("notify")

// JobTransition implements store.Store.
func (s *Store) JobTransition(ctx context.Context, p *store.JobTransitionParams) (*job.Row, error) {
	return transition(ctx, s.pool, s.agingMicros, p)
}

// transition makes one state change through q: checked against the state
// machine first, then one guarded statement; on no match it reads the job
// to tell a refused change from one that raced the statement's snapshot,
// and tries again in the second case.
func transition(ctx context.Context, q conn, agingMicros int64, p *store.JobTransitionParams) (*job.Row, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := dbTime(p.Now)
	runAt := now
	if !p.RunAt.IsZero() {
		runAt = dbTime(p.RunAt)
	}
	outcome := job.OutcomeOf(p.To, p.Outcome)
	var lastError *string
	if job.SetsLastError(p.From, p.To, p.Error) {
		lastError = &p.Error
	}
	var result *string
	if p.To == job.StateSuccess && p.Result != nil {
		r := string(p.Result)
		result = &r
	}
	args := pgx.NamedArgs{
		"id": p.ID, "from": string(p.From), "to": string(p.To), "attempt": p.Attempt,
		"now": now, "run_at": runAt, "aging_us": agingMicros,
		"owner": p.Owner, "lease_expires_at": dbTime(p.LeaseExpiresAt),
		"result": result, "error": p.Error, "last_error": lastError, "outcome": string(outcome),
	}
	for range guardedRetries {
		row, err := scanJob(q.QueryRow(ctx, transitionSQL, args))
		if err == nil {
			return row, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("transition job %s %s -> %s: %w", p.ID, p.From, p.To, err)
		}
		var (
			state   string
			attempt int
		)
		err = q.QueryRow(ctx, `SELECT state, attempt FROM docket_jobs WHERE id = $1`, p.ID).Scan(&state, &attempt)
		if err != nil {
			return nil, fmt.Errorf("transition job %s %s -> %s: %w", p.ID, p.From, p.To, notFound(err))
		}
		if job.State(state) != p.From || (p.From == job.StateRunning && attempt != p.Attempt) {
			return nil, &job.InvalidTransitionError{JobID: p.ID.String(), From: job.State(state), To: p.To}
		}
		// The job is where the caller expects it again: it changed between
		// the statement's snapshot and its lock (READ COMMITTED takes a new
		// snapshot per statement). Try again.
	}
	return nil, fmt.Errorf("transition job %s %s -> %s: lost %d races", p.ID, p.From, p.To, guardedRetries)
}

// cancelSQL cancels a CREATED, QUEUED or RETRY job, or records a cancel
// request on a RUNNING one and wakes its holder.
var cancelSQL = `
WITH c AS (
	UPDATE docket_jobs j SET
		state            = CASE WHEN j.state = 'RUNNING' THEN j.state ELSE 'CANCELED' END,
		cancel_requested = j.cancel_requested OR j.state = 'RUNNING',
		finished_at      = CASE WHEN j.state = 'RUNNING' THEN j.finished_at ELSE $2::timestamptz END,
		updated_at       = $2::timestamptz,
		version          = j.version + 1
	FROM docket_jobs prev
	WHERE j.id = $1 AND prev.id = j.id AND j.state = prev.state
		AND j.state IN ('CREATED', 'QUEUED', 'RETRY', 'RUNNING')
	RETURNING j.*, prev.state AS prev_state
),
outbox AS (` + outboxStateChanged("c WHERE state = 'CANCELED'", "prev_state", "state", "$2::timestamptz") + `),
notify AS (SELECT pg_notify('` + channelJobCancel + `', id::text) FROM c WHERE state = 'RUNNING')
SELECT ` + jobColumns + ` FROM c WHERE ` + notifyGuard("notify")

// JobCancel implements store.Store.
func (s *Store) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobCancelResult, error) {
	return jobCancel(ctx, s.pool, p)
}

// JobCancel implements store.Tx: the statement on the transaction; the
// holder of a RUNNING job is woken when it commits (NOTIFY).
func (t *storeTx) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobCancelResult, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return jobCancel(ctx, t.tx, p)
}

// jobCancel cancels a job through c.
func jobCancel(ctx context.Context, c conn, p *store.JobCancelParams) (*store.JobCancelResult, error) {
	now := dbTime(p.Now)
	for range guardedRetries {
		row, err := scanJob(c.QueryRow(ctx, cancelSQL, p.ID, now))
		if err == nil {
			// The statement changed the job: CANCELED, or a RUNNING one
			// asked to stop.
			return &store.JobCancelResult{Job: row, Canceled: row.State == job.StateCanceled}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("cancel job %s: %w", p.ID, err)
		}
		row, err = jobGet(ctx, c, p.ID)
		if err != nil {
			return nil, fmt.Errorf("cancel job %s: %w", p.ID, err)
		}
		switch row.State {
		case job.StateCanceled:
			return &store.JobCancelResult{Job: row}, nil
		case job.StateSuccess, job.StateDead:
			return nil, &job.InvalidTransitionError{JobID: p.ID.String(), From: row.State, To: job.StateCanceled}
		}
		// Still cancellable: it changed under the statement. Try again.
	}
	return nil, fmt.Errorf("cancel job %s: lost %d races", p.ID, guardedRetries)
}

// retrySQL puts a DEAD or CANCELED job back to QUEUED with a fresh budget
// of attempts (attempt_base moves up to attempt; attempt, the fencing
// token, never goes back).
var retrySQL = `
WITH r AS (
	UPDATE docket_jobs j SET
		state            = 'QUEUED',
		attempt_base     = j.attempt,
		run_at           = $2::timestamptz,
		sort_at          = $2::timestamptz + j.priority * $3::bigint * interval '1 microsecond',
		finished_at      = NULL,
		cancel_requested = false,
		updated_at       = $2::timestamptz,
		version          = j.version + 1
	FROM docket_jobs prev
	WHERE j.id = $1 AND prev.id = j.id AND j.state = prev.state
		AND j.state IN ('DEAD', 'CANCELED')
	RETURNING j.*, prev.state AS prev_state
),
outbox AS (` + outboxStateChanged("r", "prev_state", "state", "$2::timestamptz") + `),
notify AS (` + notifyAvailable("r", "$2::timestamptz") + `)
SELECT ` + jobColumns + ` FROM r WHERE ` + notifyGuard("notify")

// JobRetry implements store.Store.
func (s *Store) JobRetry(ctx context.Context, p *store.JobRetryParams) (*job.Row, error) {
	now := dbTime(p.Now)
	for range guardedRetries {
		row, err := s.queryJob(ctx, retrySQL, p.ID, now, s.agingMicros)
		if err == nil {
			return row, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("retry job %s: %w", p.ID, err)
		}
		row, err = s.JobGet(ctx, p.ID)
		if err != nil {
			return nil, fmt.Errorf("retry job %s: %w", p.ID, err)
		}
		switch row.State {
		case job.StateSuccess:
			return nil, &job.InvalidTransitionError{JobID: p.ID.String(), From: row.State, To: job.StateQueued}
		case job.StateRunning:
			if row.CancelRequested {
				return nil, &job.InvalidTransitionError{JobID: p.ID.String(), From: row.State, To: job.StateQueued,
					Reason: job.ReasonCancelRequested}
			}
			return row, nil
		case job.StateCreated, job.StateQueued, job.StateRetry:
			return row, nil
		}
		// DEAD or CANCELED again: it changed under the statement. Try again.
	}
	return nil, fmt.Errorf("retry job %s: lost %d races", p.ID, guardedRetries)
}

// progressSQL records progress of a running attempt and its outbox row; a
// NULL progress keeps the stored one, and the event carries what is stored.
const progressSQL = `
WITH p AS (
	UPDATE docket_jobs SET
		progress         = COALESCE($3::float8, progress),
		progress_message = $4::text,
		updated_at       = $5::timestamptz,
		version          = version + 1
	WHERE id = $1 AND state = 'RUNNING' AND attempt = $2
	RETURNING id, attempt, progress
),
outbox AS (
	INSERT INTO docket_outbox (event_type, data, created_at)
	SELECT 'job.progress', json_strip_nulls(json_build_object(
		'jobId', id, 'attempt', attempt, 'progress', progress, 'message', NULLIF($4::text, ''))),
		$5::timestamptz
	FROM p
)
SELECT count(*) FROM p`

// JobProgress implements store.Store.
func (s *Store) JobProgress(ctx context.Context, p *store.JobProgressParams) error {
	var n int
	err := s.pool.QueryRow(ctx, progressSQL,
		p.Ref.ID, p.Ref.Attempt, p.Progress, p.MessageText(), dbTime(p.Now)).Scan(&n)
	if err != nil {
		return fmt.Errorf("record progress of job %s: %w", p.Ref.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("record progress of job %s attempt %d: %w", p.Ref.ID, p.Ref.Attempt, store.ErrLeaseLost)
	}
	return nil
}

// heartbeatSQL extends the leases still held under the given attempts,
// reaching each row through its primary key from the unnest (see finishSQL
// for why the arrays are hidden in sub-selects and the state guard is not
// indexable). A heartbeat never shortens a lease: a renewal for less than
// what is left keeps the expiry.
const heartbeatSQL = `
UPDATE docket_jobs j SET
	lease_expires_at = greatest(j.lease_expires_at, $3::timestamptz),
	updated_at       = $4::timestamptz,
	version          = j.version + 1
FROM unnest((SELECT $1::uuid[]), (SELECT $2::integer[])) AS u(id, attempt)
WHERE j.id = u.id AND j.state || '' = 'RUNNING' AND j.attempt = u.attempt
RETURNING j.id, j.attempt, j.cancel_requested, j.lease_expires_at`

// JobHeartbeat implements store.Store.
func (s *Store) JobHeartbeat(ctx context.Context, p *store.JobHeartbeatParams) ([]*store.JobHeartbeatResult, error) {
	out := make([]*store.JobHeartbeatResult, len(p.Jobs))
	if len(p.Jobs) == 0 {
		return out, nil
	}
	// Locked in id order, like JobFinishMany, so the two never deadlock.
	ids := make([][16]byte, len(p.Jobs)) // see JobFinishMany
	attempts := make([]int, len(p.Jobs))
	for i, k := range byID(len(p.Jobs), func(i int) uuid.UUID { return p.Jobs[i].ID }) {
		ids[i], attempts[i] = p.Jobs[k].ID, p.Jobs[k].Attempt
	}
	now := dbTime(p.Now)
	expires := dbTime(now.Add(p.LeaseDuration))
	type renewed struct {
		cancel  bool
		expires time.Time
	}
	extended := map[job.Ref]renewed{}
	err := retryDeadlock(func() error {
		clear(extended)
		rs, err := s.pool.Query(ctx, heartbeatSQL, ids, attempts, expires, now)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var (
				ref job.Ref
				r   renewed
			)
			if err := rs.Scan(&ref.ID, &ref.Attempt, &r.cancel, &r.expires); err != nil {
				return err
			}
			extended[ref] = r
		}
		return rs.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat %d jobs: %w", len(p.Jobs), err)
	}
	for i, ref := range p.Jobs {
		r := &store.JobHeartbeatResult{Ref: ref}
		if e, ok := extended[ref]; ok {
			r.Extended, r.CancelRequested, r.LeaseExpiresAt = true, e.cancel, e.expires.UTC()
		}
		out[i] = r
	}
	return out, nil
}
