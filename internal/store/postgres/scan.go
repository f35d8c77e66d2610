package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// jobColumns is the select list scanned by scanJob, in its order. It reads
// plain column names, so it works on docket_jobs and on any CTE that
// RETURNING docket_jobs.* produced.
const jobColumns = `id, job_type, queue, priority, payload, result, idempotency_key,
	state, attempt, max_attempts, run_at, timeout_ms, lease_owner, lease_expires_at,
	attempted_at, progress, progress_message, cancel_requested, version,
	created_at, updated_at, finished_at, last_error, attempt_base`

// rowScanner is a row of pgx or database/sql.
type rowScanner interface {
	Scan(dest ...any) error
}

// scanJob converts one row of jobColumns, followed by the columns of extra,
// into a job.Row. Its destinations work with both pgx and database/sql (the
// pgx stdlib driver), so rows read through a caller's *sql.Tx convert the
// same way. A loop over many rows uses one jobScanner instead.
func scanJob(r rowScanner, extra ...any) (*job.Row, error) {
	return newJobScanner(extra...).scan(r)
}

// jobScanner holds the scan destinations of one row of jobColumns (and
// extra ones), reused from row to row: a result of n jobs costs one set of
// destinations instead of n (a dozen allocations per job on the hot path,
// where acquisition scans every job it leases).
type jobScanner struct {
	row             job.Row
	payload, result []byte
	// pgtype's nullable values, not pointers: a pointer destination makes
	// pgx allocate the value it points to on every non-null row. They scan
	// from database/sql too (sql.Scanner).
	idempotencyKey, leaseOwner          pgtype.Text
	state                               string
	timeoutMS                           int64
	leaseExpires, attemptedAt, finished pgtype.Timestamptz
	dest                                []any
}

func newJobScanner(extra ...any) *jobScanner {
	s := &jobScanner{}
	s.dest = append([]any{
		&s.row.ID, &s.row.Type, &s.row.Queue, &s.row.Priority, &s.payload, &s.result, &s.idempotencyKey,
		&s.state, &s.row.Attempt, &s.row.MaxAttempts, &s.row.RunAt, &s.timeoutMS, &s.leaseOwner, &s.leaseExpires,
		&s.attemptedAt, &s.row.Progress, &s.row.ProgressMsg, &s.row.CancelRequested, &s.row.Version,
		&s.row.CreatedAt, &s.row.UpdatedAt, &s.finished, &s.row.LastError, &s.row.AttemptBase,
	}, extra...)
	return s
}

// scan reads the next row into a new job.Row (and extra's destinations).
func (s *jobScanner) scan(r rowScanner) (*job.Row, error) {
	s.row = job.Row{}
	s.payload, s.result = nil, nil
	s.idempotencyKey, s.leaseOwner = pgtype.Text{}, pgtype.Text{}
	s.leaseExpires, s.attemptedAt, s.finished = pgtype.Timestamptz{}, pgtype.Timestamptz{}, pgtype.Timestamptz{}
	if err := r.Scan(s.dest...); err != nil {
		return nil, err
	}
	row := new(job.Row)
	*row = s.row
	row.Payload = json.RawMessage(s.payload)
	if s.result != nil {
		row.Result = json.RawMessage(s.result)
	}
	row.IdempotencyKey = s.idempotencyKey.String // "" when NULL
	row.State = job.State(s.state)
	row.Timeout = time.Duration(s.timeoutMS) * time.Millisecond
	if row.State == job.StateRunning {
		// The column keeps the last holder after the attempt ends (the
		// finish statement reads it back from there); a lease exists
		// only while RUNNING.
		row.LeaseOwner = s.leaseOwner.String
	}
	row.RunAt = row.RunAt.UTC()
	row.LeaseExpiresAt = utcOrZeroTS(s.leaseExpires)
	row.AttemptedAt = utcOrZeroTS(s.attemptedAt)
	row.CreatedAt = row.CreatedAt.UTC()
	row.UpdatedAt = row.UpdatedAt.UTC()
	row.FinishedAt = utcOrZeroTS(s.finished)
	return row, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func utcOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

func utcOrZeroTS(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

// dbTime is t as the database keeps it: UTC, microseconds.
func dbTime(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}

// querier runs a query that returns rows: a pool, a pgx.Tx, or a caller's
// *sql.Tx behind sqlQuerier.
type querier interface {
	query(ctx context.Context, sql string, args ...any) (rows, error)
}

// rows is the part of pgx.Rows and *sql.Rows the store uses.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// pgxQuerier adapts a pool, connection or pgx.Tx.
type pgxQuerier struct {
	q interface {
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	}
}

func (p pgxQuerier) query(ctx context.Context, sql string, args ...any) (rows, error) {
	return p.q.Query(ctx, sql, args...)
}

// sqlQuerier adapts a database/sql transaction on the pgx stdlib driver,
// which passes arrays and other pgx-encodable arguments through unchanged.
type sqlQuerier struct{ tx *sql.Tx }

func (s sqlQuerier) query(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := s.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

type sqlRows struct{ *sql.Rows }

// Close closes the rows; a close error also surfaces through Err.
func (r sqlRows) Close() { _ = r.Rows.Close() }

// collectJobs scans every row of jobColumns.
func collectJobs(rs rows) ([]*job.Row, error) {
	defer rs.Close()
	var out []*job.Row
	scanner := newJobScanner()
	for rs.Next() {
		row, err := scanner.scan(rs)
		if err != nil {
			return nil, fmt.Errorf("scan job: %w", err)
		}
		out = append(out, row)
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// queryJobs runs a query returning jobColumns on the pool.
func (s *Store) queryJobs(ctx context.Context, sql string, args ...any) ([]*job.Row, error) {
	rs, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return collectJobs(rs)
}

// queryJob runs a query returning at most one row of jobColumns;
// store.ErrNotFound when it returns none.
func (s *Store) queryJob(ctx context.Context, sql string, args ...any) (*job.Row, error) {
	row, err := scanJob(s.pool.QueryRow(ctx, sql, args...))
	if err != nil {
		return nil, notFound(err)
	}
	return row, nil
}

// scanOutbox converts one docket_outbox row.
func scanOutbox(r rowScanner) (*store.OutboxEvent, error) {
	var (
		ev   store.OutboxEvent
		data []byte
	)
	if err := r.Scan(&ev.ID, &ev.Type, &data, &ev.CreatedAt); err != nil {
		return nil, err
	}
	ev.Data = json.RawMessage(data)
	ev.CreatedAt = ev.CreatedAt.UTC()
	return &ev, nil
}
