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
// 8, 20 and 50 test questions — under the defaults (CheckTrust: accuracy
// below 0.6 with probability 0.95, after 5 test questions) and, for
// comparison, under the rule they replace (the point estimate, trust
// below 0.6 after 8). The posterior flags a three-way random clicker
// sooner and an honest contributor right 80% of the time a tenth as
// often; the price is a binary random clicker, right half the time and so
// only a little under 0.6, who takes longer to be sure of. Run with -v for
// the table (docs/quality.md, "Flagging and tainting").
func TestDefaultsFlagSpammers(t *testing.T) {
	t.Parallel()
	s := Defaults()
	pointRule := func(tr Trust) bool { return tr.TestsAnswered >= 8 && s.TrustValue(tr) < s.MinTrust }
	newRule := func(tr Trust) bool { return s.CheckTrust(pool, worker, tr, Standing{}).Flag }
	const runs = 4000
	type outcome struct{ by8, by20, by50, median float64 }
	measure := func(p float64, flags func(Trust) bool, rng *rand.Rand) outcome {
		var o outcome
		var when []int
		for range runs {
			var tr Trust
			for i := 1; i <= 50; i++ {
				tr.TestsAnswered++
				if rng.Float64() < p {
					tr.TestsCorrect++
				}
				if flags(tr) {
					when = append(when, i)
					break
				}
			}
		}
		for _, w := range when {
			if w <= 8 {
				o.by8++
			}
			if w <= 20 {
				o.by20++
			}
			o.by50++
		}
		o.by8, o.by20, o.by50 = o.by8/runs, o.by20/runs, o.by50/runs
		if len(when) > runs/2 {
			slices.Sort(when)
			o.median = float64(when[runs/2])
		}
		return o
	}
	show := func(o outcome) string {
		m := "—"
		if o.median > 0 {
			m = fmt.Sprint(o.median)
		}
		return fmt.Sprintf("%5.1f%% %5.1f%% %5.1f%% %3s", 100*o.by8, 100*o.by20, 100*o.by50, m)
	}
	got := map[float64]outcome{}
	t.Logf("accuracy | defaults: within 8, 20, 50 tests, median | point estimate after 8: the same")
	for _, p := range []float64{1.0 / 3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95} {
		got[p] = measure(p, newRule, rand.New(rand.NewPCG(14, 14)))
		old := measure(p, pointRule, rand.New(rand.NewPCG(14, 14)))
		t.Logf("%8.2f | %s | %s", p, show(got[p]), show(old))
	}
	require.GreaterOrEqual(t, got[1.0/3].by20, 0.85, "a three-way spammer within 20 test questions")
	require.GreaterOrEqual(t, got[1.0/3].by50, 0.99, "a three-way spammer within 50")
	require.LessOrEqual(t, got[1.0/3].median, 8.0, "as fast as the point estimate's minimum of 8")
	require.GreaterOrEqual(t, got[0.5].by50, 0.6, "a binary spammer within 50")
	require.LessOrEqual(t, got[0.8].by50, 0.02, "an honest contributor right 80% of the time")
	require.LessOrEqual(t, got[0.9].by50, 0.002, "right 90% of the time")

	// The rule in the loop: the posterior, not the mean.
	require.True(t, s.CheckTrust(pool, worker, counts(1, 5), Standing{}).Flag)    // under 0.6 with probability 0.96
	require.False(t, s.CheckTrust(pool, worker, counts(2, 5), Standing{}).Flag)   // 0.82, though trust is 0.417
	require.True(t, s.CheckTrust(pool, worker, counts(2, 8), Standing{}).Flag)    // 0.98
	require.False(t, s.CheckTrust(pool, worker, counts(4, 8), Standing{}).Flag)   // 0.72, though trust is 0.5
	require.False(t, s.CheckTrust(pool, worker, counts(0, 4), Standing{}).Flag)   // minTests 5 not reached
	require.True(t, s.CheckTrust(pool, worker, counts(20, 50), Standing{}).Flag)  // 0.998
	require.False(t, s.CheckTrust(pool, worker, counts(11, 18), Standing{}).Flag) // 0.47
}
