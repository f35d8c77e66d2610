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

// newNodeRegistry keeps this node's row in the nodes table fresh and
// removes it when the engine stops.
func newNodeRegistry(e *Engine) Service {
	host, _ := os.Hostname()
	return &onStop{
		Loop: &service.Loop{Name: "node", Interval: e.cfg.NodeHeartbeat, Fn: func(ctx context.Context) {
			err := e.store.NodeHeartbeat(ctx, &store.NodeHeartbeatParams{
				ID: e.cfg.NodeID, Hostname: host, PID: os.Getpid(), Now: e.cfg.Now(),
			})
			if err != nil && ctx.Err() == nil {
				e.log.Warn("node heartbeat failed", attrService, "node", attrError, err)
			}
		}},
		stop: func(ctx context.Context) error { return e.store.NodeDelete(ctx, e.cfg.NodeID) },
		log:  func(err error) { e.log.Warn("deregister node failed", attrService, "node", attrError, err) },
	}
}

// onStop is a loop with a final action after it stops.
type onStop struct {
	*service.Loop
	stop func(ctx context.Context) error
	log  func(error)
}

func (o *onStop) Stop() {
	running := o.Running()
	o.Loop.Stop()
	if !running {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.stop(ctx); err != nil {
		o.log(err)
	}
}

// newElector runs the rescuer, scheduler and pruner while this node holds
// the maintenance leadership.
func newElector(e *Engine) Service {
	return leader.New(leader.Config{
		Name: leader.Maintenance, NodeID: e.cfg.NodeID, TTL: e.cfg.LeaderTTL,
		Store: e.store, Logger: e.log, Now: e.cfg.Now,
		Services: []service.Service{
			&service.Loop{Name: "rescuer", Interval: e.cfg.RescueInterval, Fn: e.rescue},
			&service.Loop{Name: "scheduler", Interval: e.cfg.SchedulerInterval, Fn: e.schedule},
			&service.Loop{Name: "pruner", Interval: e.cfg.PruneInterval, Fn: e.prune},
		},
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
		for i, a := range applied {
			if a {
				n++
				e.observe(rows[i], params[i])
			}
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

// prune deletes finished jobs past retention and nodes long gone.
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
	stale := now.Add(-max(10*e.cfg.NodeHeartbeat, time.Minute))
	if _, err := e.store.NodeDeleteStale(ctx, &store.NodeDeleteStaleParams{LastActiveBefore: stale}); err != nil {
		e.logMaintenance(ctx, "pruner", err)
	}
}

func (e *Engine) logMaintenance(ctx context.Context, service string, err error) {
	if ctx.Err() == nil {
		e.log.Warn("maintenance failed", attrService, service, attrError, err)
	}
}
