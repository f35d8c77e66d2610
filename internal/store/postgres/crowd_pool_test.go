package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
)

// crowdPoolParams shapes the pool of a crowd test of this package.
type crowdPoolParams struct {
	Units        int // JUDGABLE units
	Slots        int // judgments per unit
	Contributors int
	// Quality, when set, gives contributor i's quality state in the pool
	// (its PoolID, ContributorID and Now are filled in; nil: none
	// written, the pool meets them at their first take).
	Quality func(i int) *store.QualityStatePutParams
}

// crowdPool is a fresh database with a pool (workflow wf, step s, task
// t), its units and contributors: what the take's and the judgment's
// tests of this package start from.
type crowdPool struct {
	*bundle
	pool         uuid.UUID
	units        []*crowd.Unit
	contributors []uuid.UUID
}

func setupCrowdPool(t *testing.T, p crowdPoolParams) *crowdPool {
	t.Helper()
	b := setup(t)
	_, _, err := b.s.WorkflowPut(b.ctx, &store.WorkflowPutParams{Name: "wf", Definition: json.RawMessage(`{}`), Hash: "h", Now: testBase})
	require.NoError(t, err)
	_, _, err = b.s.TaskPut(b.ctx, &store.TaskPutParams{Name: "t", Definition: json.RawMessage(`{}`), Hash: "h", Now: testBase})
	require.NoError(t, err)
	pool, _, err := b.s.PoolCreate(b.ctx, &store.PoolCreateParams{ID: uuid.Must(uuid.NewV7()), Workflow: "wf", WorkflowVersion: 1,
		Step: "s", Task: "t", TaskVersion: 1, JudgmentsPerUnit: p.Slots, AssignmentSeconds: 60, Now: testBase})
	require.NoError(t, err)
	ps := make([]*store.UnitInsertParams, p.Units)
	for i := range ps {
		ps[i] = &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`)}
	}
	us, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: pool.ID, State: crowd.UnitJudgable, Units: ps, Now: testBase})
	require.NoError(t, err)
	cp := &crowdPool{bundle: b, pool: pool.ID, units: us}
	for i := range p.Contributors {
		c, err := b.s.ContributorCreate(b.ctx, &store.ContributorCreateParams{ID: uuid.Must(uuid.NewV7()),
			ExternalID: fmt.Sprintf("c%d", i), Now: testBase})
		require.NoError(t, err)
		cp.contributors = append(cp.contributors, c.ID)
		if p.Quality == nil {
			continue
		}
		qp := p.Quality(i)
		qp.PoolID, qp.ContributorID, qp.Now = pool.ID, c.ID, testBase
		require.NoError(t, b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.QualityStatePut(ctx, qp)
			return err
		}))
	}
	return cp
}

// counts are the pool's ACTIVE assignments, its slots taken and its
// counter of active assignments.
func (cp *crowdPool) counts(t *testing.T) (assignments, slots, counter int) {
	t.Helper()
	return cp.count(t, `SELECT count(*) FROM docket_assignments WHERE pool_id = $1 AND state = 'ACTIVE'`, cp.pool),
		cp.count(t, `SELECT coalesce(sum(slots_taken), 0) FROM docket_units WHERE pool_id = $1`, cp.pool),
		cp.count(t, `SELECT coalesce(sum(active_assignments), 0) FROM docket_pool_counters WHERE pool_id = $1`, cp.pool)
}

// TestCrowdPoolSetup: the pool is as asked — its units' slots, its
// contributors, their quality states where the take reads them (the
// flagged one is refused).
func TestCrowdPoolSetup(t *testing.T) {
	t.Parallel()
	trust := quality.Trust{TestsCorrect: 3, TestsAnswered: 4, Value: 0.7}
	cp := setupCrowdPool(t, crowdPoolParams{Units: 2, Slots: 3, Contributors: 3, Quality: func(i int) *store.QualityStatePutParams {
		switch i {
		case 0:
			return &store.QualityStatePutParams{Trust: trust}
		case 1:
			return &store.QualityStatePutParams{Trust: quality.NewTrust(), Standing: quality.Standing{Flagged: true, Check: quality.CheckTrust}}
		}
		return &store.QualityStatePutParams{Trust: quality.NewTrust()}
	}})
	require.Len(t, cp.units, 2)
	for _, u := range cp.units {
		require.Equal(t, 3, u.JudgmentsPerUnit)
		require.Equal(t, cp.pool, u.PoolID)
	}
	require.Len(t, cp.contributors, 3)
	st, err := cp.s.QualityStateGet(cp.ctx, cp.pool, cp.contributors[0])
	require.NoError(t, err)
	require.Equal(t, trust, st.Trust)
	take := func(i int) error {
		_, err := cp.s.AssignmentTake(cp.ctx, &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: cp.pool,
			ContributorID: cp.contributors[i], Duration: time.Minute, Strategy: crowd.StrategyOrdered, Now: testBase})
		return err
	}
	var ne *crowd.NotEligibleError
	require.ErrorAs(t, take(1), &ne, "flagged")
	require.NoError(t, take(2))
}
