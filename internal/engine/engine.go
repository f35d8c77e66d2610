package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/leader"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// Log attribute keys.
const (
	attrService = "service"
	attrQueue   = "queue"
	attrJobID   = "job_id"
	attrAttempt = "attempt"
	attrError   = "error"
	attrCount   = "count"
)

// Engine runs this node's share of the work: a producer per configured
// queue, the completer, lease heartbeats, node registration, and — while this
// node is leader — the maintenance services.
type Engine struct {
	cfg      Config
	store    Store
	handlers map[string]*Handler
	log      *slog.Logger

	completer *completer
	heartbeat *heartbeat
	producers map[string]*producer
	services  []Service // started before the producers, stopped after them

	// life is held through Start and Stop, so they never interleave.
	life    sync.Mutex
	started bool // under life
	stopped bool // under life: an engine runs once

	mu      sync.Mutex
	running map[job.Ref]*execution
	idle    *sync.Cond // signalled when running shrinks

	executors *executors // run the attempts
}

// New makes an engine. handlers maps job types to their handlers.
func New(st Store, cfg Config, handlers map[string]*Handler) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("engine config: %w", err)
	}
	e := &Engine{
		cfg:       cfg,
		store:     st,
		handlers:  handlers,
		log:       cfg.Logger,
		producers: map[string]*producer{},
		running:   map[job.Ref]*execution{},
	}
	e.idle = sync.NewCond(&e.mu)
	e.executors = newExecutors(e.execute)
	e.completer = newCompleter(e)
	e.heartbeat = newHeartbeat(e)
	for q, n := range cfg.Queues {
		e.producers[q] = newProducer(e, q, n)
	}
	e.services = []Service{
		newNodeRegistry(e),
		newElector(e),
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Leaderships)) {
		e.services = append(e.services, leader.New(leader.Config{
			Name: name, NodeID: cfg.NodeID, TTL: cfg.LeaderTTL,
			Store: st, Logger: cfg.Logger, Now: cfg.Now, Services: cfg.Leaderships[name],
		}))
	}
	return e, nil
}

// NodeID is this engine's node id (lease owner).
func (e *Engine) NodeID() string { return e.cfg.NodeID }

// Config is the effective configuration (defaults applied).
func (e *Engine) Config() Config { return e.cfg }

// Start launches every service. It returns at once. Canceling ctx stops
// acquisition only: running handlers finish, their completions are written
// and their leases renewed until Stop, which must still be called. If a
// service fails to start (the node cannot register: the database does not
// answer), those already started are stopped before Start returns the
// error, and the engine is as it was before: Start may be called again and
// runs it like a fresh one. An engine runs once: Start after Stop is an
// error.
func (e *Engine) Start(ctx context.Context) error {
	e.life.Lock()
	defer e.life.Unlock()
	switch {
	case e.stopped:
		return errors.New("start engine: stopped engines do not start again")
	case e.started:
		return nil
	}
	services := append(append([]Service(nil), e.cfg.Services...), e.completer, e.heartbeat)
	services = append(services, e.services...)
	if err := service.StartAll(context.WithoutCancel(ctx), services...); err != nil {
		return fmt.Errorf("start engine: %w", err)
	}
	producers := make([]Service, 0, len(e.producers))
	for _, p := range e.producers {
		producers = append(producers, p)
	}
	if err := service.StartAll(ctx, producers...); err != nil {
		service.StopAll(services...)
		return fmt.Errorf("start engine: %w", err)
	}
	e.started = true
	return nil
}

// Stop shuts down gracefully: acquisition stops at once; running handlers
// may finish until ctx is done; then their contexts are canceled and, after
// a short grace, leases still held are given back (RETRY, due now) so another
// node can take them. Completions are flushed before Stop returns. Safe to
// call twice and before Start; a second Stop returns once the first is done.
func (e *Engine) Stop(ctx context.Context) {
	e.life.Lock()
	defer e.life.Unlock()
	if !e.started {
		return
	}
	e.started, e.stopped = false, true

	for _, p := range e.producers {
		p.Stop()
	}
	if !e.waitIdle(ctx) {
		e.cancelAll(errShutdown)
		grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		idle := e.waitIdle(grace)
		cancel()
		if !idle {
			release, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			e.releaseAll(release)
			cancel()
		}
	}
	e.completer.Stop()
	e.heartbeat.Stop()
	service.StopAll(e.services...)
	service.StopAll(e.cfg.Services...)
	e.executors.close()
}

// waitIdle waits until nothing runs (true) or ctx is done (false).
func (e *Engine) waitIdle(ctx context.Context) bool {
	stop := context.AfterFunc(ctx, func() {
		e.mu.Lock()
		e.idle.Broadcast()
		e.mu.Unlock()
	})
	defer stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.running) > 0 {
		if ctx.Err() != nil {
			return false
		}
		e.idle.Wait()
	}
	return true
}

func (e *Engine) cancelAll(cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ex := range e.running {
		ex.cancel(cause)
	}
}

// releaseAll gives back the leases of handlers that ignored cancellation.
// Their late results are fenced: the attempt no longer holds the lease.
func (e *Engine) releaseAll(ctx context.Context) {
	e.mu.Lock()
	var params []*store.JobFinishParams
	var exs []*execution
	for _, ex := range e.running {
		if ex.returned.Load() {
			continue // its completion waits in the completer, flushed at Stop
		}
		params = append(params, e.retryOrDead(ex, job.OutcomeInterrupted, "worker shut down before the handler returned", true))
		exs = append(exs, ex)
	}
	e.mu.Unlock()
	if len(params) == 0 {
		return
	}
	applied, err := e.store.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: params, Now: e.cfg.Now()})
	if err != nil {
		e.log.Warn("release leases at shutdown failed; the rescuer will retry them", attrService, "engine", attrError, err)
	}
	for i, ex := range exs {
		if err == nil && applied[i] != "" {
			e.observe(ex.row, params[i])
		}
		e.finished(ex)
	}
}

// observe reports an applied attempt end to Config.OnFinish.
func (e *Engine) observe(row *job.Row, fin *store.JobFinishParams) {
	if e.cfg.OnFinish != nil {
		e.cfg.OnFinish(row, fin)
	}
}

// finished removes an execution from the running set and frees its slot.
func (e *Engine) finished(ex *execution) { e.finishedAll([]pendingFinish{{ex: ex}}) }

// finishedAll removes the executions of a batch from the running set and
// frees their slots: the running set locked once, and each producer's
// slots freed in one step (a lock and a wakeup per job were 3 % of the
// process's CPU in the burn benchmark).
func (e *Engine) finishedAll(batch []pendingFinish) {
	type freed struct {
		p *producer
		n int
	}
	var (
		local [4]freed // producers are few: one per queue
		frees = local[:0]
	)
	e.mu.Lock()
	for _, pf := range batch {
		ex := pf.ex
		_, ok := e.running[ex.ref]
		delete(e.running, ex.ref)
		if !ok || ex.producer == nil {
			continue
		}
		i := 0
		for i < len(frees) && frees[i].p != ex.producer {
			i++
		}
		if i == len(frees) {
			frees = append(frees, freed{p: ex.producer})
		}
		frees[i].n++
	}
	if len(e.running) == 0 {
		e.idle.Broadcast()
	}
	e.mu.Unlock()
	for _, f := range frees {
		f.p.slotsFreed(f.n)
	}
}

// runningRefs lists the attempts this node holds (including those whose
// completion is waiting for the next flush: they still need their lease)
// that keep is true of, given the end of their lease as last known (unix
// nanoseconds, engine clock).
func (e *Engine) runningRefs(keep func(ref job.Ref, leaseExpires int64) bool) []job.Ref {
	e.mu.Lock()
	defer e.mu.Unlock()
	var refs []job.Ref
	for ref, ex := range e.running {
		if keep(ref, ex.leaseExpires.Load()) {
			refs = append(refs, ref)
		}
	}
	return refs
}

func (e *Engine) lookup(ref job.Ref) *execution {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running[ref]
}

func defaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
