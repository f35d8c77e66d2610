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
// Lock order: JudgmentSubmit took the run's lock (store.JudgmentInTx) before
// the unit's row and the pool's counter row, as a run cancel does, so
// the run lock Advance takes here is held already and a cancel racing the
// unit's final judgment waits for it instead of deadlocking.
func (c *Client) advanceHumanStep(ctx context.Context, tx store.Tx, unit *Unit, out HumanStepOutput) error {
	adv, err := c.flows()
	if err != nil {
		return err
	}
	if unit.State == UnitCanceled && out.Canceled != "" {
		// What ended the unit says why, in its own transaction: a later
		// advancement could only guess it (from its pool's status).
		_, err = adv.AdvanceUnitCanceled(ctx, tx, unit.RunID, unit.ID, out.Canceled)
		return err
	}
	_, err = adv.Advance(ctx, tx, unit.RunID)
	return err
}
