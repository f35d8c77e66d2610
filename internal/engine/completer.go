package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// completer writes the ends of attempts in batches: a flush happens when
// CompleteBatch are pending or CompleteInterval after the first of them,
// whichever comes first; completions arriving during a flush make the next
// batch. Under a light load a workflow step's completion does not wait
// (see eagerBelow): it is written at once, with its run's advancement in
// the same transaction (Config.JobsEndedTx). A job leaves the running set
// (and stops being heartbeated) only after its completion is committed,
// so a crash before the flush means the lease expires and the job runs
// again: at least once, never lost.
type completer struct {
	e *Engine
	// mu guards the completions handed in and not yet taken by run: a
	// slice taken a batch at a time, where a channel cost a send and a
	// receive per completion (selectgo was 4 % of the process's CPU in
	// the burn benchmark).
	mu      sync.Mutex
	pending []pendingFinish
	// urgent counts the pending completions Config.JobsEndedTx matches
	// (marked as such by add, so that take need not match them again).
	urgent int
	// eager is run's mode (see eagerBelow), for add to tell when an
	// urgent completion must wake it.
	eager bool
	// closed: the current run has stopped and late completions are
	// dropped. Each Start opens again; until the first Start completions
	// wait in pending.
	closed bool
	// wake holds a token when run may have something new to look at: the
	// first pending completion, CompleteBatch of them, or an urgent one
	// while eager. A token run finds with nothing new costs it a look.
	wake    chan struct{}
	life    service.Lifecycle
	endedMu sync.Mutex // flushes of inline batches run beside the loop's
	ended   []*job.Row // flush's buffer for OnJobsEnded
	// slots bounds the inline batches written at once
	// (JobsEndedHook.Concurrency), each by a goroutine of its own,
	// counted by inflight.
	slots    chan struct{}
	inflight sync.WaitGroup
}

type pendingFinish struct {
	ex     *execution
	fin    *store.JobFinishParams
	urgent bool // JobsEndedTx matches the job (isUrgent)
}

func newCompleter(e *Engine) *completer {
	inline := 1
	if h := e.cfg.JobsEndedTx; h != nil && h.Concurrency > 1 {
		inline = h.Concurrency
	}
	return &completer{e: e, eager: true, wake: make(chan struct{}, 1), slots: make(chan struct{}, inline)}
}

// add queues one completion. It never waits: an executor is free for the
// next attempt at once (back pressure when the database is slow comes from
// the slots, which a job holds until its completion is written). After
// Stop the completion is dropped: its lease was given back at shutdown, so
// the attempt no longer counts.
func (c *completer) add(ex *execution, fin *store.JobFinishParams) {
	urgent := c.isUrgent(ex)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.e.finished(ex)
		return
	}
	c.pending = append(c.pending, pendingFinish{ex: ex, fin: fin, urgent: urgent})
	n := len(c.pending)
	wake := n == 1 || n == c.e.cfg.CompleteBatch || urgent && c.eager && c.urgent == 0
	if urgent {
		c.urgent++
	}
	c.mu.Unlock()
	if wake {
		signal(c.wake)
	}
}

// isUrgent reports whether Config.JobsEndedTx matches ex's job (a workflow
// step's, whose run waits for its end).
func (c *completer) isUrgent(ex *execution) bool {
	hook := c.e.cfg.JobsEndedTx
	return hook != nil && hook.Match(ex.row)
}

// look returns how many completions are pending and whether one is
// urgent.
func (c *completer) look() (n int, urgent bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending), c.urgent > 0
}

// take returns up to max pending completions, the oldest first, in batch
// (empty, and cleared: it becomes the queue when everything is taken), and
// sets the mode add sees from the batch's size (see eagerBelow).
func (c *completer) take(batch []pendingFinish, max int) []pendingFinish {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) <= max {
		batch, c.pending = c.pending, batch[:0]
		c.urgent = 0
	} else {
		batch = append(batch[:0], c.pending[:max]...)
		rest := copy(c.pending, c.pending[max:])
		clear(c.pending[rest:])
		c.pending = c.pending[:rest]
		if c.urgent > 0 {
			for _, p := range batch {
				if p.urgent {
					c.urgent--
				}
			}
		}
	}
	c.eager = len(batch) < eagerBelow
	return batch
}

func (c *completer) Start(ctx context.Context) error {
	return c.life.Start(ctx, func(ctx context.Context, r *service.Run) error {
		c.mu.Lock()
		c.closed, c.eager = false, true // as run starts
		c.mu.Unlock()
		r.Go(func() { c.run(ctx) })
		r.OnStop(func(context.Context) {
			c.mu.Lock()
			c.closed = true
			c.mu.Unlock()
		})
		return nil
	})
}

// Stop flushes what is pending and stops. Call it after every execution has
// handed in its completion.
func (c *completer) Stop() { c.life.Stop() }

// eagerBelow: while the batches stay smaller than this (a light load),
// a batch that holds a job Config.JobsEndedTx matches (a workflow step's
// job, whose run waits for its end) is flushed as soon as that job's
// completion arrives, with the completions queued behind it, instead of
// CompleteInterval after the batch's first. A batch of this many or more
// means completions arrive faster than a commit takes: the completer
// collects for CompleteInterval again, which keeps batches large (few
// commits) at full speed. Eagerly, a batch holds what arrived during the
// previous commit, so it reaches eagerBelow at about eagerBelow
// completions per commit time (some thousands a second); collecting, it
// falls below under eagerBelow per CompleteInterval plus a commit (about
// a thousand a second): the two modes do not flap. Without the hook, or
// for batches of plain jobs only, nothing changes: they wait out
// CompleteInterval as always.
const eagerBelow = 8

func (c *completer) run(ctx context.Context) {
	max := c.e.cfg.CompleteBatch
	batch := make([]pendingFinish, 0, max)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	eager := true
	for {
		// Once stopped, whatever is pending is written by drain, which
		// closes the queue in the same step: with completions still
		// arriving, the loop below would otherwise keep flushing them.
		if ctx.Err() != nil {
			c.drain(ctx)
			return
		}
		// Wait for the first completion.
		n, urgent := c.look()
		for n == 0 {
			select {
			case <-ctx.Done():
				c.drain(ctx)
				return
			case <-c.wake:
			}
			n, urgent = c.look()
		}
		now := eager && urgent
		if !now && n < max {
			// Collect for CompleteInterval, until CompleteBatch are
			// pending or (eager) an urgent one is.
			timer.Reset(c.e.cfg.CompleteInterval)
		collect:
			for {
				select {
				case <-c.wake:
				case <-timer.C:
					break collect
				case <-ctx.Done():
					break collect
				}
				n, urgent = c.look()
				if eager && urgent {
					now = true
					break collect
				}
				if n >= max {
					break collect
				}
			}
			timer.Stop()
		}
		if now {
			// Written by a goroutine of its own (at most
			// JobsEndedHook.Concurrency at once), with the runs'
			// advancement; the loop goes on collecting. The slot comes
			// first and the completions are taken after it: what
			// arrived while the previous transaction was being written
			// goes in this one (group commit), rather than waiting for
			// one more transaction.
			select {
			case c.slots <- struct{}{}:
			case <-ctx.Done():
				c.drain(ctx)
				return
			}
		}
		batch = c.take(batch[:0], max)
		eager = len(batch) < eagerBelow
		if now {
			b := slices.Clone(batch)
			c.inflight.Add(1)
			go func() {
				defer c.inflight.Done()
				defer func() { <-c.slots }()
				if !c.flushInline(ctx, b) {
					c.flush(ctx, b)
				}
			}()
			clear(batch)
			continue
		}
		c.flush(ctx, batch)
		clear(batch) // keep no executions alive
	}
}

// drain flushes everything still pending, at shutdown, and closes the
// queue: a completion handed in later is dropped. ctx is done, so a
// database that cannot be reached gets a few tries, not forever: the jobs
// then run again after their leases expire.
func (c *completer) drain(ctx context.Context) {
	c.mu.Lock()
	batch := c.pending
	c.pending, c.urgent, c.closed = nil, 0, true
	c.mu.Unlock()
	if len(batch) > 0 {
		c.flush(ctx, batch)
	}
	c.inflight.Wait() // the inline batches still being written
}

// flush writes one batch, retrying while the database is unreachable. When
// the database answers but keeps refusing the batch, one completion in it is
// bad: the batch is split and flushed one by one, and a completion refused
// on its own is dropped (logged) — its lease expires and the job is retried,
// instead of one row stalling every completion. At shutdown (ctx done) it
// tries a bounded number of times, then leaves the jobs to the rescuer: they
// run again, never lost.
func (c *completer) flush(ctx context.Context, batch []pendingFinish) {
	params := make([]*store.JobFinishParams, len(batch))
	for i, p := range batch {
		params[i] = p.fin
	}
	delay := 50 * time.Millisecond
	for try := 1; ; try++ {
		timeout := 30 * time.Second
		if ctx.Err() != nil {
			timeout = 5 * time.Second // shutting down: do not hold Stop long
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		applied, err := c.e.store.JobFinishMany(wctx, &store.JobFinishManyParams{Jobs: params, Now: c.e.cfg.Now()})
		cancel()
		if err == nil {
			c.jobsEnded(batch, applied, false)
			c.settle(batch, applied)
			return
		}
		c.e.log.Error("write completions failed", attrService, "completer", attrCount, len(batch), attrError, err)
		if try >= 3 && c.databaseUp(ctx) {
			if len(batch) > 1 {
				for _, p := range batch {
					c.flush(ctx, []pendingFinish{p})
				}
				return
			}
			c.e.log.Error("completion refused by the database; the job will run again when its lease expires",
				attrService, "completer", attrJobID, batch[0].fin.ID.String(), attrAttempt, batch[0].fin.Attempt, attrError, err)
			c.e.finished(batch[0].ex)
			return
		}
		if ctx.Err() != nil && try >= 3 {
			c.e.finishedAll(batch)
			return
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// flushInline writes a batch flushed at once (light load) in one
// transaction with Config.JobsEndedTx's handling of the jobs it matches,
// and reports whether it did. It does not when nothing matches (the
// batch takes the usual statement) or when that transaction fails: then
// flush writes the batch, and OnJobsEnded gets every job. It tries once:
// the fallback is the path that retries.
func (c *completer) flushInline(ctx context.Context, batch []pendingFinish) bool {
	hook := c.e.cfg.JobsEndedTx
	if hook == nil || ctx.Err() != nil {
		return false
	}
	// add marked the jobs the hook matches (urgent).
	if !slices.ContainsFunc(batch, func(p pendingFinish) bool { return p.urgent }) {
		return false
	}
	params := make([]*store.JobFinishParams, len(batch))
	for i, p := range batch {
		params[i] = p.fin
	}
	var applied []job.State
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := c.e.store.InTx(wctx, func(ctx context.Context, tx store.Tx) error {
		if hook.Lock != nil {
			var rows []*job.Row
			for _, p := range batch {
				if p.urgent {
					rows = append(rows, p.ex.row)
				}
			}
			if err := hook.Lock(ctx, tx, rows); err != nil {
				return err
			}
		}
		var err error
		applied, err = tx.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: params, Now: c.e.cfg.Now()})
		if err != nil {
			return err
		}
		var rows []*job.Row
		for i, p := range batch {
			if p.urgent && applied[i] != "" && applied[i].Terminal() {
				rows = append(rows, p.ex.row)
			}
		}
		if len(rows) == 0 {
			return nil
		}
		return hook.Handle(ctx, tx, rows)
	})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			c.e.log.Warn("write completions with their workflow advancement failed; writing them alone",
				attrService, "completer", attrCount, len(batch), attrError, err)
		}
		return false
	}
	c.jobsEnded(batch, applied, true)
	c.settle(batch, applied)
	return true
}

// settle observes a committed batch and lets its executions go.
func (c *completer) settle(batch []pendingFinish, applied []job.State) {
	for i, p := range batch {
		if applied[i] != "" {
			c.e.observe(p.ex.row, p.fin)
		} else {
			c.e.log.Warn("completion fenced: the lease was lost before it was written",
				attrService, "completer", attrJobID, p.fin.ID.String(), attrAttempt, p.fin.Attempt)
		}
	}
	c.e.finishedAll(batch)
}

// jobsEnded hands the jobs of a committed batch that ended to
// Config.OnJobsEnded. The cost for plain jobs is a loop over the batch
// with no query and no allocation after the first batch (the slice is
// reused): the callback tells step jobs by their payload's first bytes and
// queues only their runs, so a batch without step jobs costs a few byte
// comparisons per job.
// inTx: the batch was written with Config.JobsEndedTx's handling of the
// jobs it matches (marked urgent by add), which are then left out.
func (c *completer) jobsEnded(batch []pendingFinish, applied []job.State, inTx bool) {
	if c.e.cfg.OnJobsEnded == nil {
		return
	}
	c.endedMu.Lock()
	defer c.endedMu.Unlock()
	c.ended = c.ended[:0]
	for i, p := range batch {
		if applied[i] != "" && applied[i].Terminal() && !(inTx && p.urgent) {
			c.ended = append(c.ended, p.ex.row)
		}
	}
	if len(c.ended) > 0 {
		c.e.cfg.OnJobsEnded(c.ended)
	}
	clear(c.ended) // keep no rows alive
}

func (c *completer) databaseUp(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return c.e.store.Ping(pctx) == nil
}
