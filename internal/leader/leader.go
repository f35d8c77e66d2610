// Package leader elects one node per named leadership and runs a set of
// services on it while it holds the term.
//
// A leadership is a TTL lease row in the database, renewed every third of
// the TTL, so a dead leader is replaced within one TTL. Each role has a
// leadership of its own, contended only by the nodes able to do it: the
// engine's maintenance ("default") by every worker, the outbox relay
// ("events") by the processes with an event bus, webhook delivery
// ("webhooks") by the processes running webhooks. One shared leadership
// would let a node without the role win it and starve the role.
package leader

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// Log attribute keys.
const (
	attrService    = "service"
	attrLeadership = "leadership"
	attrError      = "error"
)

// The leaderships docket elects.
const (
	Maintenance = "default" // rescuer, scheduler, pruner: every worker
	Events      = "events"  // the outbox relay to the event bus
	Webhooks    = "webhooks"
)

// TTLMin is the shortest term a leadership may have. An elector attempts
// every third of the TTL, so a TTL under 3 ns would be no interval at all
// (time.NewTicker panics on it); well above that, a term much shorter
// than a database round trip would expire while it is being renewed.
const TTLMin = 100 * time.Millisecond

// Store is what an elector needs of the database.
type Store interface {
	LeaderAttemptElect(ctx context.Context, p *store.LeaderElectParams) (bool, error)
	LeaderResign(ctx context.Context, p *store.LeaderResignParams) error
}

// Config of an Elector.
type Config struct {
	Name   string // the leadership
	NodeID string
	TTL    time.Duration
	Store  Store
	Logger *slog.Logger
	Now    func() time.Time
	// Services run while this node leads: started at the start of each
	// term, stopped at its end.
	Services []service.Service
}

// Elector tries to become (or stay) leader every third of the TTL and runs
// the services while it leads. Each attempt has a deadline of a third of
// the TTL: a renewal that hangs (a lock, a dead connection) ends the term
// here, with the services stopped, before the row expires and another node
// may take it.
type Elector struct {
	loop *service.Loop // of attempt; its final step is stepDown
	cfg  Config
	log  *slog.Logger

	mu      sync.Mutex
	leading bool
	// standBy: after its services failed to start, this node does not
	// stand for election until then, so that another node (whose attempts
	// may fall in step with its own) gets the role. Used by the loop only.
	standBy time.Time
}

// New makes an elector; Start runs it (the first attempt is at once).
func New(cfg Config) *Elector {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	el := &Elector{cfg: cfg, log: cfg.Logger.With(attrService, "elector", attrLeadership, cfg.Name)}
	el.loop = &service.Loop{Name: "elector " + cfg.Name, Interval: cfg.TTL / 3, Fn: el.attempt, Final: el.stepDown}
	return el
}

// Start runs the elector; its first attempt is at once.
func (el *Elector) Start(ctx context.Context) error { return el.loop.Start(ctx) }

// Stop ends the loop, stops the services and gives the leadership up if
// this node holds it. Safe to call twice and before Start.
func (el *Elector) Stop() { el.loop.Stop() }

// stepDown is the elector's final step, after its loop ended.
func (el *Elector) stepDown(ctx context.Context) {
	if el.setLeading(false) {
		service.StopAll(el.cfg.Services...)
	}
	// Also when not leading: a term this node still holds (its services
	// failed to start, or it stepped down) is handed over at once. The
	// delete is guarded by the node id.
	el.resign(ctx)
}

// resign gives the leadership up if this node holds it, so another node
// takes it at its next attempt instead of after the TTL. It runs also
// when ctx is done (the elector is stopping), within a third of the TTL:
// by then the term runs out anyway.
func (el *Elector) resign(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), el.cfg.TTL/3)
	defer cancel()
	if err := el.cfg.Store.LeaderResign(ctx, &store.LeaderResignParams{Name: el.cfg.Name, NodeID: el.cfg.NodeID}); err != nil {
		el.log.Warn("resign leadership failed", attrError, err)
	}
}

// Leading reports whether this node holds the leadership now.
func (el *Elector) Leading() bool {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.leading
}

// setLeading sets the flag and returns its previous value.
func (el *Elector) setLeading(v bool) bool {
	el.mu.Lock()
	defer el.mu.Unlock()
	was := el.leading
	el.leading = v
	return was
}

func (el *Elector) attempt(ctx context.Context) {
	if el.cfg.Now().Before(el.standBy) {
		return
	}
	actx, cancel := context.WithTimeout(ctx, el.cfg.TTL/3)
	ok, err := el.cfg.Store.LeaderAttemptElect(actx, &store.LeaderElectParams{
		Name: el.cfg.Name, NodeID: el.cfg.NodeID, TTL: el.cfg.TTL, Now: el.cfg.Now(),
	})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return // stopping
		}
		el.log.Warn("leader election failed", attrError, err)
		ok = false // cannot prove the term was renewed: step down to be safe
	}
	leading := el.Leading()
	switch {
	case ok && !leading:
		el.log.Info("elected leader; starting its services")
		if err := service.StartAll(ctx, el.cfg.Services...); err != nil {
			// Holding the term without doing its work would starve the
			// role: give it to a node that can.
			el.log.Error("start leader services failed; resigning", attrError, err)
			el.resign(ctx)
			el.standBy = el.cfg.Now().Add(el.cfg.TTL)
			return
		}
		el.setLeading(true)
	case !ok && leading:
		el.log.Info("lost leadership; stopping its services")
		el.setLeading(false)
		service.StopAll(el.cfg.Services...)
		el.resign(ctx) // if the term was ours after all (a renewal that timed out)
	}
}
