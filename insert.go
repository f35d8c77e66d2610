package docket

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/engine"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// JobArgs is the payload of a job; its JobType names the handler that runs
// it. It is encoded with encoding/json.
type JobArgs interface {
	JobType() string
}

// RawArgs is a job given as a type name and JSON payload (as the HTTP API
// receives them).
type RawArgs struct {
	Type    string
	Payload json.RawMessage
}

// JobType implements JobArgs.
func (r RawArgs) JobType() string { return r.Type }

// MarshalJSON returns the payload as is.
func (r RawArgs) MarshalJSON() ([]byte, error) {
	if len(r.Payload) == 0 {
		return []byte("{}"), nil
	}
	return r.Payload, nil
}

// Limits of InsertOpts.
const (
	PriorityMin     = 0
	PriorityMax     = 9
	PriorityDefault = 1
)

// InsertOpts are per-job options; the zero value takes every default.
type InsertOpts struct {
	// Queue; default the job type.
	Queue string
	// Priority 0 (runs first) .. 9; default 1. Ages with waiting time.
	Priority *int
	// MaxAttempts; default 25.
	MaxAttempts int
	// RunAt: not run before this instant (years 1 to 9999); default now.
	RunAt time.Time
	// Timeout of each attempt, at least 1 ms, kept to the millisecond;
	// default the worker's JobTimeout (5 min).
	Timeout time.Duration
	// IdempotencyKey: inserting again with the same key returns the
	// existing job instead of a new one. Unique in the database.
	IdempotencyKey string
}

// InsertParams is one job of InsertMany.
type InsertParams struct {
	Args JobArgs
	Opts *InsertOpts
}

// InsertResult is the job inserted (or, for a repeated idempotency key, the
// job that already had the key: Duplicate is true).
type InsertResult struct {
	Job       *JobRow
	Duplicate bool
}

// Insert records one job.
func (c *Client) Insert(ctx context.Context, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	res, err := c.InsertMany(ctx, []InsertParams{{Args: args, Opts: opts}})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// InsertMany records many jobs in one transaction (COPY on PostgreSQL).
func (c *Client) InsertMany(ctx context.Context, jobs []InsertParams) ([]*InsertResult, error) {
	return c.insert(ctx, nil, jobs)
}

// InsertTx records one job inside the caller's PostgreSQL transaction: it
// exists if and only if the transaction commits.
func (c *Client) InsertTx(ctx context.Context, tx pgx.Tx, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	return c.insertOneTx(ctx, tx, args, opts)
}

// InsertManyTx is InsertMany inside the caller's PostgreSQL transaction
// (pgx.Tx); InsertManySQLTx takes a *sql.Tx.
func (c *Client) InsertManyTx(ctx context.Context, tx pgx.Tx, jobs []InsertParams) ([]*InsertResult, error) {
	if tx == nil {
		return nil, errors.New("insert in transaction: tx is nil")
	}
	return c.insert(ctx, tx, jobs)
}

// InsertSQLTx records one job inside the caller's database/sql transaction
// (PostgreSQL through the pgx stdlib driver, or SQLite): it exists if and
// only if the transaction commits. On SQLite, call NotifyInserted after
// the commit, or the workers start it only at their next poll; and begin
// the transaction with the write lock (modernc DSN
// "?_pragma=busy_timeout(10000)&_txlock=immediate", as in the example of
// InsertManySQLTx): a transaction that reads before it writes is refused
// with SQLITE_BUSY_SNAPSHOT at its first write if another connection,
// docket's included, wrote in between.
func (c *Client) InsertSQLTx(ctx context.Context, tx *sql.Tx, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	if tx == nil { // not a nil any: insertOneTx would not see it
		return nil, errors.New("insert in transaction: tx is nil")
	}
	return c.insertOneTx(ctx, tx, args, opts)
}

// InsertManySQLTx is InsertMany inside the caller's database/sql
// transaction (PostgreSQL through the pgx stdlib driver, or SQLite): the
// jobs exist if and only if the transaction commits, all of them or none.
// On SQLite, call NotifyInserted after the commit, or the workers start
// them only at their next poll.
func (c *Client) InsertManySQLTx(ctx context.Context, tx *sql.Tx, jobs []InsertParams) ([]*InsertResult, error) {
	if tx == nil { // not a nil any: insert would write outside a transaction
		return nil, errors.New("insert in transaction: tx is nil")
	}
	return c.insert(ctx, tx, jobs)
}

// NotifyInserted wakes the workers of this Client (and its Lease calls
// waiting for work) for the jobs of results, inserted in the caller's
// transaction (InsertTx, InsertManyTx, InsertSQLTx, InsertManySQLTx)
// once it has committed. On SQLite it is needed: docket cannot see the
// caller's commit, and without it the jobs wait for the workers' next
// poll (WorkerConfig.PollInterval, 1 s by default). On PostgreSQL the
// commit wakes every process's workers (NOTIFY); NotifyInserted only
// saves this process that round trip. Workers of other Clients and
// other processes are not woken by it: on SQLite they poll. Call it after
// the commit, never before (a worker woken then finds nothing), with the
// results as returned; results of jobs not QUEUED or not yet due wake
// nothing.
func (c *Client) NotifyInserted(results ...*InsertResult) {
	rows := make([]*job.Row, 0, len(results))
	for _, r := range results {
		if r != nil {
			rows = append(rows, r.Job)
		}
	}
	c.store.JobNotifyInserted(&store.JobNotifyInsertedParams{Jobs: rows, Now: c.cfg.Now()})
}

func (c *Client) insertOneTx(ctx context.Context, tx any, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	if tx == nil {
		return nil, errors.New("insert in transaction: tx is nil")
	}
	res, err := c.insert(ctx, tx, []InsertParams{{Args: args, Opts: opts}})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

func (c *Client) insert(ctx context.Context, tx any, jobs []InsertParams) ([]*InsertResult, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	now := c.cfg.Now()
	params := &store.JobInsertManyParams{Jobs: make([]*store.JobInsertParams, len(jobs)), Now: now}
	// The jobs' parameters and ids are made jobSlab at a time as the jobs
	// are prepared: one allocation and one newJobIDs for the whole batch,
	// before the store could start, held a streamed batch of 5,000 back by
	// 1.5 ms (760 kB to zero and fault in).
	var (
		slab   []store.JobInsertParams
		ids    [jobSlab]uuid.UUID
		slabAt = -1
	)
	prepare := func(i int) error {
		if k := i / jobSlab; k != slabAt {
			slab = make([]store.JobInsertParams, min(jobSlab, len(jobs)-k*jobSlab))
			if err := newJobIDs(ids[:len(slab)]); err != nil {
				return fmt.Errorf("make job ids: %w", err)
			}
			slabAt = k
		}
		dst := &slab[i%jobSlab]
		params.Jobs[i] = dst
		if err := insertParams(dst, ids[i%jobSlab], jobs[i].Args, jobs[i].Opts, now); err != nil {
			if len(jobs) > 1 {
				return fmt.Errorf("job %d: %w", i, err)
			}
			return err
		}
		return nil
	}
	var res []*store.JobInsertResult
	var err error
	stream := tx == nil && len(jobs) > 1 && !hasIdempotencyKey(jobs)
	if !stream {
		for i := range jobs {
			if err := prepare(i); err != nil {
				return nil, err
			}
		}
	}
	switch {
	case tx != nil:
		res, err = c.store.JobInsertManyTx(ctx, tx, params)
	case !stream:
		res, err = c.store.JobInsertMany(ctx, params)
	default:
		// The store prepares the jobs as it sends them (PostgreSQL streams
		// a large batch with COPY): encoding the payloads and making the
		// ids overlaps the database's work on the jobs sent before.
		var (
			prepErr  error
			prepared int
			panicked any // a payload's MarshalJSON panicked: raised again here, on the caller's goroutine
		)
		params.Prepare = func(i int) (err error) {
			defer func() {
				if r := recover(); r != nil {
					panicked = r
					err = errPrepPanicked
				}
			}()
			prepared = i + 1
			prepErr = prepare(i)
			return prepErr
		}
		res, err = c.store.JobInsertMany(ctx, params)
		if panicked != nil {
			panic(panicked)
		}
		if err != nil {
			if prepErr != nil {
				return nil, prepErr
			}
			// An invalid job the store did not reach is reported as if the
			// batch had been validated first.
			for i := prepared; i < len(jobs); i++ {
				if err := prepare(i); err != nil {
					return nil, err
				}
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", len(jobs), err)
	}
	out := make([]*InsertResult, len(res))
	results := make([]InsertResult, len(res))
	for i, r := range res {
		results[i] = InsertResult{Job: r.Job, Duplicate: r.Duplicate}
		out[i] = &results[i]
	}
	return out, nil
}

// jobSlab is how many jobs' parameters and ids insert makes at a time.
const jobSlab = 256

// errPrepPanicked abandons a streamed insert whose preparation panicked.
var errPrepPanicked = errors.New("preparing a job panicked")

// hasIdempotencyKey reports whether a job of the batch sets one.
func hasIdempotencyKey(jobs []InsertParams) bool {
	for _, j := range jobs {
		if j.Opts != nil && j.Opts.IdempotencyKey != "" {
			return true
		}
	}
	return false
}

// ValidationError names the option or field that is invalid.
type ValidationError struct {
	Field   string
	Message string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Message }

// fieldErrors gives the store's list of invalid parameters (a
// *crowd.ValidationError, e.g. a filter that is not text) the form the
// job, key, workflow and event calls document: errors.Join of one
// *ValidationError per field. Any other error is returned as it is.
func fieldErrors(err error) error {
	var ve *crowd.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	errs := make([]error, len(ve.Errors))
	for i, fe := range ve.Errors {
		errs[i] = &ValidationError{Field: fe.Field, Message: fe.Message}
	}
	return errors.Join(errs...)
}

// insertParams checks one job and fills dst with what the store inserts.
func insertParams(dst *store.JobInsertParams, id uuid.UUID, args JobArgs, opts *InsertOpts, now time.Time) error {
	if args == nil {
		return &ValidationError{Field: "args", Message: "is required"}
	}
	if opts == nil {
		opts = &InsertOpts{}
	}
	// Every invalid field is reported (errors.Join of *ValidationError).
	var errs []error
	typ := args.JobType()
	typeErr := validName("jobType", typ)
	if typeErr != nil {
		errs = append(errs, typeErr)
	}
	payload, err := json.Marshal(args)
	if err != nil {
		errs = append(errs, &ValidationError{Field: "payload", Message: "cannot be encoded as JSON: " + err.Error()})
	} else if msg := store.JSONUnstorable(payload); msg != "" {
		errs = append(errs, &ValidationError{Field: "payload", Message: msg})
	}
	queue := opts.Queue
	if queue == "" {
		queue = typ
	}
	if opts.Queue != "" || typeErr == nil { // a default queue is the type, named once
		if err := validName("queue", queue); err != nil {
			errs = append(errs, err)
		}
	}
	priority := PriorityDefault
	if opts.Priority != nil {
		priority = *opts.Priority
	}
	if priority < PriorityMin || priority > PriorityMax {
		errs = append(errs, &ValidationError{Field: "priority", Message: fmt.Sprintf("must be between %d and %d", PriorityMin, PriorityMax)})
	}
	maxAttempts := opts.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = engine.MaxAttemptsDefault
	}
	if maxAttempts < 1 || maxAttempts > 1000 {
		errs = append(errs, &ValidationError{Field: "maxAttempts", Message: "must be between 1 and 1000"})
	}
	if y := opts.RunAt.UTC().Year(); y < 1 || y > 9999 { // what both backends store (and RFC 3339 writes)
		errs = append(errs, &ValidationError{Field: "runAt", Message: "must be within the years 1 to 9999 (UTC)"})
	}
	switch {
	case opts.Timeout < 0:
		errs = append(errs, &ValidationError{Field: "timeout", Message: "must not be negative"})
	case opts.Timeout > 0 && opts.Timeout < time.Millisecond: // stored in milliseconds: it would read as 0, the worker's
		errs = append(errs, &ValidationError{Field: "timeout", Message: "must be at least 1ms (or 0: the worker's)"})
	}
	if len(opts.IdempotencyKey) > 255 {
		errs = append(errs, &ValidationError{Field: "idempotencyKey", Message: "must be at most 255 bytes"})
	} else if !store.TextStorable(opts.IdempotencyKey) {
		errs = append(errs, &ValidationError{Field: "idempotencyKey", Message: store.TextMessage})
	}
	if len(errs) == 1 {
		return errs[0]
	}
	if len(errs) > 1 {
		return errors.Join(errs...)
	}
	runAt := opts.RunAt
	if runAt.IsZero() {
		runAt = now
	}
	*dst = store.JobInsertParams{
		ID: id, Type: typ, Queue: queue, Priority: priority, Payload: payload,
		IdempotencyKey: opts.IdempotencyKey, State: job.StateQueued,
		MaxAttempts: maxAttempts, RunAt: runAt, Timeout: opts.Timeout,
	}
	return nil
}

// validName checks a job type or queue name: 1..128 bytes of letters,
// digits and . _ - : /
func validName(field, s string) error {
	if s == "" {
		return &ValidationError{Field: field, Message: "is required"}
	}
	if len(s) > 128 {
		return &ValidationError{Field: field, Message: "must be at most 128 bytes"}
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '.' || r == '_' || r == '-' || r == ':' || r == '/'
		if !ok {
			return &ValidationError{Field: field, Message: fmt.Sprintf("has invalid character %q (allowed: ASCII letters, digits, . _ - : /)", r)}
		}
	}
	return nil
}
