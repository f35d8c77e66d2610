package postgres

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/docket-run/docket/internal/crowd"
)

// The group take: the first try of concurrent takes of one pool is
// combined into one pipeline — their take statements, without the
// counter update, then one statement that adds the batch's assignments to
// one counter shard — sent at once and run in one implicit transaction
// (one Sync): one round trip, one commit and WAL flush, one counter row
// update for up to takeGroupMax takes. Takes queue; while fewer than
// takeGroupLeaders batches run, an arriving take leads: it sends whatever
// is queued for its pool (itself included), answers every take of the
// batch, and hands the lead to the oldest take still queued, if any, so
// no take waits for others' batches after its own answer. A batch of one
// is the take's own statement, with its count. There is no wait for a
// batch to fill: under load the queue fills while batches run, and a
// pool's takes in flight at once are at most takeGroupLeaders statements
// or batches (before, as many as the connection pool would run).
//
// Each take keeps its own answer. A take that finds nothing gets its "no
// row" and goes on alone (the availability check, the waiting take,
// takeRefused): only first tries of the SKIP LOCKED picks are batched,
// never the waiting take (takeWaitSQL waits for unit row locks, and a
// batch holding the units its earlier statements locked would wait with
// them). Any error PostgreSQL reports (the UNIQUE (unit, contributor)
// rule, a deadlock, a canceled statement) has rolled the whole batch back
// — its takes, their slots and the counter — so each take of it runs
// again alone, the take of one statement; an error of the connection
// (the outcome unknown) is every take's answer, as a single take's would
// be. A take whose context ends while it is queued leaves the queue with
// its context's error; once sent, it waits for the batch (a short
// transaction whose statements never wait for a unit) and gets its true
// answer, so a committed take is never reported as failed.
//
// Locks, and why a batch adds no deadlock. A batch's take statements lock
// units only by their picks, FOR UPDATE SKIP LOCKED: they never wait for
// a unit, and they touch no counter row (docket_assignments has no
// foreign keys: no key-share lock on the pool's or the unit's row). Its
// last statement locks one counter row, (pool, shard), the shard drawn
// once per batch — the only row the batch can wait for, and it waits
// holding only its own units and assignments. Two batches never wait for
// each other's units, and a batch locks one counter row, so they cannot
// form a cycle between them. Another transaction that holds a counter row
// while it waits for a unit a batch holds closes a cycle: a release, a
// judgment or an expiry is one statement whose sibling CTEs lock the unit
// and a counter row in an order PostgreSQL does not promise, and an
// advancement pausing or canceling units of a pool it counted into locks
// counter rows first. A single take could close the same cycles (it
// locks its unit, then a counter row); PostgreSQL's deadlock detection
// breaks them after deadlock_timeout, the batch rolls back and its takes
// run alone. A batch holds up to takeGroupMax units, so such a stall is
// likelier per batch than per take, and costs its takes a re-run; the
// cost otherwise: a batch's units stay locked until it commits, so a
// judgment of one of them waits that long. takeGroupMax keeps batches
// short, takeBatchTimeout bounds a batch that hangs (its takes get the
// error: the outcome is unknown, as for a single take's broken
// connection; a take committed so is released by the reaper).
//
// The queue and the leaders are crowd_group.go's, shared with the group
// judgment.
const (
	// takeGroupMax is the most takes one batch sends.
	takeGroupMax = 32
	// takeGroupLeaders is the most batches of one pool in flight at once
	// (each holds one connection of the pool).
	takeGroupLeaders = 2
	// takeBatchTimeout bounds one batch's round trip.
	takeBatchTimeout = 30 * time.Second
)

// takeStmt is one take's first try: its statement in a batch (without
// the counter update) and its statement alone.
type takeStmt struct {
	id              uuid.UUID // the assignment's id
	sql, aloneSQL   string
	args, aloneArgs []any
}

type (
	// takeGroup is a Store's queues of takes waiting for a batch, by pool.
	takeGroup = group[takeStmt, *crowd.Unit]
	// takeQueue is one pool's queue of takes.
	takeQueue = groupQueue[takeStmt, *crowd.Unit]
	// takeCall is one queued take.
	takeCall = groupCall[takeStmt, *crowd.Unit]
	// takeAnswer is a batched take's answer: the unit taken, or the error
	// its statement got (pgx.ErrNoRows: nothing found), or alone, or lead.
	takeAnswer = groupAnswer[*crowd.Unit]
)

// takeSpec is the group take.
var takeSpec = &groupSpec[takeStmt, *crowd.Unit]{max: takeGroupMax, leaders: takeGroupLeaders,
	timeout: takeBatchTimeout, send: (*Store).takeSend}

// takeBatched runs one take's first try — batched, or alone when no
// other take of its pool is queued with it — and returns its statement's
// answer (the unit, pgx.ErrNoRows or the error), or errGroupAlone when
// the caller must run it alone (its batch rolled back).
func (s *Store) takeBatched(ctx context.Context, call *takeCall) (*crowd.Unit, error) {
	return s.takes.do(s, takeSpec, ctx, call)
}

// takeLead sends one batch of leader's pool and hands the lead on.
func (s *Store) takeLead(ctx context.Context, leader *takeCall) {
	s.takes.lead(s, takeSpec, ctx, leader)
}

// takeCountSQL adds the batch's assignments (@ids: those its takes
// inserted, found by primary key in the batch's own transaction) to one
// counter shard of the pool; no row moves when none was taken. The ids
// are read through a scalar subquery so that its plan stays the cached
// generic one (crowd_judgment_group.go, judgmentsReachedSQL).
var takeCountSQL = compileNamed(`WITH n AS (
	SELECT count(*) AS n FROM docket_assignments WHERE id = ANY((SELECT @ids::uuid[])::uuid[])
)
UPDATE docket_pool_counters pc SET active_assignments = pc.active_assignments + n.n
FROM n WHERE pc.pool_id = @pool AND pc.shard = @shard AND n.n > 0`)

// takeSend sends one batch of takes of one pool and answers each take.
func (s *Store) takeSend(ctx context.Context, batch []*takeCall) {
	if len(batch) == 1 {
		// Nothing to combine: the take of one statement, with its count.
		c := batch[0]
		u, err := scanUnit(s.pool.QueryRow(ctx, c.c.aloneSQL, c.c.aloneArgs...))
		c.done <- takeAnswer{r: u, err: err}
		return
	}
	b := &pgx.Batch{}
	ids := make([]uuid.UUID, len(batch))
	for i, c := range batch {
		b.Queue(c.c.sql, c.c.args...)
		ids[i] = c.c.id
	}
	b.Queue(takeCountSQL.sql, takeCountSQL.args(pgx.NamedArgs{
		"ids": ids, "pool": batch[0].pool, "shard": rand.IntN(poolShards),
	})...)
	answers := make([]takeAnswer, len(batch))
	br := s.pool.SendBatch(ctx, b)
	var failed error
	for i := range batch {
		u, err := scanUnit(br.QueryRow())
		answers[i] = takeAnswer{r: u, err: err}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) && failed == nil {
			failed = err
		}
	}
	if _, err := br.Exec(); err != nil && failed == nil {
		failed = err
	}
	if err := br.Close(); err != nil && failed == nil {
		failed = err
	}
	// An ERROR from PostgreSQL rolled the batch back whole: its takes run
	// again alone. Anything else (the connection broke, the server ended
	// the session with FATAL, the batch timed out, a row did not scan)
	// leaves the outcome unknown: every take gets the error, as a single
	// take would.
	var pgErr *pgconn.PgError
	rolledBack := errors.As(failed, &pgErr) && pgErr.Severity == "ERROR"
	for i, c := range batch {
		switch {
		case failed == nil:
			c.done <- answers[i]
		case rolledBack:
			c.done <- takeAnswer{alone: true}
		default:
			c.done <- takeAnswer{err: failed}
		}
	}
}
