package postgres

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store/storetest"
)

// TestCrowdRace: 200 contributors on one pool of 2,000 units × 3
// judgments, some abandoning assignments the reaper expires; afterwards the
// tables hold no double assignment of a slot, no contributor twice on a
// unit, exactly 3 judgments per unit and counters equal to the rows.
func TestCrowdRace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := storetest.RunCrowdRace(t, b.s, storetest.CrowdRaceConfig{
		Units: 2000, JudgmentsPerUnit: 3, Contributors: 200, AbandonEvery: 25, Timeout: 5 * time.Minute,
	})
	for name, q := range storetest.CrowdRaceChecks(pool, 3) {
		require.Zero(t, b.count(t, q), name)
	}
	require.Positive(t, b.s.takes.batched.Load(), "no take went in a batch of two or more (crowd_take_group.go)")
	require.Positive(t, b.s.judges.batched.Load(), "no judgment went in a batch of two or more (crowd_judgment_group.go)")
}

// TestCrowdStrategies runs the race once per take strategy, each alone,
// and logs the rates (DOCKET_CROWD_STRATEGIES=1; it takes a while).
func TestCrowdStrategies(t *testing.T) {
	if os.Getenv("DOCKET_CROWD_STRATEGIES") == "" {
		t.Skip("set DOCKET_CROWD_STRATEGIES=1 to compare the take strategies")
	}
	for _, st := range crowd.Strategies {
		t.Run(string(st), func(t *testing.T) {
			b := setup(t)
			pool := storetest.RunCrowdRace(t, b.s, storetest.CrowdRaceConfig{
				Units: 2000, JudgmentsPerUnit: 3, Contributors: 200, Timeout: 5 * time.Minute,
				Strategies: []crowd.Strategy{st},
			})
			for name, q := range storetest.CrowdRaceChecks(pool, 3) {
				if name != "no assignment expired (the reaper path was not exercised)" {
					require.Zero(t, b.count(t, q), name)
				}
			}
		})
	}
}
