package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// insertColumns are the columns an insert sets; the rest take defaults.
const insertColumns = `id, job_type, queue, priority, payload, idempotency_key, state,
	max_attempts, run_at, sort_at, timeout_ms, created_at, updated_at`

// insertColumnCount is the number of insertColumns.
const insertColumnCount = 13

// insertChunks are the row counts of the multi-row INSERT statements that
// jobs without an idempotency key are written with: a batch is covered
// greedily, largest first, so each size's statement is prepared once.
var insertChunks = []int{256, 64, 16, 4, 1}

// insertRowsSQL inserts n jobs in one statement.
func insertRowsSQL(n int) string {
	row := "(" + placeholders(insertColumnCount) + ")"
	return `INSERT INTO docket_jobs (` + insertColumns + `) VALUES ` +
		strings.Repeat(row+", ", n-1) + row
}

// insertKeyedSQL inserts one job with an idempotency key; a taken key
// inserts nothing (0 rows affected).
var insertKeyedSQL = insertRowsSQL(1) +
	` ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`

const jobByKeySQL = `SELECT ` + jobColumns + ` FROM docket_jobs WHERE idempotency_key = ?`

// stmtFunc gives query's statement in the current transaction.
type stmtFunc func(ctx context.Context, query string) (stmt, error)

// stmt is a statement that insertMany runs: a *sql.Stmt, or a query run
// on the store's own transaction, whose connection keeps its statements
// (txStmt).
type stmt interface {
	ExecContext(ctx context.Context, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, args ...any) *sql.Row
}

// txStmt runs query on tx.
type txStmt struct {
	tx    *sql.Tx
	query string
}

func (t txStmt) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, t.query, args...)
}

func (t txStmt) QueryRowContext(ctx context.Context, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, t.query, args...)
}

// JobInsertMany implements store.Store. Writes are serialised (one writer
// connection, BEGIN IMMEDIATE across processes), so the idempotency check
// cannot race: the first insert of a key wins and every later one, in this
// batch or another, reads the winner.
func (s *Store) JobInsertMany(ctx context.Context, p *store.JobInsertManyParams) ([]*store.JobInsertResult, error) {
	if err := validateInsert(p); err != nil {
		return nil, err
	}
	if len(p.Jobs) == 0 {
		return []*store.JobInsertResult{}, nil
	}
	var out []*store.JobInsertResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		stmt := func(_ context.Context, q string) (stmt, error) { return txStmt{tx, q}, nil }
		var err error
		out, err = s.insertMany(ctx, tx, stmt, p)
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
	prepared := map[string]*sql.Stmt{}
	defer func() {
		for _, st := range prepared {
			_ = st.Close()
		}
	}()
	// The caller's transaction may be on a connection of its own, which
	// keeps no statements: each is prepared once for the call.
	stmt := func(ctx context.Context, q string) (stmt, error) {
		if st, ok := prepared[q]; ok {
			return st, nil
		}
		st, err := sqlTx.PrepareContext(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("prepare job insert: %w", err)
		}
		prepared[q] = st
		return st, nil
	}
	out, err := s.insertMany(ctx, sqlTx, stmt, p)
	return out, storageFull(err)
}

// JobNotifyInserted implements store.Store: the wakeups JobInsertMany
// sends after its own commit.
func (s *Store) JobNotifyInserted(p *store.JobNotifyInsertedParams) {
	s.publishAvailable(p.Now, p.Jobs...)
}

// validateInsert rejects a batch before anything is written.
func validateInsert(p *store.JobInsertManyParams) error {
	if err := p.PrepareAll(); err != nil {
		return err
	}
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

// insertMany inserts p.Jobs in transaction tx, and one outbox row
// describing every job it created (from state ""). Jobs without an
// idempotency key cannot conflict: they go in multi-row statements. Jobs
// with one go one by one, in order, so a key's first use wins.
func (s *Store) insertMany(ctx context.Context, tx *sql.Tx, stmt stmtFunc, p *store.JobInsertManyParams) ([]*store.JobInsertResult, error) {
	out := make([]*store.JobInsertResult, len(p.Jobs))
	results := make([]store.JobInsertResult, len(p.Jobs))
	args := make([][]any, len(p.Jobs))
	flatArgs := make([]any, len(p.Jobs)*insertColumnCount) // every job's, in one allocation
	var keyless []int
	for i, j := range p.Jobs {
		results[i].Job = s.insertedRow(j, p.Now)
		out[i] = &results[i]
		args[i] = flatArgs[i*insertColumnCount : (i+1)*insertColumnCount : (i+1)*insertColumnCount]
		var prev []any
		if i > 0 {
			prev = args[i-1]
		}
		insertArgs(args[i], prev, out[i].Job, s.agingMicros)
		if j.IdempotencyKey == "" {
			keyless = append(keyless, i)
		}
	}
	for _, n := range insertChunks {
		if len(keyless) < n {
			continue
		}
		st, err := stmt(ctx, insertRowsSQL(n))
		if err != nil {
			return nil, err
		}
		flat := make([]any, 0, n*insertColumnCount)
		for len(keyless) >= n {
			flat = flat[:0]
			for _, i := range keyless[:n] {
				flat = append(flat, args[i]...)
			}
			if _, err := st.ExecContext(ctx, flat...); err != nil {
				return nil, err // the caller says how many jobs it inserted
			}
			keyless = keyless[n:]
		}
	}
	for i, j := range p.Jobs {
		if j.IdempotencyKey == "" {
			continue
		}
		if err := insertKeyed(ctx, stmt, out[i], args[i]); err != nil {
			return nil, err
		}
	}
	var ts []job.Transition
	for _, r := range out {
		if !r.Duplicate {
			ts = append(ts, r.Job.TransitionFrom(""))
		}
	}
	if err := insertStateChanged(ctx, tx, ts, p.Now); err != nil {
		return nil, err
	}
	return out, nil
}

// insertKeyed inserts res.Job, which has an idempotency key; when the key is
// taken it replaces res.Job with the existing row and marks it Duplicate.
func insertKeyed(ctx context.Context, stmt stmtFunc, res *store.JobInsertResult, args []any) error {
	r := res.Job
	insert, err := stmt(ctx, insertKeyedSQL)
	if err != nil {
		return err
	}
	result, err := insert.ExecContext(ctx, args...)
	if err != nil {
		return fmt.Errorf("insert job %s of type %q: %w", r.ID, r.Type, err)
	}
	if n, err := result.RowsAffected(); err != nil {
		return fmt.Errorf("insert job %s of type %q: %w", r.ID, r.Type, err)
	} else if n == 1 {
		return nil
	}
	byKey, err := stmt(ctx, jobByKeySQL)
	if err != nil {
		return err
	}
	existing, err := scanJob(byKey.QueryRowContext(ctx, r.IdempotencyKey))
	if err != nil {
		return fmt.Errorf("read job with idempotency key %q: %w", r.IdempotencyKey, err)
	}
	res.Job, res.Duplicate = existing, true
	return nil
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
