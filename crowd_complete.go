package docket

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// PoolCompleteBatch is how many pools one transaction of PoolsComplete
// completes.
const PoolCompleteBatch = 100

// PoolsComplete first ends the open regular units of CLOSED pools that no
// live assignment holds any more (FINALIZED with the judgments they have,
// or CANCELED short of them: crowd_close.go), then moves every CLOSED
// pool whose regular units are all final (FINALIZED or CANCELED) to
// COMPLETED, writing pool.updated for each, in batches of
// PoolCompleteBatch, and returns how many pools it completed. The
// maintenance leader runs it every WorkerConfig.AssignmentReapInterval
// (the pool-completer service), so a closed pool's unit ends within one
// interval of its last assignment ending, and the pool is COMPLETED then;
// closing a pool ends what it can at once and completes it when nothing
// is left open (PoolClose). Tools and tests may call it.
func (c *Client) PoolsComplete(ctx context.Context) (int, error) {
	// A unit that failed to end holds up its own pool only.
	_, endErr := c.poolEndUnits(ctx, uuid.Nil, 0)
	total := 0
	for {
		ids, err := c.store.PoolCompleteMany(ctx, &store.PoolCompleteManyParams{Max: PoolCompleteBatch, Now: c.cfg.Now()})
		total += len(ids)
		if err != nil || len(ids) < PoolCompleteBatch {
			return total, errors.Join(endErr, err)
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
