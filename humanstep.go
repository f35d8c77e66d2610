package docket

import (
	"context"

	"github.com/docket-run/docket/internal/store"
)

// advanceHumanStep is the client's HumanStepCompleter: in the transaction
// that finalizes a unit of a run, it advances the run. The advancement
// records the FINALIZED unit exactly as it records a step job's SUCCESS:
// the human step SUCCEEDED with the unit's result as output and its
// confidence (out is that same result, read back from the unit in tx),
// then releases what that makes ready — all committed with the judgment,
// or not at all. If this process dies first, nothing is lost: the
// judgment rolled back. The workflow sweeper also finds any run whose
// human step is RUNNING with its unit ended (StepRunsToAdvance).
//
// Lock order: this transaction holds the unit's row (and a pool counter
// row) when it takes the run's lock, while a run cancel holds the run's
// lock when it cancels the unit. On PostgreSQL a cancel racing the
// unit's final judgment can therefore deadlock; PostgreSQL aborts one of
// the two (a retry of it succeeds). Known, not yet avoided.
func (c *Client) advanceHumanStep(ctx context.Context, tx store.Tx, unit *Unit, _ HumanStepOutput) error {
	adv, err := c.flows()
	if err != nil {
		return err
	}
	_, err = adv.Advance(ctx, tx, unit.RunID)
	return err
}
