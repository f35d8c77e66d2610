package sqlite

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// anyDueSQL answers, on a reader, whether acquiring could find anything, so
// that polling an empty queue never takes the write lock.
const anyDueSQL = `SELECT EXISTS (
	SELECT 1 FROM docket_jobs WHERE state = 'QUEUED' AND queue = ?1 AND run_at <= ?2)
	AND NOT EXISTS (SELECT 1 FROM docket_queues WHERE name = ?1 AND paused = 1)`

// acquireSQL leases due QUEUED jobs of a queue in sort order, unless the
// queue is paused. The write transaction holds SQLite's write lock, so no
// other acquirer can see these rows QUEUED: SQLite's "SKIP LOCKED". The
// index entries carry the rowid, so each row is updated without a second
// search by id.
const acquireSQL = `UPDATE docket_jobs SET
	state = 'RUNNING', attempt = attempt + 1, lease_owner = ?1, lease_expires_at = ?2,
	attempted_at = ?3, progress = 0, progress_message = '', cancel_requested = 0,
	updated_at = ?3, version = version + 1
WHERE rowid IN (
	SELECT rowid FROM docket_jobs INDEXED BY docket_jobs_acquire
	WHERE state = 'QUEUED' AND queue = ?4 AND run_at <= ?3
		AND NOT EXISTS (SELECT 1 FROM docket_queues WHERE name = ?4 AND paused = 1)
	ORDER BY sort_at, id
	LIMIT ?5)
RETURNING ` + acquiredColumns

// JobAcquire implements store.Store.
func (s *Store) JobAcquire(ctx context.Context, p *store.JobAcquireParams) ([]*job.Row, error) {
	if p.Max <= 0 {
		return nil, nil
	}
	now := micros(p.Now)
	var due bool
	if err := s.reader.QueryRowContext(ctx, anyDueSQL, p.Queue, now).Scan(&due); err != nil {
		return nil, fmt.Errorf("check queue %q for due jobs: %w", p.Queue, err)
	}
	if !due {
		return nil, nil
	}
	type acquired struct {
		row    *job.Row
		sortAt int64
	}
	var got []acquired
	err := s.write(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, acquireSQL,
			p.Owner, micros(p.Now.Add(p.LeaseDuration)), now, p.Queue, p.Max)
		if err != nil {
			return fmt.Errorf("acquire jobs from queue %q: %w", p.Queue, err)
		}
		defer rows.Close()
		lease := leaseOf(p.Owner, micros(p.Now.Add(p.LeaseDuration)), now)
		scanner := newAcquiredScanner(&lease, s.hints.put)
		got = make([]acquired, 0, min(p.Max, 4096)) // bounded: Max is the caller's
		for rows.Next() {
			var a acquired
			if a.row, a.sortAt, err = scanner.scan(rows); err != nil {
				return fmt.Errorf("acquire jobs from queue %q: %w", p.Queue, err)
			}
			got = append(got, a)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("acquire jobs from queue %q: %w", p.Queue, err)
		}
		if len(got) == 0 {
			return nil
		}
		// RETURNING gives no order: restore the acquisition order.
		slices.SortFunc(got, func(a, b acquired) int {
			if c := cmp.Compare(a.sortAt, b.sortAt); c != 0 {
				return c
			}
			return bytes.Compare(a.row.ID[:], b.row.ID[:])
		})
		ts := make([]job.Transition, len(got))
		for i, a := range got {
			ts[i] = a.row.TransitionFrom(job.StateQueued)
		}
		return insertStateChanged(ctx, tx, ts, p.Now)
	})
	if err != nil {
		return nil, err
	}
	out := make([]*job.Row, len(got))
	for i, a := range got {
		out[i] = a.row
	}
	return out, nil
}

// acquiredColumns is what acquireSQL returns: the columns it does not set
// to values known beforehand, then sort_at and the rowid.
const acquiredColumns = `id, job_type, queue, priority, payload, result, idempotency_key,
	attempt, max_attempts, run_at, timeout_ms, version, created_at, finished_at, last_error,
	attempt_base, sort_at, rowid`

// leaseOf is the part of an acquired row that acquireSQL sets to known
// values, at the storage precision.
func leaseOf(owner string, expiresAt, now int64) job.Row {
	return job.Row{
		State: job.StateRunning, LeaseOwner: owner, LeaseExpiresAt: fromMicros(expiresAt),
		AttemptedAt: fromMicros(now), UpdatedAt: fromMicros(now),
	}
}

// acquiredScanner reads rows of acquiredColumns into copies of lease (what
// scanJob would read of the whole row), with one set of scan destinations
// for every row of a batch instead of a set per row; it gives each job's
// rowid to hint.
type acquiredScanner struct {
	lease         *job.Row
	hint          func(uuid.UUID, int64)
	r             job.Row
	f             jobFields
	sortAt, rowid int64
	dest          []any
}

func newAcquiredScanner(lease *job.Row, hint func(uuid.UUID, int64)) *acquiredScanner {
	s := &acquiredScanner{lease: lease, hint: hint}
	s.dest = []any{&s.f.id, &s.r.Type, &s.r.Queue, &s.r.Priority, &s.f.payload, &s.f.result, &s.f.key,
		&s.r.Attempt, &s.r.MaxAttempts, &s.f.runAt, &s.f.timeoutMS, &s.r.Version, &s.f.createdAt, &s.f.finishedAt, &s.r.LastError,
		&s.r.AttemptBase, &s.sortAt, &s.rowid}
	return s
}

// scan reads the next row into a new job.Row and returns it with its
// sort_at.
func (s *acquiredScanner) scan(rows *sql.Rows) (*job.Row, int64, error) {
	s.r, s.f = *s.lease, jobFields{}
	if err := rows.Scan(s.dest...); err != nil {
		return nil, 0, err
	}
	r := new(job.Row)
	*r = s.r
	if err := s.f.into(r); err != nil {
		return nil, 0, err
	}
	s.hint(r.ID, s.rowid)
	return r, s.sortAt, nil
}
