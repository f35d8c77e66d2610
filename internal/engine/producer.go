package engine

import (
	"context"
	"sync"
	"time"

	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// producer acquires jobs of one queue for this node, never more than the
// queue's concurrency at once. It fetches when a wakeup says work arrived,
// when its last fetch came back full (there is a backlog) and enough slots
// are free, or when the fallback poll interval passes.
type producer struct {
	e     *Engine
	queue string
	limit int

	wake  chan struct{} // work may be available
	freed chan struct{} // a slot came free

	mu     sync.Mutex
	active int
	life   service.Lifecycle
}

func newProducer(e *Engine, queue string, limit int) *producer {
	return &producer{
		e: e, queue: queue, limit: limit,
		wake:  make(chan struct{}, 1),
		freed: make(chan struct{}, 1),
	}
}

func (p *producer) Start(ctx context.Context) error {
	return p.life.Start(ctx, func(ctx context.Context, r *service.Run) error {
		wakeups, unsubscribe := p.e.store.Subscribe(store.TopicJobAvailable)
		r.Go(func() {
			defer unsubscribe()
			for {
				select {
				case <-ctx.Done():
					return
				case q := <-wakeups:
					if q == "" || q == p.queue {
						signal(p.wake)
					}
				}
			}
		})
		r.Go(func() { p.run(ctx) })
		return nil
	})
}

// Stop stops acquiring. Jobs already running are the engine's to finish.
func (p *producer) Stop() { p.life.Stop() }

func (p *producer) slotsFreed(n int) {
	p.mu.Lock()
	p.active -= n
	p.mu.Unlock()
	signal(p.freed)
}

func (p *producer) free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limit - p.active
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// eagerFetchBelow: a wakeup after a fetch that acquired fewer jobs than
// this fetches at once, without waiting out FetchCooldown. A burst of
// single inserts soon makes fetches larger than this (each takes what
// arrived during the one before), and the cooldown applies again.
const eagerFetchBelow = 4

func (p *producer) run(ctx context.Context) {
	poll := time.NewTimer(0) // fetch once at start
	defer poll.Stop()
	batch := min(p.e.cfg.FetchBatch, p.limit)
	// With a backlog, wait for this many free slots before fetching again,
	// so one query serves many slots instead of one query per completion.
	refill := max(1, batch/2)
	backlog := false
	var last time.Time // start of the last fetch
	got := 0           // jobs the last fetch acquired
	for {
		free := p.free()
		fetch := false
		switch {
		case free == 0:
			// Wait for a slot; wakeups are remembered in p.wake.
			select {
			case <-ctx.Done():
				return
			case <-p.freed:
			}
			continue
		case backlog && free >= refill:
			fetch = true
		}
		if !fetch {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			case <-poll.C:
			case <-p.freed:
				if !backlog || p.free() < refill {
					continue
				}
			}
			// Debounce: within the cooldown of the last fetch, wait for
			// the rest of it; wakeups meanwhile are folded into this fetch.
			// Not when the last fetch found only a few jobs: the queue is
			// quiet, and the job that woke it should start now (what
			// arrives during this fetch makes the next one larger, which
			// brings the cooldown back under a burst).
			if wait := p.e.cfg.FetchCooldown - time.Since(last); wait > 0 && got >= eagerFetchBelow {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
		last = time.Now()
		want := min(p.free(), batch)
		n := p.fetch(ctx, want)
		backlog = n > 0 && n == want
		got = n
		poll.Reset(p.e.cfg.PollInterval)
	}
}

// fetch acquires up to n jobs and launches them; it returns how many came.
func (p *producer) fetch(ctx context.Context, n int) int {
	if n <= 0 {
		return 0
	}
	rows, err := p.e.store.JobAcquire(ctx, &store.JobAcquireParams{
		Queue: p.queue, Max: n, Owner: p.e.cfg.NodeID,
		LeaseDuration: p.e.cfg.LeaseDuration, Now: p.e.cfg.Now(),
	})
	if err != nil {
		if ctx.Err() == nil {
			p.e.log.Warn("acquire jobs failed", attrService, "producer", attrQueue, p.queue, attrError, err)
		}
		return 0
	}
	if len(rows) == 0 {
		return 0
	}
	p.mu.Lock()
	p.active += len(rows)
	p.mu.Unlock()
	p.e.launch(ctx, p, rows)
	return len(rows)
}
