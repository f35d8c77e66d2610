package engine

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/leader"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// maintenanceBatch bounds the rows one maintenance statement touches.
const maintenanceBatch = 1000

// nodeRegistry keeps this node's row in the nodes table fresh and removes
// it when the engine stops. Start registers the node before it returns, so
// an engine whose database does not answer (within a heartbeat interval)
// fails to start; the next heartbeat is one interval later. Registering
// is part of the run's start (service.Lifecycle), so concurrent Starts
// register once and a Start never interleaves with a Stop.
type nodeRegistry struct {
	e    *Engine
	host string
	life service.Lifecycle
}

func newNodeRegistry(e *Engine) *nodeRegistry {
	host, _ := os.Hostname()
	return &nodeRegistry{e: e, host: host}
}

func (n *nodeRegistry) Start(ctx context.Context) error {
	return n.life.Start(ctx, func(ctx context.Context, r *service.Run) error {
		rctx, cancel := context.WithTimeout(ctx, n.e.cfg.NodeHeartbeat)
		err := n.register(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("register node %s: %w", n.e.cfg.NodeID, err)
		}
		r.OnStop(n.deregister)
		r.Go(func() {
			t := time.NewTicker(n.e.cfg.NodeHeartbeat)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					n.beat(ctx)
				}
			}
		})
		return nil
	})
}

// Stop stops the heartbeats and deletes the node's row.
func (n *nodeRegistry) Stop() { n.life.Stop() }

func (n *nodeRegistry) register(ctx context.Context) error {
	return n.e.store.NodeHeartbeat(ctx, &store.NodeHeartbeatParams{
		ID: n.e.cfg.NodeID, Hostname: n.host, PID: os.Getpid(), Now: n.e.cfg.Now(),
	})
}

func (n *nodeRegistry) beat(ctx context.Context) {
	if err := n.register(ctx); err != nil && ctx.Err() == nil {
		n.e.log.Warn("node heartbeat failed", attrService, "node", attrError, err)
	}
}

// deregisterTimeout bounds the delete of the node's row at Stop; the pruner
// removes a row left behind.
const deregisterTimeout = 5 * time.Second

func (n *nodeRegistry) deregister(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, deregisterTimeout)
	defer cancel()
	if err := n.e.store.NodeDelete(ctx, n.e.cfg.NodeID); err != nil {
		n.e.log.Warn("deregister node failed", attrService, "node", attrError, err)
	}
}

// newElector runs the rescuer, scheduler, pruner and analyzer while this
// node holds the maintenance leadership.
func newElector(e *Engine) Service {
	return leader.New(leader.Config{
		Name: leader.Maintenance, NodeID: e.cfg.NodeID, TTL: e.cfg.LeaderTTL,
		Store: e.store, Logger: e.log, Now: e.cfg.Now,
		Services: append([]service.Service{
			&service.Loop{Name: "rescuer", Interval: e.cfg.RescueInterval, Fn: e.rescue},
			&service.Loop{Name: "scheduler", Interval: e.cfg.SchedulerInterval, Fn: e.schedule},
			&service.Loop{Name: "pruner", Interval: e.cfg.PruneInterval, Fn: e.prune},
			&service.Loop{Name: "analyzer", Interval: e.cfg.AnalyzeInterval, Fn: e.analyze},
		}, e.cfg.Maintenance...),
	})
}

// rescue ends attempts whose lease expired (their holder died, hung or was
// partitioned away): RETRY after backoff, or DEAD on the last attempt. The
// update is guarded by attempt and by the lease still being expired, so a
// holder that renewed in between keeps its job.
func (e *Engine) rescue(ctx context.Context) {
	for ctx.Err() == nil {
		now := e.cfg.Now()
		rows, err := e.store.JobListExpired(ctx, &store.JobListExpiredParams{Now: now, Max: maintenanceBatch})
		if err != nil {
			e.logMaintenance(ctx, "rescuer", err)
			return
		}
		if len(rows) == 0 {
			return
		}
		params := make([]*store.JobFinishParams, len(rows))
		for i, row := range rows {
			msg := fmt.Sprintf("lease held by node %s expired at %s", row.LeaseOwner, row.LeaseExpiresAt.Format(time.RFC3339Nano))
			params[i] = e.failure(row, e.handlers[row.Type], job.OutcomeExpired, msg, false)
		}
		applied, err := e.store.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: params, Now: now, ExpiredOnly: true})
		if err != nil {
			e.logMaintenance(ctx, "rescuer", err)
			return
		}
		n := 0
		var ended []*job.Row
		for i, a := range applied {
			if a != "" {
				n++
				e.observe(rows[i], params[i])
				if e.cfg.OnJobsEnded != nil && a.Terminal() {
					ended = append(ended, rows[i])
				}
			}
		}
		if len(ended) > 0 {
			e.cfg.OnJobsEnded(ended)
		}
		e.log.Info("rescued jobs with expired leases", attrService, "rescuer", attrCount, n)
		if len(rows) < maintenanceBatch {
			return
		}
	}
}

// schedule queues RETRY jobs whose backoff is over.
func (e *Engine) schedule(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := e.store.JobSchedule(ctx, &store.JobScheduleParams{Now: e.cfg.Now(), Max: maintenanceBatch})
		if err != nil {
			e.logMaintenance(ctx, "scheduler", err)
			return
		}
		if n < maintenanceBatch {
			return
		}
	}
}

// prune deletes finished jobs past retention, outbox rows past
// OutboxMaxAge and nodes long gone.
func (e *Engine) prune(ctx context.Context) {
	now := e.cfg.Now()
	for ctx.Err() == nil {
		n, err := e.store.JobDeleteFinished(ctx, &store.JobDeleteFinishedParams{
			FinishedBefore: now.Add(-e.cfg.Retention), Max: maintenanceBatch,
		})
		if err != nil {
			e.logMaintenance(ctx, "pruner", err)
			return
		}
		if n < maintenanceBatch {
			break
		}
	}
	e.pruneOutbox(ctx, now)
	stale := now.Add(-max(10*e.cfg.NodeHeartbeat, time.Minute))
	if _, err := e.store.NodeDeleteStale(ctx, &store.NodeDeleteStaleParams{LastActiveBefore: stale}); err != nil {
		e.logMaintenance(ctx, "pruner", err)
	}
}

// pruneOutbox deletes the outbox rows older than OutboxMaxAge that no
// relay published or no webhook dispatcher fanned out (store.OutboxStore.
// OutboxDeleteOld): without a relay, every state change leaves one, and
// nothing else ever deletes them.
func (e *Engine) pruneOutbox(ctx context.Context, now time.Time) {
	if e.cfg.OutboxMaxAge < 0 {
		return
	}
	total := 0
	for ctx.Err() == nil {
		n, err := e.store.OutboxDeleteOld(ctx, &store.OutboxDeleteOldParams{
			CreatedBefore: now.Add(-e.cfg.OutboxMaxAge), Max: maintenanceBatch,
		})
		if err != nil {
			e.logMaintenance(ctx, "pruner", err)
			break
		}
		total += n
		if n < maintenanceBatch {
			break
		}
	}
	if total > 0 {
		e.log.Info("deleted outbox rows past the outbox max age, never published or fanned out to webhooks",
			attrService, "pruner", attrCount, total, "max_age", e.cfg.OutboxMaxAge)
	}
}

// analyze refreshes the planner statistics of the tables that grew past
// them (store.StatsRefresher), so that the statements of the hot paths
// are planned again for their size.
func (e *Engine) analyze(ctx context.Context) {
	tables, err := e.store.AnalyzeGrown(ctx)
	if err != nil {
		e.logMaintenance(ctx, "analyzer", err)
	}
	if len(tables) > 0 {
		e.log.Debug("analyzed tables grown past their statistics", attrService, "analyzer", "tables", tables)
	}
}

func (e *Engine) logMaintenance(ctx context.Context, service string, err error) {
	if ctx.Err() == nil {
		e.log.Warn("maintenance failed", attrService, service, attrError, err)
	}
}
