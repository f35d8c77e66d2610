package sqlite

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// jobColumns is the column list every job query selects (or returns), in the
// order scanJob reads it.
const jobColumns = `id, job_type, queue, priority, payload, result, idempotency_key, state,
	attempt, max_attempts, run_at, timeout_ms, lease_owner, lease_expires_at, attempted_at,
	progress, progress_message, cancel_requested, version, created_at, updated_at,
	finished_at, last_error, attempt_base`

// scanner is *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// scanJob converts one row of jobColumns (plus extra trailing destinations)
// into a job.Row. It and acquiredScanner are the only places that know the
// column encodings (jobFields the ones they share).
func scanJob(sc scanner, extra ...any) (*job.Row, error) {
	var (
		r                           job.Row
		f                           jobFields
		state                       string
		leaseOwner                  sql.NullString
		updatedAt                   int64
		leaseExpiresAt, attemptedAt sql.NullInt64
		cancelRequested             int64
	)
	dest := []any{
		&f.id, &r.Type, &r.Queue, &r.Priority, &f.payload, &f.result, &f.key, &state,
		&r.Attempt, &r.MaxAttempts, &f.runAt, &f.timeoutMS, &leaseOwner, &leaseExpiresAt, &attemptedAt,
		&r.Progress, &r.ProgressMsg, &cancelRequested, &r.Version, &f.createdAt, &updatedAt,
		&f.finishedAt, &r.LastError, &r.AttemptBase,
	}
	if err := sc.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	if err := f.into(&r); err != nil {
		return nil, err
	}
	r.State = job.State(state)
	if r.State == job.StateRunning {
		// The column keeps the last holder after the attempt ends (a
		// successful attempt is listed from it); a lease exists only
		// while RUNNING.
		r.LeaseOwner = leaseOwner.String
	}
	r.LeaseExpiresAt = fromNullMicros(leaseExpiresAt)
	r.AttemptedAt = fromNullMicros(attemptedAt)
	r.CancelRequested = cancelRequested != 0
	r.UpdatedAt = fromMicros(updatedAt)
	return &r, nil
}

// jobFields holds, as stored, the columns every read of a job converts
// (acquisition's shorter RETURNING list too), until into converts them.
type jobFields struct {
	id                          string
	payload, result             []byte
	key                         sql.NullString
	runAt, createdAt, timeoutMS int64
	finishedAt                  sql.NullInt64
}

func (f *jobFields) into(r *job.Row) error {
	var err error
	if r.ID, err = uuid.Parse(f.id); err != nil {
		return fmt.Errorf("job id %q: %w", f.id, err)
	}
	r.Payload = json.RawMessage(f.payload)
	if f.result != nil {
		r.Result = json.RawMessage(f.result)
	}
	r.IdempotencyKey = f.key.String
	r.RunAt = fromMicros(f.runAt)
	r.Timeout = time.Duration(f.timeoutMS) * time.Millisecond
	r.CreatedAt = fromMicros(f.createdAt)
	r.FinishedAt = fromNullMicros(f.finishedAt)
	return nil
}

// insertedRow is the row that inserting j at now stores: what scanJob would
// read back, down to the storage precision (microseconds; timeout in ms).
func (s *Store) insertedRow(j *store.JobInsertParams, now time.Time) *job.Row {
	queue := j.Queue
	if queue == "" {
		queue = j.Type
	}
	state := j.State
	if state == "" {
		state = job.StateQueued
	}
	at := fromMicros(micros(now))
	return &job.Row{
		ID:             j.ID,
		Type:           j.Type,
		Queue:          queue,
		Priority:       j.Priority,
		Payload:        slices.Clone(j.Payload),
		IdempotencyKey: j.IdempotencyKey,
		State:          state,
		MaxAttempts:    j.MaxAttempts,
		RunAt:          fromMicros(micros(orNow(j.RunAt, now))),
		Timeout:        time.Duration(j.Timeout.Milliseconds()) * time.Millisecond,
		Version:        1,
		CreatedAt:      at,
		UpdatedAt:      at,
	}
}

// insertArgs writes the values of insertColumns for r into dst
// (insertColumnCount of them). prev, when not nil, holds the previous job's:
// a value equal to its counterpart there is that boxed value again, so the
// fields a batch's jobs share (type, queue, state, times) are boxed once
// per batch instead of once per job.
func insertArgs(dst, prev []any, r *job.Row, agingMicros int64) {
	runAt := micros(r.RunAt)
	dst[0] = r.ID.String()
	dst[1] = reuseArg(prev, 1, r.Type)
	dst[2] = reuseArg(prev, 2, r.Queue)
	dst[3] = r.Priority
	dst[4] = string(r.Payload)
	dst[5] = nullString(r.IdempotencyKey)
	dst[6] = reuseArg(prev, 6, string(r.State))
	dst[7] = r.MaxAttempts
	dst[8] = reuseArg(prev, 8, runAt)
	dst[9] = reuseArg(prev, 9, runAt+int64(r.Priority)*agingMicros)
	dst[10] = reuseArg(prev, 10, r.Timeout.Milliseconds())
	dst[11] = reuseArg(prev, 11, micros(r.CreatedAt))
	dst[12] = reuseArg(prev, 12, micros(r.UpdatedAt))
}

// reuseArg is prev[k] when it holds v, else v boxed anew.
func reuseArg[T comparable](prev []any, k int, v T) any {
	if prev != nil {
		if p, ok := prev[k].(T); ok && p == v {
			return prev[k]
		}
	}
	return v
}

// scanJobs reads every row of rows with scanJob and closes rows.
func scanJobs(rows *sql.Rows) ([]*job.Row, error) {
	defer rows.Close()
	var out []*job.Row
	for rows.Next() {
		r, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// micros encodes an instant as unix microseconds.
func micros(t time.Time) int64 { return t.UnixMicro() }

// fromMicros decodes unix microseconds as a UTC instant.
func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

// fromNullMicros decodes unix microseconds; NULL is the zero time.
func fromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// nullString encodes "" as NULL.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nullJSON encodes JSON as TEXT, nil as NULL.
func nullJSON(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// boolInt encodes a boolean as 0/1.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// orNow returns t, or now when t is zero.
func orNow(t, now time.Time) time.Time {
	if t.IsZero() {
		return now
	}
	return t
}

// limit turns a Max/Limit parameter into SQLite's LIMIT: non-positive means
// no limit (-1).
func limit(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// notFound translates sql.ErrNoRows into store.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

// placeholders returns "?, ?, …" with n marks.
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}
