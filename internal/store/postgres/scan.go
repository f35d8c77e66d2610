package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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
// same way.
func scanJob(r rowScanner, extra ...any) (*job.Row, error) {
	var (
		row                                 job.Row
		payload, result                     []byte
		idempotencyKey, leaseOwner          *string
		state                               string
		timeoutMS                           int64
		leaseExpires, attemptedAt, finished *time.Time
	)
	dest := []any{
		&row.ID, &row.Type, &row.Queue, &row.Priority, &payload, &result, &idempotencyKey,
		&state, &row.Attempt, &row.MaxAttempts, &row.RunAt, &timeoutMS, &leaseOwner, &leaseExpires,
		&attemptedAt, &row.Progress, &row.ProgressMsg, &row.CancelRequested, &row.Version,
		&row.CreatedAt, &row.UpdatedAt, &finished, &row.LastError, &row.AttemptBase,
	}
	err := r.Scan(append(dest, extra...)...)
	if err != nil {
		return nil, err
	}
	row.Payload = json.RawMessage(payload)
	if result != nil {
		row.Result = json.RawMessage(result)
	}
	row.IdempotencyKey = deref(idempotencyKey)
	row.State = job.State(state)
	row.Timeout = time.Duration(timeoutMS) * time.Millisecond
	if row.State == job.StateRunning {
		// The column keeps the last holder after the attempt ends (the
		// finish statement reads it back from there); a lease exists
		// only while RUNNING.
		row.LeaseOwner = deref(leaseOwner)
	}
	row.RunAt = row.RunAt.UTC()
	row.LeaseExpiresAt = utcOrZero(leaseExpires)
	row.AttemptedAt = utcOrZero(attemptedAt)
	row.CreatedAt = row.CreatedAt.UTC()
	row.UpdatedAt = row.UpdatedAt.UTC()
	row.FinishedAt = utcOrZero(finished)
	return &row, nil
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
	for rs.Next() {
		row, err := scanJob(rs)
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
