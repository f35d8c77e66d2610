package quality

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDefaultsFlagSpammers is why the trust defaults are what they are: it
// simulates contributors of a given accuracy answering test questions
// (seeded, 4,000 each) and measures how many the trust check flags within
// 20 and 50 test questions. A binary task is the hard case: a random
// clicker is right half the time, so their trust hovers around 0.5 — a
// minimum of 0.5 would let one in six through after 50 test questions.
// The defaults (minimum 0.6 after 8) flag a binary spammer within 20 test
// questions nine times in ten, and an honest contributor right 90% of the
// time one or two times in a hundred. Run with -v for the table
// (docs/quality.md).
func TestDefaultsFlagSpammers(t *testing.T) {
	t.Parallel()
	s := Defaults()
	const runs = 4000
	rng := rand.New(rand.NewPCG(14, 14))
	flagged := map[float64][2]float64{}
	t.Logf("accuracy  flagged within 20 tests  within 50  median tests to a flag")
	for _, p := range []float64{1.0 / 3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95} {
		var by20, by50 int
		var when []int
		for range runs {
			var tr Trust
			for i := 1; i <= 50; i++ {
				tr.TestsAnswered++
				if rng.Float64() < p {
					tr.TestsCorrect++
				}
				if s.MinTrust > 0 && tr.TestsAnswered >= s.MinTests && s.TrustValue(tr) < s.MinTrust {
					if i <= 20 {
						by20++
					}
					by50++
					when = append(when, i)
					break
				}
			}
		}
		median := "-"
		if len(when) > runs/2 {
			slices.Sort(when)
			median = fmt.Sprint(when[runs/2])
		}
		flagged[p] = [2]float64{float64(by20) / runs, float64(by50) / runs}
		t.Logf("%8.2f  %22.1f%%  %8.1f%%  %s", p, 100*flagged[p][0], 100*flagged[p][1], median)
	}
	require.GreaterOrEqual(t, flagged[0.5][0], 0.9, "a binary spammer within 20 test questions")
	require.GreaterOrEqual(t, flagged[0.5][1], 0.97, "a binary spammer within 50")
	require.GreaterOrEqual(t, flagged[1.0/3][0], 0.99, "a three-way spammer within 20")
	require.LessOrEqual(t, flagged[0.9][1], 0.02, "an honest contributor right 90% of the time")
	require.LessOrEqual(t, flagged[0.95][1], 0.002)

	// The check in the loop is CheckTrust's rule.
	require.True(t, s.CheckTrust(pool, worker, counts(3, 8), Standing{}).Flag)    // 3.5 / 9 = 0.389
	require.False(t, s.CheckTrust(pool, worker, counts(5, 8), Standing{}).Flag)   // 5.5 / 9 = 0.611
	require.True(t, s.CheckTrust(pool, worker, counts(4, 8), Standing{}).Flag)    // 4.5 / 9 = 0.5
	require.False(t, s.CheckTrust(pool, worker, counts(0, 7), Standing{}).Flag)   // M not reached
	require.False(t, s.CheckTrust(pool, worker, counts(11, 18), Standing{}).Flag) // 11.5 / 19 = 0.605
}
