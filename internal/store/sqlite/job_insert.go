package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// insertJobSQL inserts one job; a taken idempotency key inserts nothing and
// returns no row.
const insertJobSQL = `INSERT INTO docket_jobs (
	id, job_type, queue, priority, payload, idempotency_key, state, max_attempts,
	run_at, sort_at, timeout_ms, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING ` + jobColumns

const jobByKeySQL = `SELECT ` + jobColumns + ` FROM docket_jobs WHERE idempotency_key = ?`

// insertStmts are the statements of one insert batch, usable in its tx.
type insertStmts struct {
	insert, byKey *sql.Stmt
}

// JobInsertMany implements store.Store. Writes are serialised (one writer
// connection, BEGIN IMMEDIATE across processes), so the idempotency check
// cannot race: the first insert of a key wins and every later one, in this
// batch or another, reads the winner.
func (s *Store) JobInsertMany(ctx context.Context, p *store.JobInsertManyParams) ([]*store.JobInsertResult, error) {
	if err := validateInsert(p); err != nil {
		return nil, err
	}
	insert, err := s.prepare(ctx, insertJobSQL)
	if err != nil {
		return nil, fmt.Errorf("prepare job insert: %w", err)
	}
	byKey, err := s.prepare(ctx, jobByKeySQL)
	if err != nil {
		return nil, fmt.Errorf("prepare job lookup by idempotency key: %w", err)
	}
	var out []*store.JobInsertResult
	err = s.write(ctx, func(tx *sql.Tx) error {
		st := insertStmts{insert: tx.StmtContext(ctx, insert), byKey: tx.StmtContext(ctx, byKey)}
		var err error
		out, err = s.insertMany(ctx, tx, st, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.publishAvailable(p.Now, resultRows(out)...)
	return out, nil
}

// JobInsertManyTx implements store.Store; tx must be a *sql.Tx on this
// database. Nothing is published: the caller has not committed yet.
func (s *Store) JobInsertManyTx(ctx context.Context, tx any, p *store.JobInsertManyParams) ([]*store.JobInsertResult, error) {
	sqlTx, ok := tx.(*sql.Tx)
	if !ok || sqlTx == nil {
		return nil, fmt.Errorf("insert jobs in %T: %w", tx, store.ErrUnsupportedTx)
	}
	if err := validateInsert(p); err != nil {
		return nil, err
	}
	insert, err := sqlTx.PrepareContext(ctx, insertJobSQL)
	if err != nil {
		return nil, fmt.Errorf("prepare job insert: %w", err)
	}
	defer insert.Close()
	byKey, err := sqlTx.PrepareContext(ctx, jobByKeySQL)
	if err != nil {
		return nil, fmt.Errorf("prepare job lookup by idempotency key: %w", err)
	}
	defer byKey.Close()
	return s.insertMany(ctx, sqlTx, insertStmts{insert: insert, byKey: byKey}, p)
}

// validateInsert rejects a batch before anything is written.
func validateInsert(p *store.JobInsertManyParams) error {
	for i, j := range p.Jobs {
		switch {
		case j == nil:
			return fmt.Errorf("insert jobs: job %d is nil", i)
		case j.Type == "":
			return fmt.Errorf("insert jobs: job %d: type is empty", i)
		case j.Payload == nil:
			return fmt.Errorf("insert jobs: job %d: payload is nil", i)
		case j.State != job.StateQueued && j.State != job.StateCreated && j.State != "":
			return fmt.Errorf("insert jobs: job %d: state must be %s or %s, got %q",
				i, job.StateQueued, job.StateCreated, j.State)
		}
	}
	return nil
}

// insertMany inserts p.Jobs with the statements of transaction tx, and one
// outbox row describing every job it created (from state "").
func (s *Store) insertMany(ctx context.Context, tx *sql.Tx, st insertStmts, p *store.JobInsertManyParams) ([]*store.JobInsertResult, error) {
	now := micros(p.Now)
	out := make([]*store.JobInsertResult, len(p.Jobs))
	for i, j := range p.Jobs {
		queue := j.Queue
		if queue == "" {
			queue = j.Type
		}
		state := j.State
		if state == "" {
			state = job.StateQueued
		}
		runAt := micros(orNow(j.RunAt, p.Now))
		r, err := scanJob(st.insert.QueryRowContext(ctx,
			j.ID.String(), j.Type, queue, j.Priority, string(j.Payload), nullString(j.IdempotencyKey),
			string(state), j.MaxAttempts, runAt, runAt+int64(j.Priority)*s.agingMicros,
			j.Timeout.Milliseconds(), now, now))
		if err == nil {
			out[i] = &store.JobInsertResult{Job: r}
			continue
		}
		if !errors.Is(err, sql.ErrNoRows) || j.IdempotencyKey == "" {
			return nil, fmt.Errorf("insert job %s of type %q: %w", j.ID, j.Type, err)
		}
		r, err = scanJob(st.byKey.QueryRowContext(ctx, j.IdempotencyKey))
		if err != nil {
			return nil, fmt.Errorf("read job with idempotency key %q: %w", j.IdempotencyKey, err)
		}
		out[i] = &store.JobInsertResult{Job: r, Duplicate: true}
	}
	var ts []job.Transition
	for _, r := range out {
		if !r.Duplicate {
			ts = append(ts, transitionOf(r.Job, ""))
		}
	}
	if err := insertStateChanged(ctx, tx, ts, p.Now); err != nil {
		return nil, err
	}
	return out, nil
}

// resultRows returns the newly inserted jobs of an insert.
func resultRows(rs []*store.JobInsertResult) []*job.Row {
	rows := make([]*job.Row, 0, len(rs))
	for _, r := range rs {
		if !r.Duplicate {
			rows = append(rows, r.Job)
		}
	}
	return rows
}
