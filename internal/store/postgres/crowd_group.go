package postgres

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// The queue and the leaders behind the group take (crowd_take_group.go)
// and the group judgment (crowd_judgment_group.go): concurrent calls of
// one pool queue; while fewer than spec.leaders batches of that pool are
// in flight, an arriving call leads: it sends whatever is queued for its
// pool (itself included, unless older calls fill the batch), answers
// every call of the batch, and hands the lead to the oldest call still
// queued, if any, so no call waits for others' batches after its own
// answer. There is no wait for a batch to fill: under load the queue
// fills while batches run. A call whose context ends while it is queued
// leaves the queue with its context's error; once sent it waits for its
// batch and gets its true answer. Each pool has its own queue and its own
// leaders, so a slow batch of one pool holds up only that pool's calls.

// groupSpec is what one kind of group does: its batch size, its leaders,
// the bound on one batch, which calls may share a batch, and the sending.
type groupSpec[C, R any] struct {
	// max is the most calls one batch sends.
	max int
	// leaders is the most batches of one pool in flight at once (each
	// holds one connection of the pool).
	leaders int
	// timeout bounds one batch.
	timeout time.Duration
	// joins, when set, says whether c may join batch; a call that may not
	// stays queued for a later batch.
	joins func(batch []*groupCall[C, R], c *groupCall[C, R]) bool
	// send sends one batch and answers every call of it.
	send func(s *Store, ctx context.Context, batch []*groupCall[C, R])
}

// group is a Store's queues of calls waiting for a batch, by pool.
type group[C, R any] struct {
	mu    sync.Mutex
	pools map[uuid.UUID]*groupQueue[C, R]
	// batched counts the calls sent in batches of two or more (tests
	// check that concurrent calls do combine).
	batched atomic.Int64
}

// groupQueue is one pool's queue: the calls waiting, oldest first, and its
// batches being sent or answered (leads handed out but not yet taken up
// count too).
type groupQueue[C, R any] struct {
	calls   []*groupCall[C, R]
	leaders int
}

// groupCall is one queued call: its own part (c) and where its answer
// goes.
type groupCall[C, R any] struct {
	ctx  context.Context
	pool uuid.UUID
	c    C
	// led: a lead was handed to the call and it has not taken it up yet
	// (under group.mu); the lead is then the one value in done.
	led bool
	// done receives the answer, and before it possibly the lead (one of
	// each at most).
	done chan groupAnswer[R]
}

// groupAnswer is a batched call's answer: its result or error, or alone:
// the batch rolled back, run the call by itself; or lead: send the next
// batch; or panicked: the call's own part panicked on the leader's
// goroutine with this value, and panics again on the call's own.
type groupAnswer[R any] struct {
	r        R
	err      error
	alone    bool
	lead     bool
	panicked any
}

// errGroupAlone is do's answer when the call must run alone.
var errGroupAlone = errors.New("run alone")

// do queues call (its ctx, pool and c set) and returns its answer, or
// errGroupAlone when the caller must run it alone (its batch rolled back).
// A panic of the call's own part (answered panicked) goes on here, on the
// call's goroutine, never on a leader's: a leader's call may not be in the
// batch it sends, and must stay to be answered. Should a panic unwind do
// all the same while call is queued, call leaves the queue (passing on a
// lead it holds), so no lead goes to a call nobody waits for.
func (g *group[C, R]) do(s *Store, spec *groupSpec[C, R], ctx context.Context, call *groupCall[C, R]) (R, error) {
	var zero R
	call.ctx, call.done = ctx, make(chan groupAnswer[R], 2)
	returned := false
	defer func() {
		if !returned {
			g.leave(call)
		}
	}()
	g.mu.Lock()
	if g.pools == nil {
		g.pools = map[uuid.UUID]*groupQueue[C, R]{}
	}
	q := g.pools[call.pool]
	if q == nil {
		q = &groupQueue[C, R]{}
		g.pools[call.pool] = q
	}
	q.calls = append(q.calls, call)
	lead := q.leaders < spec.leaders
	if lead {
		q.leaders++
	}
	g.mu.Unlock()
	if lead {
		g.lead(s, spec, ctx, call)
	}
	ctxDone := ctx.Done()
	for {
		select {
		case a := <-call.done:
			if a.lead {
				g.lead(s, spec, ctx, call)
				continue
			}
			returned = true
			if a.panicked != nil {
				panic(a.panicked)
			}
			if a.alone {
				return zero, errGroupAlone
			}
			return a.r, a.err
		case <-ctxDone:
			if !g.leave(call) {
				ctxDone = nil // sent: its answer comes
				continue
			}
			returned = true
			return zero, ctx.Err()
		}
	}
}

// leave takes call, whose context ended, out of its pool's queue, and
// passes on a lead it was handed and has not taken up. It returns false
// when call is no longer queued: it was sent, and its answer comes.
func (g *group[C, R]) leave(call *groupCall[C, R]) bool {
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

// handOff passes the lead of a finished batch of pool to the oldest call
// of q not handed one already, or ends it when there is none (and drops
// the queue once it has neither calls nor leaders). g.mu is held.
func (g *group[C, R]) handOff(pool uuid.UUID, q *groupQueue[C, R]) {
	for _, c := range q.calls {
		if !c.led {
			c.led = true
			c.done <- groupAnswer[R]{lead: true}
			return
		}
	}
	q.leaders--
	if q.leaders == 0 && len(q.calls) == 0 {
		delete(g.pools, pool)
	}
}

// lead sends one batch: the queued calls of leader's pool, up to
// spec.max, in the order they came (leader's own among them, unless
// older ones fill the batch or it may not join them); then hands the
// lead on.
func (g *group[C, R]) lead(s *Store, spec *groupSpec[C, R], ctx context.Context, leader *groupCall[C, R]) {
	g.mu.Lock()
	leader.led = false // taken up
	q := g.pools[leader.pool]
	var batch []*groupCall[C, R]
	rest := q.calls[:0]
	for _, c := range q.calls {
		switch {
		case len(batch) == spec.max:
			rest = append(rest, c)
		case c.ctx.Err() != nil && !c.led:
			c.done <- groupAnswer[R]{err: c.ctx.Err()}
		case spec.joins != nil && !spec.joins(batch, c):
			rest = append(rest, c)
		default:
			// (A call holding a lead it has not taken up goes too: its
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
	if len(batch) > 1 {
		g.batched.Add(int64(len(batch)))
	}
	if len(batch) > 0 {
		// The batch is every call's, not the leader's: the leader's
		// request ending does not cancel it.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), spec.timeout)
		defer cancel()
		spec.send(s, bctx, batch)
	}
}
