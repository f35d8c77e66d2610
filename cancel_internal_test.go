package docket

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// advanceProbe is a real store that counts the advancements of runs made
// in its transactions (each reads the run's steps first: StepList) and
// can make them fail there.
type advanceProbe struct {
	store.Store
	fail     atomic.Bool
	advances atomic.Int32
}

var errAdvanceDown = errors.New("advancement failed")

func (s *advanceProbe) InTx(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	return s.Store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return fn(ctx, probeTx{Tx: tx, s: s})
	})
}

type probeTx struct {
	store.Tx
	s *advanceProbe
}

func (t probeTx) StepList(ctx context.Context, runID uuid.UUID) ([]*flow.StepInstance, error) {
	t.s.advances.Add(1)
	if t.s.fail.Load() {
		return nil, errAdvanceDown
	}
	return t.Tx.StepList(ctx, runID)
}

// TestCancelAdvancesRunInItsTransaction: Client.Cancel of a step's
// waiting job advances the run in the transaction of the cancel. Before,
// the cancel committed first and a failed advancement was only logged (the
// job CANCELED, its run RUNNING until the sweeper came by), and a second
// cancel of the CANCELED job advanced the run again. A failing
// advancement does not keep the job from being canceled: it is canceled
// alone, and the run left to the sweeper (as the end of a lease is).
func TestCancelAdvancesRunInItsTransaction(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, err := NewClient(ctx, Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, c.Close()) })
			def, err := NewWorkflow("canceltx").Job("a", "canceltx.a").Job("b", "canceltx.b", After("a")).Definition()
			require.NoError(t, err)
			_, _, err = c.WorkflowPut(ctx, def)
			require.NoError(t, err)
			started, err := c.RunStart(ctx, "canceltx", nil, nil)
			require.NoError(t, err)
			run, err := c.RunGet(ctx, started.Run.ID)
			require.NoError(t, err)
			jobID := run.Steps[0].JobID
			probe := &advanceProbe{Store: c.store} // no worker: no sweeper either
			c.store = probe

			// The advancement fails: the job is canceled all the same,
			// alone, and its run left to the sweeper (none here).
			other, err := c.RunStart(ctx, "canceltx", nil, nil)
			require.NoError(t, err)
			otherRun, err := c.RunGet(ctx, other.Run.ID)
			require.NoError(t, err)
			probe.fail.Store(true)
			row, err := c.Cancel(ctx, otherRun.Steps[0].JobID)
			require.NoError(t, err)
			require.Equal(t, JobStateCanceled, row.State, "a failing advancement must not keep the job from being canceled")
			row, err = c.Get(ctx, otherRun.Steps[0].JobID)
			require.NoError(t, err)
			require.Equal(t, JobStateCanceled, row.State)
			otherRun, err = c.RunGet(ctx, other.Run.ID)
			require.NoError(t, err)
			require.Equal(t, RunRunning, otherRun.State, "the run is the sweeper's to advance")

			// It succeeds: the run failed with the job's step when Cancel
			// returned, which no sweeper could have done here.
			probe.fail.Store(false)
			row, err = c.Cancel(ctx, jobID)
			require.NoError(t, err)
			require.Equal(t, JobStateCanceled, row.State)
			run, err = c.RunGet(ctx, started.Run.ID)
			require.NoError(t, err)
			require.Equal(t, RunFailed, run.State)
			require.Equal(t, StepFailed, run.Steps[0].State)

			// Canceling the CANCELED job again changes nothing and
			// advances nothing.
			advances := probe.advances.Load()
			again, err := c.Cancel(ctx, jobID)
			require.NoError(t, err)
			require.Equal(t, JobStateCanceled, again.State)
			require.Equal(t, row.Version, again.Version)
			require.Equal(t, advances, probe.advances.Load(), "a repeated cancel advanced the run again")
		})
	}
}
