package postgres

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
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
// Each pool has its own queue and its own leaders, so a slow batch of
// one pool holds up only that pool's first tries.
const (
	// takeGroupMax is the most takes one batch sends.
	takeGroupMax = 32
	// takeGroupLeaders is the most batches of one pool in flight at once
	// (each holds one connection of the pool).
	takeGroupLeaders = 2
	// takeBatchTimeout bounds one batch's round trip.
	takeBatchTimeout = 30 * time.Second
)

// takeGroup is a Store's queues of takes waiting for a batch, by pool.
type takeGroup struct {
	mu    sync.Mutex
	pools map[uuid.UUID]*takeQueue
	// batched counts the takes sent in batches of two or more (tests
	// check that concurrent takes do combine).
	batched atomic.Int64
}

// takeQueue is one pool's queue: the takes waiting, oldest first, and its
// batches being sent or answered (leads handed out but not yet taken up
// count too).
type takeQueue struct {
	calls   []*takeCall
	leaders int
}

// takeCall is one take's first try: its statement in a batch (without
// the counter update), its statement alone, and where its answer goes.
type takeCall struct {
	ctx             context.Context
	pool            uuid.UUID
	id              uuid.UUID // the assignment's id
	sql, aloneSQL   string
	args, aloneArgs []any
	// led: a lead was handed to the take and it has not taken it up yet
	// (under takeGroup.mu); the lead is then the one value in done.
	led bool
	// done receives the answer, and before it possibly the lead (one of
	// each at most).
	done chan takeAnswer
}

// takeAnswer is a batched take's answer: the unit taken, or the error its
// statement got (pgx.ErrNoRows: nothing found), or alone: the batch
// rolled back, run the take by itself; or lead: send the next batch.
type takeAnswer struct {
	unit  *crowd.Unit
	err   error
	alone bool
	lead  bool
}

// errTakeAlone is takeBatched's answer when the take must run alone.
var errTakeAlone = errors.New("take alone")

// takeBatched runs one take's first try — batched, or alone when no
// other take of its pool is queued with it — and returns its statement's
// answer (the unit, pgx.ErrNoRows or the error), or errTakeAlone when
// the caller must run it alone (its batch rolled back).
func (s *Store) takeBatched(ctx context.Context, call *takeCall) (*crowd.Unit, error) {
	g := &s.takes
	call.ctx, call.done = ctx, make(chan takeAnswer, 2)
	g.mu.Lock()
	if g.pools == nil {
		g.pools = map[uuid.UUID]*takeQueue{}
	}
	q := g.pools[call.pool]
	if q == nil {
		q = &takeQueue{}
		g.pools[call.pool] = q
	}
	q.calls = append(q.calls, call)
	lead := q.leaders < takeGroupLeaders
	if lead {
		q.leaders++
	}
	g.mu.Unlock()
	if lead {
		s.takeLead(ctx, call)
	}
	ctxDone := ctx.Done()
	for {
		select {
		case a := <-call.done:
			if a.lead {
				s.takeLead(ctx, call)
				continue
			}
			if a.alone {
				return nil, errTakeAlone
			}
			return a.unit, a.err
		case <-ctxDone:
			if !g.leave(call) {
				ctxDone = nil // sent: its answer comes
				continue
			}
			return nil, ctx.Err()
		}
	}
}

// leave takes call, whose context ended, out of its pool's queue, and
// passes on a lead it was handed and has not taken up. It returns false
// when call is no longer queued: it was sent, and its answer comes.
func (g *takeGroup) leave(call *takeCall) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.pools[call.pool]
	if q == nil {
		return false
	}
	i := slices.Index(q.calls, call)
	if i < 0 {
		return false
	}
	q.calls = slices.Delete(q.calls, i, i+1)
	if call.led {
		<-call.done // the lead, the one value there while queued
		call.led = false
		g.handOff(call.pool, q)
	}
	return true
}

// handOff passes the lead of a finished batch of pool to the oldest take
// of q not handed one already, or ends it when there is none (and drops
// the queue once it has neither takes nor leaders). g.mu is held.
func (g *takeGroup) handOff(pool uuid.UUID, q *takeQueue) {
	for _, c := range q.calls {
		if !c.led {
			c.led = true
			c.done <- takeAnswer{lead: true}
			return
		}
	}
	q.leaders--
	if q.leaders == 0 && len(q.calls) == 0 {
		delete(g.pools, pool)
	}
}

// takeLead sends one batch: the queued takes of leader's pool, up to
// takeGroupMax, in the order they came (leader's own among them, unless
// older ones fill the batch); then hands the lead on.
func (s *Store) takeLead(ctx context.Context, leader *takeCall) {
	g := &s.takes
	g.mu.Lock()
	leader.led = false // taken up
	q := g.pools[leader.pool]
	var batch []*takeCall
	rest := q.calls[:0]
	for _, c := range q.calls {
		switch {
		case len(batch) == takeGroupMax:
			rest = append(rest, c)
		case c.ctx.Err() != nil && !c.led:
			c.done <- takeAnswer{err: c.ctx.Err()}
		default:
			// (A take holding a lead it has not taken up goes too: its
			// answer follows the lead in its channel.)
			batch = append(batch, c)
		}
	}
	clear(q.calls[len(rest):])
	q.calls = rest
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.handOff(leader.pool, q)
		g.mu.Unlock()
	}()
	if len(batch) > 0 {
		// The batch is every take's, not the leader's: the leader's
		// request ending does not cancel it.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), takeBatchTimeout)
		defer cancel()
		s.takeSend(bctx, batch)
	}
}

// takeCountSQL adds the batch's assignments (@ids: those its takes
// inserted, found by primary key in the batch's own transaction) to one
// counter shard of the pool; no row moves when none was taken.
var takeCountSQL = compileNamed(`WITH n AS (
	SELECT count(*) AS n FROM docket_assignments WHERE id = ANY(@ids::uuid[])
)
UPDATE docket_pool_counters pc SET active_assignments = pc.active_assignments + n.n
FROM n WHERE pc.pool_id = @pool AND pc.shard = @shard AND n.n > 0`)

// takeSend sends one batch of takes of one pool and answers each take.
func (s *Store) takeSend(ctx context.Context, batch []*takeCall) {
	if len(batch) == 1 {
		// Nothing to combine: the take of one statement, with its count.
		c := batch[0]
		u, err := scanUnit(s.pool.QueryRow(ctx, c.aloneSQL, c.aloneArgs...))
		c.done <- takeAnswer{unit: u, err: err}
		return
	}
	s.takes.batched.Add(int64(len(batch)))
	b := &pgx.Batch{}
	ids := make([]uuid.UUID, len(batch))
	for i, c := range batch {
		b.Queue(c.sql, c.args...)
		ids[i] = c.id
	}
	b.Queue(takeCountSQL.sql, takeCountSQL.args(pgx.NamedArgs{
		"ids": ids, "pool": batch[0].pool, "shard": rand.IntN(poolShards),
	})...)
	answers := make([]takeAnswer, len(batch))
	br := s.pool.SendBatch(ctx, b)
	var failed error
	for i := range batch {
		u, err := scanUnit(br.QueryRow())
		answers[i] = takeAnswer{unit: u, err: err}
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
