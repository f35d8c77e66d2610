package postgres

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// finishSQL ends a batch of attempts in one statement: the fenced UPDATE,
// the attempt history rows and one outbox row. A successful attempt gets no
// history row: the job row holds all of it (attempt, lease_owner,
// attempted_at, finished_at) and never changes again, so JobAttemptList
// reads it from there, which spares the commonest finish a heap and an
// index insert. The UPDATE leaves
// lease_owner as it was, so RETURNING reads the node that held the attempt
// from the new row: the column keeps the last holder once the job has left
// RUNNING (scanJob shows it only while RUNNING), which saves joining every
// job a second time to read the value before the update. %s is an extra
// guard (ExpiredOnly).
// An attempt ending in RETRY while a cancel is requested ends the job
// CANCELED instead, so the request is not lost to the next attempt (SET
// reads the old row, so j.cancel_requested is the request as it stood).
// An attempt interrupted by its worker's shutdown is refunded: attempt_base
// moves up so it does not count against max attempts.
// The last_error CASE is job.SetsLastError for a change from RUNNING written
// in SQL (SUCCESS keeps the column, every other end sets it, even to the empty string): it
// must agree with that function; storetest's LastError group checks both.
//
// Every row must be reached through its primary key from the unnest,
// whatever the statistics say (plans in docs/store-plans.md):
//
//   - Each array is passed as (SELECT $n): the planner then cannot see that
//     the batch holds 2,000 rows, assumes a handful, and loops over them
//     into docket_jobs_pkey. Seeing 2,000, it prefers a hash join over a
//     sequential scan of the whole table.
//
//   - The state guard appends an empty string to state before comparing,
//     so no index can serve it. Statistics make RUNNING look rare, and a
//     plan entering docket_jobs through a state index, then looping over
//     the unnest for each of its rows, costs seconds per batch (a generic
//     plan, which prepared statements switch to after five runs, did
//     exactly that).
//
//   - The arrays are unnested in the select list, where the unnests run
//     in step (ProjectSet) and hand each row on as it is made.
//     unnest(a, b, …) WITH ORDINALITY in FROM is a function scan that
//     first copies every element of every array into a tuplestore of its
//     own, then reads them back: 3.0–4.7 ms of the backend's CPU per
//     2,000-job batch against 1.2–1.7 ms (docs/benchmarks.md, round six).
//     The arrays all have the batch's length, so the rows are the same.
//     The places are unnested from an array too: generate_series in the
//     select list would make the planner expect 1,000 rows (and choose the
//     hash join above); unnest of what it cannot see, ten.
//
// $1 ids, $2 attempts, $3 states, $4 outcomes, $5 results, $6 errors,
// $7 retry run_ats, $8 attempt finished_ats, $9 now.
var finishSQL = `
WITH u AS (
	SELECT unnest((SELECT $1::uuid[])) AS id, unnest((SELECT $2::integer[])) AS attempt,
		unnest((SELECT $3::text[])) AS state, unnest((SELECT $4::text[])) AS outcome,
		unnest((SELECT $5::text[])) AS result, unnest((SELECT $6::text[])) AS error,
		unnest((SELECT $7::timestamptz[])) AS run_at, unnest((SELECT $8::timestamptz[])) AS finished_at,
		unnest(ARRAY(SELECT generate_series(1, cardinality($1::uuid[])))) AS ord
),
finished AS (
	UPDATE docket_jobs j SET
		state            = CASE WHEN u.state = 'RETRY' AND j.cancel_requested THEN 'CANCELED' ELSE u.state END,
		result           = CASE WHEN u.state = 'SUCCESS' THEN u.result::jsonb ELSE j.result END,
		last_error       = CASE WHEN u.state = 'SUCCESS' THEN j.last_error ELSE u.error END, -- = job.SetsLastError
		run_at           = CASE WHEN u.state = 'RETRY' AND NOT j.cancel_requested THEN u.run_at ELSE j.run_at END,
		finished_at      = CASE WHEN u.state = 'RETRY' AND NOT j.cancel_requested THEN NULL ELSE u.finished_at END,
		attempt_base     = CASE WHEN u.outcome = 'interrupted' THEN j.attempt_base + 1 ELSE j.attempt_base END,
		lease_expires_at = NULL,
		updated_at       = $9::timestamptz,
		version          = j.version + 1
	FROM u
	WHERE j.id = u.id AND j.state || '' = 'RUNNING' AND j.attempt = u.attempt%s
	RETURNING j.id, j.job_type, j.queue, j.attempt, j.state, j.lease_owner AS node,
		j.attempted_at, u.outcome, u.error, u.finished_at, u.ord
),
attempts AS (
	INSERT INTO docket_job_attempts (job_id, attempt, node, started_at, finished_at, outcome, error)
	SELECT id, attempt, coalesce(node, ''), coalesce(attempted_at, finished_at), finished_at,
		outcome, CASE WHEN state = 'SUCCESS' THEN '' ELSE error END
	FROM finished
	WHERE NOT (state = 'SUCCESS' AND outcome = 'success')
),
outbox AS (` + outboxStateChanged("finished", "'RUNNING'::text", "state", "$9::timestamptz") + `)
SELECT ord, state FROM finished`

var (
	finishAnySQL     = fmt.Sprintf(finishSQL, "")
	finishExpiredSQL = fmt.Sprintf(finishSQL, "\n\t\tAND j.lease_expires_at < $9::timestamptz")
)

// JobFinishMany implements store.Store: one statement, its own
// transaction, run again when it was a deadlock's victim.
func (s *Store) JobFinishMany(ctx context.Context, p *store.JobFinishManyParams) ([]job.State, error) {
	return jobFinishMany(ctx, p, func(fn func() error) error { return retryDeadlock(fn) }, s.pool)
}

// JobFinishMany implements store.Tx: the statement on the transaction. A
// deadlock aborts the transaction, so it is not run again here; the
// caller's transaction fails.
func (t *storeTx) JobFinishMany(ctx context.Context, p *store.JobFinishManyParams) ([]job.State, error) {
	if t.tx == nil {
		return nil, errTxDone
	}
	return jobFinishMany(ctx, p, func(fn func() error) error { return fn() }, t.tx)
}

// jobFinishMany runs the finish statement on q through run (which may run
// it again).
func jobFinishMany(ctx context.Context, p *store.JobFinishManyParams, run func(func() error) error, q conn) ([]job.State, error) {
	n := len(p.Jobs)
	applied := make([]job.State, n)
	if n == 0 {
		return applied, nil
	}
	now := dbTime(p.Now)
	// Rows are locked in the order of the arrays: sorting by id gives every
	// batch (finish, rescue, heartbeat) the same lock order, so two batches
	// sharing jobs wait for each other instead of deadlocking.
	order := byID(len(p.Jobs), func(i int) uuid.UUID { return p.Jobs[i].ID })
	texts := 0 // the bytes of the four text arrays' elements
	for _, k := range order {
		f := p.Jobs[k]
		if err := f.Validate(); err != nil {
			return nil, fmt.Errorf("finish jobs: %w", err)
		}
		if f.Attempt < math.MinInt32 || f.Attempt > math.MaxInt32 {
			return nil, fmt.Errorf("finish jobs: attempt %d of job %s out of range", f.Attempt, f.ID)
		}
		texts += len(f.State) + len(job.OutcomeOf(f.State, f.Outcome)) + len(f.Error)
		if f.State == job.StateSuccess && f.Result != nil {
			texts += len(f.Result)
		}
	}
	// The arrays in PostgreSQL's binary format, written into one buffer of
	// the size they take (binaryArray). Per element: its length (4 bytes),
	// then an id 16, an attempt 4, a timestamp 8, a text its bytes.
	w := newArrayBuf(8*arrayHeaderSize + n*(8*4+16+4+2*8) + texts)
	w.begin(pgtype.UUIDOID, n)
	for _, k := range order {
		w.uuid(p.Jobs[k].ID)
	}
	ids := w.end()
	w.begin(pgtype.Int4OID, n)
	for _, k := range order {
		w.int4(int32(p.Jobs[k].Attempt))
	}
	attempts := w.end()
	w.begin(pgtype.TextOID, n)
	for _, k := range order {
		w.text(string(p.Jobs[k].State))
	}
	states := w.end()
	w.begin(pgtype.TextOID, n)
	for _, k := range order {
		f := p.Jobs[k]
		w.text(string(job.OutcomeOf(f.State, f.Outcome)))
	}
	outcomes := w.end()
	w.begin(pgtype.TextOID, n)
	for _, k := range order {
		if f := p.Jobs[k]; f.State == job.StateSuccess && f.Result != nil {
			w.bytes(f.Result)
		} else {
			w.null()
		}
	}
	results := w.end()
	w.begin(pgtype.TextOID, n)
	for _, k := range order {
		w.text(p.Jobs[k].ErrorText())
	}
	errs := w.end()
	orNow := func(t time.Time) time.Time { // a zero time means now
		if t.IsZero() {
			return now
		}
		return t
	}
	w.begin(pgtype.TimestamptzOID, n)
	for _, k := range order {
		w.timestamptz(orNow(p.Jobs[k].RunAt))
	}
	runAts := w.end()
	w.begin(pgtype.TimestamptzOID, n)
	for _, k := range order {
		w.timestamptz(orNow(p.Jobs[k].FinishedAt))
	}
	finishedAts := w.end()
	ids.reserve = len(w.b) + 64 // all of them, and now
	query := finishAnySQL
	if p.ExpiredOnly {
		query = finishExpiredSQL
	}
	err := run(func() error {
		clear(applied)
		rs, err := q.Query(ctx, query, ids, attempts, states, outcomes, results, errs, runAts, finishedAts, now)
		if err != nil {
			return err
		}
		defer rs.Close()
		// One pair of destinations for every row, the state read as the
		// driver's bytes and given as one of job.States: no allocation
		// per job (a slice of Scan's arguments per call was one).
		var (
			ord   int
			state pgtype.DriverBytes
		)
		dest := []any{&ord, &state} // Scan's arguments, made once
		for rs.Next() {
			if err := rs.Scan(dest...); err != nil {
				return err
			}
			applied[order[ord-1]] = knownState(state)
		}
		return rs.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("finish %d jobs: %w", n, err)
	}
	return applied, nil
}

// retryDeadlock runs fn again when PostgreSQL aborted it as a deadlock
// victim (abortedByConflict). fn is one statement in its own transaction,
// which the deadlock rolled back whole, so running it again is safe. Batches lock
// their rows in id order, which makes deadlocks rare; a plan that reaches the
// rows in another order can still meet one under load.
func retryDeadlock(fn func() error) error {
	for try := 1; ; try++ {
		err := fn()
		if try < 5 && abortedByConflict(err) {
			continue
		}
		return err
	}
}

// byID returns the indexes 0..n-1 ordered by id(i).
func byID(n int, id func(i int) uuid.UUID) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ia, ib := id(a), id(b)
		return bytes.Compare(ia[:], ib[:])
	})
	return order
}

// knownState is b as one of job.States without a new string, or as a new
// string when it is none of them.
func knownState(b []byte) job.State {
	for _, st := range job.States {
		if string(st) == string(b) {
			return st
		}
	}
	return job.State(b)
}
