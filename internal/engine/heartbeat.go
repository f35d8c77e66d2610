package engine

import (
	"context"
	"sync"
	"time"

	"github.com/docket-run/docket/internal/store"
)

// heartbeat renews the leases of every attempt this node holds, every third
// of the lease duration, in one statement. It learns of cancel requests the
// same way, and at once when a cancel wakeup arrives. A lease found lost has
// its handler's context canceled: the attempt no longer counts.
type heartbeat struct {
	e    *Engine
	kick chan struct{}

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func newHeartbeat(e *Engine) *heartbeat {
	return &heartbeat{e: e, kick: make(chan struct{}, 1)}
}

func (h *heartbeat) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		return nil
	}
	ctx, h.cancel = context.WithCancel(ctx)
	h.done = make(chan struct{})
	cancels, unsubscribe := h.e.store.Subscribe(store.TopicJobCancel)
	go func() {
		defer close(h.done)
		defer unsubscribe()
		h.run(ctx, cancels)
	}()
	return nil
}

func (h *heartbeat) Stop() {
	h.mu.Lock()
	cancel, done := h.cancel, h.done
	h.cancel = nil
	h.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

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
	refs := h.e.runningRefs()
	if len(refs) == 0 {
		return
	}
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
			ex.cancel(ErrCancelRequested)
		}
	}
}
