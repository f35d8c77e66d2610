package engine

import (
	"context"
	"math"
	"time"

	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// heartbeat renews the leases of the attempts this node holds, every third
// of the lease duration, in one statement. It learns of cancel requests the
// same way, and at once when a cancel wakeup arrives. A lease found lost has
// its handler's context canceled: the attempt no longer counts.
//
// A tick skips the leases taken or renewed less than a sixth of the lease
// duration ago (freshLease): most attempts of short jobs end before their
// lease needs renewing, and renewing them anyway rewrote every row in flight
// every tick (a new row version and two index entries each, and row locks
// the finishing statement then waits on). A skipped lease has more than
// half the duration left at the next tick, so two renewals in a row can
// still fail before it is lost, as without the skip; the last try then
// has more than a sixth of the duration left instead of a third. A cancel
// wakeup renews every lease: that is how the attempt learns of the
// request (a tick is the fallback when a wakeup is missed, for a fresh
// lease one tick later than before).
type heartbeat struct {
	e    *Engine
	kick chan struct{}
	life service.Lifecycle
}

func newHeartbeat(e *Engine) *heartbeat {
	return &heartbeat{e: e, kick: make(chan struct{}, 1)}
}

func (h *heartbeat) Start(ctx context.Context) error {
	return h.life.Start(ctx, func(ctx context.Context, r *service.Run) error {
		cancels, unsubscribe := h.e.store.Subscribe(store.TopicJobCancel)
		r.Go(func() {
			defer unsubscribe()
			h.run(ctx, cancels)
		})
		return nil
	})
}

func (h *heartbeat) Stop() { h.life.Stop() }

func (h *heartbeat) run(ctx context.Context, cancels <-chan string) {
	t := time.NewTicker(h.e.cfg.LeaseDuration / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.beat(ctx, h.e.cfg.Now().Add(h.e.cfg.LeaseDuration-freshLease(h.e.cfg.LeaseDuration)).UnixNano())
		case <-cancels:
			h.beat(ctx, math.MaxInt64)
		}
	}
}

// freshLease: a tick does not renew a lease taken or renewed less than
// this long ago (a sixth of the lease duration).
func freshLease(lease time.Duration) time.Duration { return lease / 6 }

// beat renews the leases that end at or before until (unix nanoseconds,
// engine clock).
func (h *heartbeat) beat(ctx context.Context, until int64) {
	defer h.expire()
	refs := h.e.runningRefs(until)
	if len(refs) == 0 {
		return
	}
	// A renewal that takes longer than a third of the lease is useless:
	// give up and try again at the next tick.
	ctx, cancel := context.WithTimeout(ctx, h.e.cfg.LeaseDuration/3)
	defer cancel()
	res, err := h.e.store.JobHeartbeat(ctx, &store.JobHeartbeatParams{
		Jobs: refs, LeaseDuration: h.e.cfg.LeaseDuration, Now: h.e.cfg.Now(),
	})
	if err != nil {
		h.e.log.Warn("renew leases failed", attrService, "heartbeat", attrCount, len(refs), attrError, err)
		return
	}
	for _, r := range res {
		ex := h.e.lookup(r.Ref)
		if ex == nil {
			continue
		}
		switch {
		case !r.Extended:
			ex.cancel(errLeaseLost)
		case r.CancelRequested:
			ex.leaseExpires.Store(r.LeaseExpiresAt.UnixNano())
			ex.cancel(ErrCancelRequested)
		default:
			ex.leaseExpires.Store(r.LeaseExpiresAt.UnixNano())
		}
	}
}

// expire cancels handlers whose lease has run out without a renewal (the
// database was unreachable, or renewals were too slow): from then on the
// leader may rescue the job and another node run it, so this attempt must
// stop rather than run alongside. Its result will be fenced anyway.
func (h *heartbeat) expire() {
	now := h.e.cfg.Now().UnixNano()
	h.e.mu.Lock()
	defer h.e.mu.Unlock()
	for _, ex := range h.e.running {
		if !ex.returned.Load() && now >= ex.leaseExpires.Load() {
			ex.cancel(errLeaseLost)
		}
	}
}
