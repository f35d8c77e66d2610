package engine

import (
	"context"
	"time"

	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// heartbeat renews the leases of every attempt this node holds, every third
// of the lease duration, in one statement. It learns of cancel requests the
// same way, and at once when a cancel wakeup arrives. A lease found lost has
// its handler's context canceled: the attempt no longer counts.
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
		case <-cancels:
		}
		h.beat(ctx)
	}
}

func (h *heartbeat) beat(ctx context.Context) {
	defer h.expire()
	refs := h.e.runningRefs()
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
