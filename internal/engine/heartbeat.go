package engine

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// heartbeat renews the leases of the attempts this node holds, in one
// statement. A lease is renewed once a quarter of the lease duration has
// passed since it was taken or last renewed (renewAge), and the heartbeat
// looks every sixth of it (heartbeatEvery), so a lease is renewed when
// between a quarter and five twelfths of it has passed: with more than
// seven twelfths of it left.
//
// Most attempts of short jobs therefore end without a renewal. Renewing
// every lease every third of the duration, as before, rewrote the row of
// every attempt in flight (a new row version and two index entries each,
// and row locks the finishing statement then waits on) only to find most
// of them finished a moment later. A renewal gives up after a sixth of the
// duration, so even when each one hangs until then, the fourth try in a
// row still starts before the lease ends: three renewals in a row can fail
// (the database unreachable) before it is lost. Renewing everything every
// third, with a third as the timeout, left room for two.
//
// The heartbeat learns of cancel requests the same way: at once when a
// cancel wakeup arrives, by renewing the leases of the jobs it names (all of
// them when a wakeup names none: anything may have changed), else at the
// job's next renewal, at most five twelfths of the duration after it was
// taken or last renewed. A lease found lost has its handler's context
// canceled: the attempt no longer counts.
type heartbeat struct {
	e    *Engine
	life service.Lifecycle
}

func newHeartbeat(e *Engine) *heartbeat { return &heartbeat{e: e} }

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

// renewAge: a lease is renewed once this much of it has passed (a quarter
// of the lease duration); heartbeatEvery: how often the heartbeat looks,
// and how long a renewal may take.
func renewAge(lease time.Duration) time.Duration       { return lease / 4 }
func heartbeatEvery(lease time.Duration) time.Duration { return lease / 6 }

func (h *heartbeat) run(ctx context.Context, cancels <-chan string) {
	lease := h.e.cfg.LeaseDuration
	t := time.NewTicker(heartbeatEvery(lease))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			due := h.e.cfg.Now().Add(lease - renewAge(lease)).UnixNano()
			h.beat(ctx, h.e.runningRefs(func(_ job.Ref, leaseExpires int64) bool { return leaseExpires <= due }))
		case id := <-cancels:
			ids, all := canceledIDs(id, cancels)
			h.beat(ctx, h.e.runningRefs(func(ref job.Ref, _ int64) bool { return all || ids[ref.ID] }))
		}
	}
}

// canceledIDs are the job ids of a cancel wakeup whose payload is first and
// of the wakeups already queued behind it; all when one of them names no
// job (or not a valid id): then every lease is renewed.
func canceledIDs(first string, more <-chan string) (ids map[uuid.UUID]bool, all bool) {
	ids = map[uuid.UUID]bool{}
	add := func(s string) {
		id, err := uuid.Parse(s)
		if err != nil {
			all = true
			return
		}
		ids[id] = true
	}
	add(first)
	for {
		select {
		case s := <-more:
			add(s)
		default:
			return ids, all
		}
	}
}

// beat renews the leases of refs.
func (h *heartbeat) beat(ctx context.Context, refs []job.Ref) {
	defer h.expire()
	if len(refs) == 0 {
		return
	}
	// A renewal that takes longer than the time between two looks holds
	// up the next: give up and try again at once.
	ctx, cancel := context.WithTimeout(ctx, heartbeatEvery(h.e.cfg.LeaseDuration))
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
