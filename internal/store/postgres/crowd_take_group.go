package postgres

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

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
// batch to fill: under load the queue fills while batches run, and the
// takes in flight at once are at most takeGroupLeaders statements or
// batches (before, as many as the connection pool would run).
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
// a unit, and they touch no counter row (the assignment's foreign key
// share-locks the pool's row, which only a pool's delete conflicts with,
// as for a single take). Its last statement locks one
// counter row, (pool, shard), the shard drawn once per batch — the only
// row the batch can wait for, and it waits holding only its own units
// and assignments. The judgment transaction (quality state → run → unit
// → counter rows), a release, the quality repair and the waiting take
// lock a unit before a counter row, as the batch does; the reaper never
// waits. So a transaction waiting for a unit the batch holds can hold a
// counter row only if it locks a unit after a counter row (an advancement
// pausing or canceling units of a pool it counted into): the cycle a
// single take could close already, broken by PostgreSQL's deadlock
// detection, after which the batch's takes run alone. Two batches never
// wait for each other's units, and a batch locks one counter row, so they
// cannot form a cycle between them. The cost: a batch's units stay
// locked until it commits, so a judgment of one of them waits that long;
// takeGroupMax keeps batches short.
const (
	// takeGroupMax is the most takes one batch sends.
	takeGroupMax = 32
	// takeGroupLeaders is the most batches in flight at once (each holds
	// one connection of the pool).
	takeGroupLeaders = 2
)

// takeGroup is a Store's queue of takes waiting for a batch.
type takeGroup struct {
	mu      sync.Mutex
	queue   []*takeCall
	leaders int // batches being sent or answered
	// batched counts the takes sent in batches of two or more (tests
	// check that concurrent takes do combine).
	batched atomic.Int64
}

// takeCall is one take's first try: its statement in a batch (without
// the counter update), its statement alone, and where its answer goes.
type takeCall struct {
	ctx             context.Context
	pool            uuid.UUID
	id              uuid.UUID // the assignment's id
	sql, aloneSQL   string
	args, aloneArgs []any
	// led: the take was handed the lead (under takeGroup.mu).
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
	g.queue = append(g.queue, call)
	lead := g.leaders < takeGroupLeaders
	if lead {
		g.leaders++
	}
	g.mu.Unlock()
	if lead {
		s.takeLead(ctx)
	}
	ctxDone := ctx.Done()
	for {
		select {
		case a := <-call.done:
			if a.lead {
				s.takeLead(ctx)
				continue
			}
			if a.alone {
				return nil, errTakeAlone
			}
			return a.unit, a.err
		case <-ctxDone:
			g.mu.Lock()
			i := slices.Index(g.queue, call)
			if i < 0 {
				// Sent: its answer comes.
				g.mu.Unlock()
				ctxDone = nil
				continue
			}
			g.queue = slices.Delete(g.queue, i, i+1)
			if call.led {
				// Handed the lead while queued: pass it on.
				g.handOff()
			}
			g.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// handOff passes the lead of a finished batch to the oldest queued take
// not handed one already, or ends it when there is none. g.mu is held.
func (g *takeGroup) handOff() {
	for _, c := range g.queue {
		if !c.led {
			c.led = true
			c.done <- takeAnswer{lead: true}
			return
		}
	}
	g.leaders--
}

// takeLead sends one batch: the queued takes of the oldest queued take's
// pool, up to takeGroupMax, in the order they came; then hands the lead
// on.
func (s *Store) takeLead(ctx context.Context) {
	g := &s.takes
	g.mu.Lock()
	var batch []*takeCall
	if len(g.queue) > 0 {
		pool := g.queue[0].pool
		rest := g.queue[:0]
		for _, c := range g.queue {
			switch {
			case c.pool != pool || len(batch) == takeGroupMax:
				rest = append(rest, c)
			case c.ctx.Err() != nil:
				c.done <- takeAnswer{err: c.ctx.Err()}
			default:
				batch = append(batch, c)
			}
		}
		clear(g.queue[len(rest):])
		g.queue = rest
	}
	g.mu.Unlock()
	if len(batch) > 0 {
		// The batch is every take's, not the leader's: the leader's
		// request ending does not cancel it.
		s.takeSend(context.WithoutCancel(ctx), batch)
	}
	g.mu.Lock()
	g.handOff()
	g.mu.Unlock()
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
	var pgErr *pgconn.PgError
	for i, c := range batch {
		switch {
		case failed == nil:
			c.done <- answers[i]
		case errors.As(failed, &pgErr):
			// PostgreSQL refused a statement: the batch rolled back whole.
			c.done <- takeAnswer{alone: true}
		default:
			c.done <- takeAnswer{err: failed}
		}
	}
}
