package docket

import (
	"context"
	"time"

	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// PoolCompleteBatch is how many pools one transaction of PoolsComplete
// completes.
const PoolCompleteBatch = 100

// PoolsComplete moves every CLOSED pool whose regular units are all final
// (FINALIZED or CANCELED) to COMPLETED, writing pool.updated for each, in
// batches of PoolCompleteBatch, and returns how many. The maintenance
// leader runs it every WorkerConfig.AssignmentReapInterval (the
// pool-completer service), so a closed pool is COMPLETED within one
// interval of its last unit becoming final; closing a pool with no open
// unit completes it at once (PoolClose). Tools and tests may call it.
func (c *Client) PoolsComplete(ctx context.Context) (int, error) {
	total := 0
	for {
		ids, err := c.store.PoolCompleteMany(ctx, &store.PoolCompleteManyParams{Max: PoolCompleteBatch, Now: c.cfg.Now()})
		total += len(ids)
		if err != nil || len(ids) < PoolCompleteBatch {
			return total, err
		}
	}
}

// poolCompleter is the leader service that completes closed pools.
func (c *Client) poolCompleter(interval time.Duration) service.Service {
	if interval <= 0 {
		interval = AssignmentReapIntervalDefault
	}
	return &service.Loop{Name: "pool-completer", Interval: interval, Fn: func(ctx context.Context) {
		n, err := c.PoolsComplete(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			c.cfg.Logger.Warn("complete pools failed", "service", "pool-completer", "error", err)
		case n > 0:
			c.cfg.Logger.Info("completed pools", "service", "pool-completer", "count", n)
		}
	}}
}
