package docket

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// Closing a pool by hand (docs/human-work.md, "POST
// /v1/pools/{poolId}/close") hands out no assignment any more, so a unit
// still short of its judgments would wait forever, and its run with it.
// Each open regular unit of a CLOSED pool is ended once no assignment of
// it is live (ACTIVE: its judgment may still come, and counts):
//
//   - with at least the pool's judgments per unit (untainted), it is
//     FINALIZED with the aggregate of those it has (low confidence when
//     under the task's target), exactly as when its last judgment comes
//     in: unit.finalized, its human step SUCCEEDED;
//   - otherwise it is CANCELED, and its human step FAILS ("pool … was
//     closed before unit … had enough judgments (1 of 3)"); the run fails
//     or goes on by the step's onFailure.
//
// PoolClose ends at once the units no assignment holds (up to
// PoolCloseEndMax); the leader's pool-completer (PoolsComplete) ends the
// others once their assignments ended, then completes the pool. Each unit is ended in a transaction of
// its own that locks its run, then the unit (the lock order of a
// judgment), and checks again under the locks: of two nodes ending one
// unit, or a close racing a judgment, exactly one ends it.

// PoolEndBatch is how many units of closed pools one query lists for
// poolEndUnits; each is then ended in a transaction of its own.
const PoolEndBatch = 100

// PoolCloseEndMax is how many units PoolClose ends itself (a few
// milliseconds each, their runs advanced): a larger pool's other units
// are ended by the leader's pool-completer, from its next round on, so
// that the close call stays short.
const PoolCloseEndMax = 1000

// poolEndUnits ends the open regular units of CLOSED pools (of pool poolID
// only, when set) that no live assignment holds, at most max of them
// (max ≤ 0: all), and returns how many it ended. A unit that fails to end
// does not hold up the others: its error is returned with theirs, after
// them, and the next call tries it again.
func (c *Client) poolEndUnits(ctx context.Context, poolID uuid.UUID, max int) (int, error) {
	ended := 0
	after := uuid.Nil
	var errs []error
	for {
		limit := PoolEndBatch
		if max > 0 {
			limit = min(limit, max-ended)
		}
		if limit <= 0 {
			return ended, errors.Join(errs...)
		}
		refs, err := c.store.UnitListClosing(ctx, &store.UnitListClosingParams{PoolID: poolID, After: after, Limit: limit})
		if err != nil {
			return ended, errors.Join(append(errs, err)...)
		}
		for _, ref := range refs {
			ok, err := c.unitEndClosed(ctx, ref)
			if err != nil {
				if ctx.Err() != nil {
					return ended, err
				}
				errs = append(errs, fmt.Errorf("end unit %s of closed pool %s: %w", ref.ID, ref.PoolID, err))
			}
			if ok {
				ended++
			}
		}
		if len(refs) < limit {
			return ended, errors.Join(errs...)
		}
		after = refs[len(refs)-1].ID
	}
}

// heldForRedo reports whether u is a review step's unit held while the
// unit it rejected is redone (workflow's review.go): PAUSED with its
// judgments all in, which no other PAUSED unit has. It has its verdict;
// the redo ends it (FINALIZED with it, or CANCELED with the review
// failed), not its pool's close: finalized here it would reject again
// and be held again, every round.
func heldForRedo(u *Unit) bool {
	return u.State == crowd.UnitPaused && u.JudgmentCount >= u.JudgmentsPerUnit
}

// unitEndClosed ends one unit of a closed pool (see above) and reports
// whether it did: a unit that ended meanwhile, or got a live assignment
// (a take that raced the close), is left as it is.
func (c *Client) unitEndClosed(ctx context.Context, ref *store.UnitClosingRef) (bool, error) {
	pool, err := c.poolSettings(ctx, ref.PoolID)
	if err != nil {
		return false, err
	}
	ct, err := c.CompiledTask(ctx, pool.Task, pool.TaskVersion)
	if err != nil {
		return false, err
	}
	models, err := c.poolModels(ctx, pool, ct)
	if err != nil {
		return false, err
	}
	ended := false
	err = c.store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		ended = false
		// The run first, then the unit: a judgment's lock order. A run
		// that is gone (pruned) is not an error, as for a judgment.
		if ref.RunID != uuid.Nil {
			if _, err := tx.RunLock(ctx, ref.RunID); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		uc, err := tx.UnitLockClosing(ctx, ref.ID)
		if err != nil {
			return err
		}
		u := uc.Unit
		if u.Golden || u.State.Final() || uc.PoolStatus != crowd.PoolClosed || uc.Live || heldForRedo(u) {
			return nil
		}
		judgments, err := tx.JudgmentList(ctx, &store.JudgmentListParams{UnitID: u.ID})
		if err != nil {
			return err
		}
		clean := untainted(judgments)
		now := c.cfg.Now()
		jpu := overlapOf(pool, ct)
		if len(clean) < jpu.Min {
			if _, err := tx.UnitTransition(ctx, &store.UnitTransitionParams{ID: u.ID, From: u.State, To: crowd.UnitCanceled, Now: now}); err != nil {
				return err
			}
			ended = true
			if c.completeHumanStep == nil || u.RunID == uuid.Nil {
				return nil
			}
			// The run's advancement records the CANCELED unit: its step
			// FAILED, saying the pool was closed — told here, by what
			// ended it (workflow's recordUnitEnds).
			u.State = crowd.UnitCanceled
			return c.completeHumanStep(ctx, tx, u, HumanStepOutput{
				Canceled: fmt.Sprintf("pool %s was closed before unit %s had enough judgments (%d of %d)", u.PoolID, u.ID, len(clean), jpu.Min),
			})
		}
		if u.State != crowd.UnitJudgable {
			// A PAUSED (or NEW) unit is finalized from JUDGABLE, as
			// every unit is.
			if _, err := tx.UnitTransition(ctx, &store.UnitTransitionParams{ID: u.ID, From: u.State, To: crowd.UnitJudgable, Now: now}); err != nil {
				return err
			}
		}
		result, confidence, err := aggregateUnitWith(ct, clean, models)
		if err != nil {
			return fmt.Errorf("aggregate unit %s: %w", u.ID, err)
		}
		// No more judgment comes: what it has is its maximum, so the
		// decision is to finalize, with low confidence under the target.
		jpu.Max = len(clean)
		d := quality.DecideOverlap(len(clean), jpu, confidence)
		if _, err := c.finalizeUnit(ctx, tx, ct, u.ID, u.RunID, clean, result, confidence, d.LowConfidence, now, nil); err != nil {
			return err
		}
		ended = true
		return nil
	})
	return ended, err
}
