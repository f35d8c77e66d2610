package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

const jobByIDSQL = `SELECT ` + jobColumns + ` FROM docket_jobs WHERE id = ?`

// JobGet implements store.Store.
func (s *Store) JobGet(ctx context.Context, id uuid.UUID) (*job.Row, error) {
	return jobGet(ctx, s.reader, id)
}

// JobQueueOf implements store.Store.
func (s *Store) JobQueueOf(ctx context.Context, id uuid.UUID) (string, error) {
	var q string
	if err := s.reader.QueryRowContext(ctx, `SELECT queue FROM docket_jobs WHERE id = ?`, id.String()).Scan(&q); err != nil {
		return "", fmt.Errorf("get queue of job %s: %w", id, notFound(err))
	}
	return q, nil
}

// jobGet reads one job through c.
func jobGet(ctx context.Context, c conn, id uuid.UUID) (*job.Row, error) {
	r, err := scanJob(c.QueryRowContext(ctx, jobByIDSQL, id.String()))
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, notFound(err))
	}
	return r, nil
}

// listsWaiting reports whether states holds QUEUED or RUNNING.
func listsWaiting(states []job.State) bool {
	for _, st := range states {
		if st == job.StateQueued || st == job.StateRunning {
			return true
		}
	}
	return false
}

// JobList implements store.Store.
func (s *Store) JobList(ctx context.Context, p *store.JobListParams) ([]*job.Row, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(p.Types) > 0 && p.Payload == nil && (len(p.States) == 0 || listsWaiting(p.States)) {
		if p.Limit > 0 {
			// A common type fills its page from the newest jobs at once.
			q, args := jobListByTypeWindowSQL(p)
			out, err := s.listJobs(ctx, q, args)
			if err != nil || len(out) == p.Limit {
				return out, err
			}
		}
		q, args := jobListByTypeSQL(p)
		return s.listJobs(ctx, q, args)
	}
	q, args := jobListSQL(p)
	return s.listJobs(ctx, q, args)
}

// listJobs runs one of JobList's statements on the reader.
func (s *Store) listJobs(ctx context.Context, q string, args []any) ([]*job.Row, error) {
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	out, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return out, nil
}

// jobListSQL is JobList's statement and its arguments.
func jobListSQL(p *store.JobListParams) (string, []any) {
	var (
		where []string
		args  []any
	)
	in := func(col string, vals []string) {
		if len(vals) == 0 {
			return
		}
		where = append(where, col+" IN ("+placeholders(len(vals))+")")
		for _, v := range vals {
			args = append(args, v)
		}
	}
	var states []string
	for _, st := range p.States {
		if !slices.Contains(states, string(st)) {
			states = append(states, string(st))
		}
	}
	finished := len(states) > 0 && !listsWaiting(p.States)
	if finished && len(states) > 1 && p.Payload == nil {
		return finishedListSQL(p, states)
	}
	in("state", states)
	if finished {
		// The predicate of the partial index docket_jobs_state_id: SQLite
		// uses a partial index only when the query states its predicate.
		where = append(where, finishedPredicate)
	}
	in("job_type", p.Types)
	in("queue", p.Queues)
	if p.Priority != nil {
		where = append(where, "priority = ?")
		args = append(args, *p.Priority)
	}
	q := `SELECT ` + jobColumns + ` FROM docket_jobs`
	if p.Payload != nil {
		// The window of the newest rows first, then the match in it.
		q, where, args = payloadWindow(where, args, p.Payload)
	}
	if p.BeforeID != uuid.Nil {
		where = append(where, "id < ?")
		args = append(args, p.BeforeID.String())
	}
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit(p.Limit))
	return q, args
}

// finishedPredicate is the predicate of the partial index
// docket_jobs_state_id, spelled out in listings that imply it.
const finishedPredicate = "state NOT IN ('QUEUED', 'RUNNING')"

// finishedListSQL lists jobs in several finished states, all distinct: one
// walk of docket_jobs_state_id (state, id, queue, job_type) a state, by
// equality so in id order, merged (a compound SELECT's ORDER BY), and the
// merge stops at the limit. With state IN (…), SQLite read every entry of
// the states and sorted them. Type and queue filters are read from the
// index's entries before the row.
func finishedListSQL(p *store.JobListParams, states []string) (string, []any) {
	var (
		arms []string
		args []any
	)
	for _, st := range states {
		where := []string{"state = ?", finishedPredicate}
		args = append(args, st)
		if len(p.Types) > 0 {
			where = append(where, "job_type IN ("+placeholders(len(p.Types))+")")
			for _, v := range p.Types {
				args = append(args, v)
			}
		}
		if len(p.Queues) > 0 {
			where = append(where, "queue IN ("+placeholders(len(p.Queues))+")")
			for _, v := range p.Queues {
				args = append(args, v)
			}
		}
		if p.Priority != nil {
			where = append(where, "priority = ?")
			args = append(args, *p.Priority)
		}
		if p.BeforeID != uuid.Nil {
			where = append(where, "id < ?")
			args = append(args, p.BeforeID.String())
		}
		arms = append(arms, `SELECT `+jobColumns+` FROM docket_jobs WHERE `+strings.Join(where, " AND "))
	}
	return strings.Join(arms, " UNION ALL ") + ` ORDER BY id DESC LIMIT ?`, append(args, limit(p.Limit))
}

// typeListWindow is how many of the newest jobs (below the cursor) a
// listing by type over waiting states reads first, as on PostgreSQL: when
// they hold a full page of matches, that page is exact and the merge is
// not needed.
const typeListWindow = 2_000

// jobListByTypeWindowSQL keeps, of the newest typeListWindow jobs below
// the cursor, those p selects, newest first, at most p.Limit.
func jobListByTypeWindowSQL(p *store.JobListParams) (string, []any) {
	var (
		args  []any
		inner string
		where []string
	)
	if p.BeforeID != uuid.Nil {
		inner = " WHERE id < ?"
		args = append(args, p.BeforeID.String())
	}
	args = append(args, typeListWindow)
	in := func(col string, vals []string) {
		if len(vals) == 0 {
			return
		}
		where = append(where, col+" IN ("+placeholders(len(vals))+")")
		for _, v := range vals {
			args = append(args, v)
		}
	}
	in("job_type", p.Types)
	states := make([]string, len(p.States))
	for i, st := range p.States {
		states[i] = string(st)
	}
	in("state", states)
	in("queue", p.Queues)
	if p.Priority != nil {
		where = append(where, "priority = ?")
		args = append(args, *p.Priority)
	}
	return `SELECT ` + jobColumns + ` FROM (SELECT * FROM docket_jobs` + inner + ` ORDER BY id DESC LIMIT ?) WHERE ` +
		strings.Join(where, " AND ") + ` ORDER BY id DESC LIMIT ?`, append(args, p.Limit)
}

// jobListByTypeSQL is a listing by type that may hold waiting jobs (no
// state, or QUEUED or RUNNING among its states) as a merge of bounded
// reads, each through the index that holds its rows, as on PostgreSQL
// (jobListByTypeSQL there): finished and RETRY jobs backwards through
// docket_jobs_type_id, a page per type; RUNNING jobs through
// docket_jobs_lease_expiry; QUEUED jobs through docket_jobs_acquire. One
// statement, one snapshot. INDEXED BY keeps the planner from walking the
// primary key from the newest job instead, which reads the whole table
// for a type with no recent job.
func jobListByTypeSQL(p *store.JobListParams) (string, []any) {
	var (
		common     []string
		commonArgs []any
	)
	if len(p.Queues) > 0 {
		common = append(common, "queue IN ("+placeholders(len(p.Queues))+")")
		for _, q := range p.Queues {
			commonArgs = append(commonArgs, q)
		}
	}
	if p.Priority != nil {
		common = append(common, "priority = ?")
		commonArgs = append(commonArgs, *p.Priority)
	}
	if p.BeforeID != uuid.Nil {
		common = append(common, "id < ?")
		commonArgs = append(commonArgs, p.BeforeID.String())
	}
	var finished []any
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
	var (
		parts []string
		args  []any
	)
	part := func(index string, where []string, whereArgs []any) {
		parts = append(parts, "SELECT id FROM (SELECT id FROM docket_jobs INDEXED BY "+index+" WHERE "+
			strings.Join(append(where, common...), " AND ")+" ORDER BY id DESC LIMIT ?)")
		args = append(append(append(args, whereArgs...), commonArgs...), limit(p.Limit))
	}
	if len(p.States) == 0 || len(finished) > 0 {
		for _, t := range p.Types {
			where := []string{"job_type = ?", "state NOT IN ('QUEUED', 'RUNNING')"}
			whereArgs := []any{t}
			if len(finished) > 0 {
				where = append(where, "state IN ("+placeholders(len(finished))+")")
				whereArgs = append(whereArgs, finished...)
			}
			part("docket_jobs_type_id", where, whereArgs)
		}
	}
	types := make([]any, len(p.Types))
	for i, t := range p.Types {
		types[i] = t
	}
	inTypes := "job_type IN (" + placeholders(len(types)) + ")"
	if wantRunning {
		part("docket_jobs_lease_expiry", []string{"state = 'RUNNING'", inTypes}, types)
	}
	if wantQueued {
		part("docket_jobs_acquire", []string{"state = 'QUEUED'", inTypes}, types)
	}
	return `SELECT ` + jobColumns + ` FROM docket_jobs WHERE id IN (` + strings.Join(parts, " UNION ALL ") +
		`) ORDER BY id DESC LIMIT ?`, append(args, limit(p.Limit))
}

// JobCount implements store.Store.
func (s *Store) JobCount(ctx context.Context) ([]*store.JobCount, error) {
	rows, err := s.reader.QueryContext(ctx,
		`SELECT queue, state, count(*) FROM docket_jobs GROUP BY queue, state ORDER BY queue, state`)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	defer rows.Close()
	var out []*store.JobCount
	for rows.Next() {
		var c store.JobCount
		var state string
		if err := rows.Scan(&c.Queue, &state, &c.Count); err != nil {
			return nil, fmt.Errorf("count jobs: %w", err)
		}
		c.State = job.State(state)
		out = append(out, &c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	return out, nil
}

// attemptListSQL reads a job's recorded attempts in order, then its
// successful attempt, which has no row of its own (JobFinishMany) and is
// read from the job row; a SUCCESS reached another way (JobTransition) wrote
// a row, and NOT EXISTS keeps it from showing twice.
const attemptListSQL = `SELECT id AS seq, attempt, node, started_at, finished_at, outcome, error
FROM docket_job_attempts WHERE job_id = ?1
UNION ALL
SELECT 9223372036854775807, attempt, coalesce(lease_owner, ''), coalesce(attempted_at, finished_at),
	finished_at, 'success', ''
FROM docket_jobs AS j WHERE id = ?1 AND state = 'SUCCESS' AND NOT EXISTS (
	SELECT 1 FROM docket_job_attempts AS a WHERE a.job_id = ?1 AND a.attempt = j.attempt)
ORDER BY seq`

// JobAttemptList implements store.Store: the recorded attempts, then the
// running one synthesized from the job row (attempt rows are written when an
// attempt ends).
func (s *Store) JobAttemptList(ctx context.Context, id uuid.UUID) ([]*job.Attempt, error) {
	tx, err := s.reader.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list attempts of job %s: %w", id, err)
	}
	defer func() { _ = tx.Rollback() }()
	r, err := scanJob(tx.QueryRowContext(ctx, jobByIDSQL, id.String()))
	if err != nil {
		return nil, fmt.Errorf("list attempts of job %s: %w", id, notFound(err))
	}
	rows, err := tx.QueryContext(ctx, attemptListSQL, id.String())
	if err != nil {
		return nil, fmt.Errorf("list attempts of job %s: %w", id, err)
	}
	defer rows.Close()
	var out []*job.Attempt
	for rows.Next() {
		a := job.Attempt{JobID: id}
		var seq, started, finished int64
		var outcome string
		if err := rows.Scan(&seq, &a.Attempt, &a.Node, &started, &finished, &outcome, &a.Error); err != nil {
			return nil, fmt.Errorf("list attempts of job %s: %w", id, err)
		}
		a.StartedAt, a.FinishedAt, a.Outcome = fromMicros(started), fromMicros(finished), job.Outcome(outcome)
		out = append(out, &a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list attempts of job %s: %w", id, err)
	}
	if r.State == job.StateRunning {
		out = append(out, &job.Attempt{
			JobID: id, Attempt: r.Attempt, Node: r.LeaseOwner,
			StartedAt: r.AttemptedAt, Outcome: job.OutcomeRunning,
		})
	}
	return out, nil
}

// JobTransition implements store.Store.
func (s *Store) JobTransition(ctx context.Context, p *store.JobTransitionParams) (*job.Row, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var r *job.Row
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		r, err = s.transition(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.publishAvailable(p.Now, r)
	return r, nil
}

// transition makes the change p describes in tx, with its outbox row:
// Store.JobTransition and the Tx's, which have validated p. It writes
// nothing and returns *job.InvalidTransitionError when the job is not where
// p says.
func (s *Store) transition(ctx context.Context, tx *sql.Tx, p *store.JobTransitionParams) (*job.Row, error) {
	r, err := s.transitionTx(ctx, tx, p)
	if err != nil {
		return nil, err
	}
	if r != nil {
		if err := insertStateChanged(ctx, tx, []job.Transition{r.TransitionFrom(p.From)}, p.Now); err != nil {
			return nil, err
		}
		return r, nil
	}
	var state string
	err = tx.QueryRowContext(ctx, `SELECT state FROM docket_jobs WHERE id = ?`, p.ID.String()).Scan(&state)
	if err != nil {
		return nil, fmt.Errorf("transition job %s: %w", p.ID, notFound(err))
	}
	return nil, &job.InvalidTransitionError{JobID: p.ID.String(), From: job.State(state), To: p.To}
}

// transitionTx makes the change p describes, guarded by state = p.From (and
// attempt = p.Attempt from RUNNING, whose history row it writes). It returns
// the changed row, or nil when the guard matched nothing. The caller has
// checked the transition against the state machine.
func (s *Store) transitionTx(ctx context.Context, tx *sql.Tx, p *store.JobTransitionParams) (*job.Row, error) {
	now := micros(p.Now)
	set := []string{"state = ?", "updated_at = ?", "version = version + 1"}
	args := []any{string(p.To), now}
	clearLease := func() { set = append(set, "lease_owner = NULL", "lease_expires_at = NULL") }
	switch p.To {
	case job.StateQueued:
		runAt := micros(orNow(p.RunAt, p.Now))
		set = append(set, "run_at = ?", "sort_at = ? + priority * ?", "finished_at = NULL", "cancel_requested = 0")
		args = append(args, runAt, runAt, s.agingMicros)
		if p.From == job.StateDead || p.From == job.StateCanceled {
			// A fresh budget of attempts; attempt, the fencing token,
			// never goes back.
			set = append(set, "attempt_base = attempt")
		}
		clearLease()
	case job.StateRunning:
		set = append(set, "attempt = attempt + 1", "lease_owner = ?", "lease_expires_at = ?",
			"attempted_at = ?", "progress = 0", "progress_message = ''", "cancel_requested = 0")
		args = append(args, p.Owner, micros(p.LeaseExpiresAt), now)
	case job.StateRetry:
		set = append(set, "run_at = ?")
		args = append(args, micros(orNow(p.RunAt, p.Now)))
		clearLease()
	case job.StateSuccess:
		set = append(set, "result = coalesce(?, result)", "finished_at = ?")
		args = append(args, nullJSON(p.Result), now)
		clearLease()
	case job.StateDead, job.StateCanceled:
		set = append(set, "finished_at = ?")
		args = append(args, now)
		clearLease()
	default:
		return nil, fmt.Errorf("transition job %s: unknown state %q", p.ID, p.To)
	}
	if job.SetsLastError(p.From, p.To, p.Error) {
		set = append(set, "last_error = ?")
		args = append(args, p.Error)
	}
	where := "id = ? AND state = ?"
	args = append(args, p.ID.String(), string(p.From))
	if p.From == job.StateRunning {
		where += " AND attempt = ?"
		args = append(args, p.Attempt)
		attemptError := p.Error
		if p.To == job.StateSuccess {
			attemptError = "" // a successful attempt has no error (as on PostgreSQL)
		}
		if _, err := tx.ExecContext(ctx, recordAttemptSQL, p.ID.String(), p.Attempt, now,
			string(job.OutcomeOf(p.To, p.Outcome)), attemptError, 0, now); err != nil {
			return nil, fmt.Errorf("record attempt %d of job %s: %w", p.Attempt, p.ID, err)
		}
	}
	q := `UPDATE docket_jobs SET ` + strings.Join(set, ", ") + ` WHERE ` + where + ` RETURNING ` + jobColumns
	r, err := scanJob(tx.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("transition job %s from %s to %s: %w", p.ID, p.From, p.To, err)
	}
	return r, nil
}

// JobCancel implements store.Store.
func (s *Store) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobCancelResult, error) {
	var res *store.JobCancelResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		res, err = s.jobCancel(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	if res.Job.State == job.StateRunning {
		s.hub.Publish(store.TopicJobCancel, p.ID.String())
	}
	return res, nil
}

// JobCancel implements store.Tx; the holder of a RUNNING job is woken
// once the transaction commits.
func (t *storeTx) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobCancelResult, error) {
	var res *store.JobCancelResult
	err := t.savepoint(ctx, func(sqlTx *sql.Tx) error {
		var err error
		res, err = t.s.jobCancel(ctx, sqlTx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	if res.Job.State == job.StateRunning {
		t.cancelRequested = append(t.cancelRequested, p.ID)
	}
	return res, nil
}

// jobCancel cancels a job in tx, which holds the write lock.
func (s *Store) jobCancel(ctx context.Context, tx *sql.Tx, p *store.JobCancelParams) (*store.JobCancelResult, error) {
	cur, err := scanJob(tx.QueryRowContext(ctx, jobByIDSQL, p.ID.String()))
	if err != nil {
		return nil, fmt.Errorf("cancel job %s: %w", p.ID, notFound(err))
	}
	switch cur.State {
	case job.StateCreated, job.StateQueued, job.StateRetry:
		r, err := s.transitionTx(ctx, tx, &store.JobTransitionParams{
			ID: p.ID, From: cur.State, To: job.StateCanceled, Now: p.Now,
		})
		if err != nil {
			return nil, err
		}
		if r == nil { // cannot happen: we hold the write lock
			return nil, fmt.Errorf("cancel job %s: changed concurrently", p.ID)
		}
		if err := insertStateChanged(ctx, tx, []job.Transition{r.TransitionFrom(cur.State)}, p.Now); err != nil {
			return nil, err
		}
		return &store.JobCancelResult{Job: r, Canceled: true}, nil
	case job.StateRunning:
		if cur.CancelRequested {
			return &store.JobCancelResult{Job: cur}, nil
		}
		r, err := scanJob(tx.QueryRowContext(ctx, `UPDATE docket_jobs SET
			cancel_requested = 1, updated_at = ?, version = version + 1
			WHERE id = ? RETURNING `+jobColumns, micros(p.Now), p.ID.String()))
		if err != nil {
			return nil, fmt.Errorf("request cancel of job %s: %w", p.ID, err)
		}
		return &store.JobCancelResult{Job: r}, nil
	case job.StateCanceled:
		return &store.JobCancelResult{Job: cur}, nil
	default:
		return nil, &job.InvalidTransitionError{JobID: p.ID.String(), From: cur.State, To: job.StateCanceled}
	}
}

// JobRetry implements store.Store.
func (s *Store) JobRetry(ctx context.Context, p *store.JobRetryParams) (*job.Row, error) {
	var r *job.Row
	err := s.write(ctx, func(tx *sql.Tx) error {
		cur, err := scanJob(tx.QueryRowContext(ctx, jobByIDSQL, p.ID.String()))
		if err != nil {
			return fmt.Errorf("retry job %s: %w", p.ID, notFound(err))
		}
		switch cur.State {
		case job.StateDead, job.StateCanceled:
			r, err = s.transitionTx(ctx, tx, &store.JobTransitionParams{
				ID: p.ID, From: cur.State, To: job.StateQueued, Now: p.Now,
			})
			if err != nil {
				return err
			}
			if r == nil { // cannot happen: we hold the write lock
				return fmt.Errorf("retry job %s: changed concurrently", p.ID)
			}
			return insertStateChanged(ctx, tx, []job.Transition{r.TransitionFrom(cur.State)}, p.Now)
		case job.StateSuccess:
			return &job.InvalidTransitionError{JobID: p.ID.String(), From: cur.State, To: job.StateQueued}
		case job.StateRunning:
			if cur.CancelRequested {
				return &job.InvalidTransitionError{JobID: p.ID.String(), From: cur.State, To: job.StateQueued,
					Reason: job.ReasonCancelRequested}
			}
			r = cur
			return nil
		default:
			r = cur
			return nil
		}
	})
	if err != nil {
		return nil, err
	}
	s.publishAvailable(p.Now, r)
	return r, nil
}
