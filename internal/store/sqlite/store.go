// Package sqlite implements store.Store on an embedded SQLite file with
// modernc.org/sqlite (pure Go, no cgo).
//
// A Store holds two connection pools on the same file: a writer with exactly
// one connection, whose transactions begin IMMEDIATE so that every write
// transaction takes SQLite's write lock up front, and a pool of readers for
// read-only queries (WAL mode lets them run beside the writer). Several
// processes may open the same file; their writes are serialised by SQLite's
// file locks and busy_timeout. Every connection keeps the statements it ran,
// so the store runs queries given as text and each is parsed once per
// connection (stmtcache.go).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// busyTimeout is how long a connection waits for another connection (or
// process) to release a lock before a statement fails with SQLITE_BUSY
// (which a write reports as store.ErrContention).
const busyTimeout = 10 * time.Second

// walSizeLimit is the size the writer truncates the WAL file back to once
// it has been checkpointed (journal_size_limit). Without it the file keeps
// the size of the largest burst of writes between two checkpoints for as
// long as any connection is open: 82 MB after one InsertMany of 20,000
// jobs of 2 kB, with docket serve running, until every process closes the
// database.
const walSizeLimit = 64 << 20

// tuning is what Open fixes and tests change.
type tuning struct {
	busy     time.Duration // busy_timeout
	walLimit int64         // journal_size_limit, bytes
}

// Store is the SQLite backend.
type Store struct {
	writer *sql.DB // one connection; BEGIN IMMEDIATE
	reader *sql.DB // read-only queries
	opts   store.Options
	// agingMicros is opts.PriorityAging in microseconds: sort_at =
	// run_at + priority × agingMicros.
	agingMicros int64
	hub         store.Hub
	hints       rowidHints

	// stmtStats counts what the connections' statement caches did (see
	// cachingConnector).
	stmtStats *stmtStats

	// writesDone counts the write transactions ended (committed or not),
	// for Ping to tell a busy writer from a stuck one; stuckAfter is how
	// long Ping lets the writer be in use with none ended before it waits
	// for it; now is the clock (tests set it).
	writesDone atomic.Uint64
	stuckAfter time.Duration
	now        func() time.Time
	pingMu     sync.Mutex
	busySeen   uint64    // writesDone when Ping first saw the writer so
	busySince  time.Time // zero while Ping last saw it idle
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the SQLite database at path. It does not
// migrate: call Migrate (or `docket migrate`) before use.
//
// path must name a file: the writer and the readers are separate connections,
// so an in-memory database (":memory:") would be a different one for each.
func Open(ctx context.Context, path string, opts store.Options) (*Store, error) {
	return open(ctx, path, opts, tuning{busy: busyTimeout, walLimit: walSizeLimit})
}

// open is Open with its tuning given (tests shorten it).
func open(ctx context.Context, path string, opts store.Options, tune tuning) (*Store, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("open sqlite: path must be a file path, got %q", path)
	}
	opts = opts.WithDefaults()
	stats := new(stmtStats)
	wc, err := newCachingConnector(dsn(path, true, tune), stats)
	if err != nil {
		return nil, fmt.Errorf("open sqlite writer %q: %w", path, err)
	}
	writer := sql.OpenDB(wc)
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)
	// The writer connection is made first so that journal_mode=WAL is in
	// force before any reader connects.
	if err := connectWriter(ctx, writer, tune.busy); err != nil {
		_ = writer.Close()
		return nil, fmt.Errorf("connect sqlite writer %q: %w%s", path, err, cantOpenReason(path))
	}
	rc, err := newCachingConnector(dsn(path, false, tune), stats)
	if err != nil {
		_ = writer.Close()
		return nil, fmt.Errorf("open sqlite reader %q: %w", path, err)
	}
	reader := sql.OpenDB(rc)
	n := max(4, runtime.GOMAXPROCS(0))
	reader.SetMaxOpenConns(n)
	reader.SetMaxIdleConns(n)
	if err := reader.PingContext(ctx); err != nil {
		_ = writer.Close()
		_ = reader.Close()
		return nil, fmt.Errorf("connect sqlite reader %q: %w", path, err)
	}
	return &Store{
		writer:      writer,
		reader:      reader,
		opts:        opts,
		agingMicros: opts.PriorityAging.Microseconds(),
		stmtStats:   stats,
		stuckAfter:  2 * tune.busy,
		now:         time.Now,
	}, nil
}

// connectWriter makes the writer's connection, whose pragmas turn a new
// file to WAL mode. SQLite answers that pragma with SQLITE_BUSY at once,
// without its busy handler, while another connection (of this or another
// process: two docket serve, or a serve and docket migrate up, started
// together on a file that does not exist yet) holds the write lock of the
// file still in rollback mode; so a busy
// connect is tried again until the busy timeout has passed. Once the file
// is in WAL mode (it stays so) the pragma changes nothing and is not
// refused.
func connectWriter(ctx context.Context, writer *sql.DB, busy time.Duration) error {
	deadline := time.Now().Add(busy)
	for {
		err := writer.PingContext(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// isBusy reports whether err is SQLITE_BUSY (or one of its extended codes).
func isBusy(err error) bool {
	e, ok := errors.AsType[*sqlite.Error](err)
	return ok && e.Code()&0xff == sqlite3.SQLITE_BUSY
}

// uriPath escapes a file path for a SQLite file: URI.
var uriPath = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// dsn builds the modernc DSN: the pragmas run on every new connection.
func dsn(path string, writer bool, tune tuning) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", tune.busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	// FULL: a committed job survives a power loss, not only a crash.
	q.Add("_pragma", "synchronous(FULL)")
	// Statement journals (every multi-index write inside a transaction has
	// one) and temporary b-trees stay in memory instead of temp files.
	q.Add("_pragma", "temp_store(MEMORY)")
	if writer {
		q.Set("_txlock", "immediate")
		// The writer's commits checkpoint and restart the WAL.
		q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", tune.walLimit))
	} else {
		q.Add("_pragma", "query_only(ON)")
	}
	// A file: URI, so that SQLite rather than the driver reads the path; the
	// characters that mean something in a URI are escaped.
	return FileURI(path) + "?" + q.Encode()
}

// FileURI is path as a SQLite file: URI (without a query), the characters
// that mean something in a URI escaped, for a program that opens a
// docket database with database/sql itself (crowdcheck.Open).
func FileURI(path string) string { return "file:" + uriPath.Replace(path) }

// DB returns the writer *sql.DB: begin a transaction on it to use
// JobInsertManyTx. It has one connection, so do not call other Store methods
// while holding one of its transactions.
func (s *Store) DB() *sql.DB { return s.writer }

// Backend implements store.Store.
func (s *Store) Backend() string { return "sqlite" }

// Ping implements store.Store. The writer has one connection: while
// writes hold it and end the database is evidently answering, and a ping
// would only queue behind them (under a steady write load /healthz, which
// gives Ping 2 s, answered 503 on a working server), so the writer is
// pinged when it is idle, or when it has been in use with no write ended
// for stuckAfter (twice the busy timeout, after which a write waiting for
// another process's lock gives up): a write that hangs (a stalled disk)
// then fails Ping within its context instead of /healthz answering 200
// for ever. The readers are always pinged.
func (s *Store) Ping(ctx context.Context) error {
	if s.writerDue(s.writer.Stats().InUse > 0) {
		if err := s.writer.PingContext(ctx); err != nil {
			return fmt.Errorf("ping sqlite writer: %w", err)
		}
	}
	if err := s.reader.PingContext(ctx); err != nil {
		return fmt.Errorf("ping sqlite reader: %w", err)
	}
	return nil
}

// writerDue reports whether Ping should ping the writer: when it is not
// inUse, or has been since Ping first saw it so with no write transaction
// ended meanwhile, for longer than stuckAfter. Seen idle, the watch starts
// again.
func (s *Store) writerDue(inUse bool) bool {
	done, now := s.writesDone.Load(), s.now()
	s.pingMu.Lock()
	defer s.pingMu.Unlock()
	if !inUse {
		s.busySince = time.Time{}
		return true
	}
	if s.busySince.IsZero() || done != s.busySeen {
		s.busySeen, s.busySince = done, now
		return false
	}
	return now.Sub(s.busySince) > s.stuckAfter
}

// AnalyzeGrown implements store.Store: nothing to do, SQLite plans a
// statement when it is prepared (see store.StatsRefresher).
func (s *Store) AnalyzeGrown(context.Context) ([]string, error) { return nil, nil }

// Close implements store.Store.
func (s *Store) Close() error {
	if err := errors.Join(s.reader.Close(), s.writer.Close()); err != nil {
		return fmt.Errorf("close sqlite store: %w", err)
	}
	return nil
}

// Subscribe implements store.Store with the in-process hub: SQLite has no
// NOTIFY, so wakeups reach only subscribers of this Store; other processes
// find work by polling.
func (s *Store) Subscribe(topic store.Topic) (<-chan string, func()) {
	return s.hub.Subscribe(topic)
}

// write runs fn in one write transaction (BEGIN IMMEDIATE) and commits it.
// SQLITE_BUSY (another process held the file's write lock for longer than
// the busy timeout) is store.ErrContention: nothing was written, and the
// same call again may succeed. Every write of the store goes through it,
// so it is also where a full database (SQLITE_FULL) becomes
// store.ErrStorageFull.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	defer s.writesDone.Add(1)
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return writeError(fmt.Errorf("begin write transaction: %w", err))
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return writeError(err)
	}
	if err := tx.Commit(); err != nil {
		return writeError(fmt.Errorf("commit: %w", err))
	}
	return nil
}

// writeError marks the write errors a caller can act on: SQLITE_BUSY as
// store.ErrContention, SQLITE_FULL as store.ErrStorageFull.
func writeError(err error) error { return storageFull(contended(err)) }

// contended marks SQLITE_BUSY as store.ErrContention, keeping the driver's
// error in the chain.
func contended(err error) error {
	if isBusy(err) {
		return busyError{err}
	}
	return err
}

// storageFull marks an error caused by SQLITE_FULL (a write needed a page
// the disk, or PRAGMA max_page_count, had no room for; SQLite rolls the
// statement back, and the transaction when it cannot go on, so nothing of
// it is kept) as store.ErrStorageFull, keeping the driver's error in the
// chain; other errors are returned as they are.
func storageFull(err error) error {
	if se, ok := errors.AsType[*sqlite.Error](err); ok && se.Code()&0xff == sqlite3.SQLITE_FULL {
		return storageFullError{err}
	}
	return err
}

type busyError struct{ err error }

func (e busyError) Error() string        { return e.err.Error() }
func (e busyError) Unwrap() error        { return e.err }
func (e busyError) Is(target error) bool { return target == store.ErrContention }

type storageFullError struct{ err error }

func (e storageFullError) Error() string        { return e.err.Error() }
func (e storageFullError) Unwrap() error        { return e.err }
func (e storageFullError) Is(target error) bool { return target == store.ErrStorageFull }

// publishAvailable wakes workers of every queue where one of rows is now due
// QUEUED work. Call it after commit.
func (s *Store) publishAvailable(now time.Time, rows ...*job.Row) {
	s.hub.PublishAvailable(now, rows...)
}

// cantOpenReason says why SQLite could not open path, which its own
// message ("unable to open database file (14)") does not: a directory
// that does not exist, a directory where the file should be, or a file or
// directory docket cannot write (WAL mode creates path-wal and path-shm
// next to the file). It is "" when none of these is the reason.
func cantOpenReason(path string) string {
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil {
		return fmt.Sprintf(": directory %s: %v", dir, osReason(err))
	} else if !st.IsDir() {
		return fmt.Sprintf(": %s is not a directory", dir)
	}
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return fmt.Sprintf(": %s is a directory, not a database file", path)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Sprintf(": %s cannot be written: %v", path, osReason(err))
		}
		_ = f.Close()
	}
	f, err := os.CreateTemp(dir, ".docket-probe-*")
	if err != nil {
		return fmt.Sprintf(": directory %s cannot be written (the database and its -wal and -shm files are created there): %v", dir, osReason(err))
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return ""
}

// osReason is err without the path a *fs.PathError repeats.
func osReason(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}
