package quality

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
)

// schedule runs n assignments through NextAssignment, a golden unit being
// available whenever available(i) says so and the k-th test question
// (1-based) answered right when right(k) says so, and returns the 1-based
// positions that were test questions.
func schedule(s Settings, n int, available func(i int) bool, right func(k int) bool) []int {
	var c Counts
	var tr Trust
	var tests []int
	for i := 1; i <= n; i++ {
		if s.NextAssignment(c, tr).Test && available(i) {
			c.TestsTaken++
			tests = append(tests, i)
			tr = s.ScoreTest(tr, right(c.TestsTaken), t0, "")
		}
		c.Taken++
	}
	return tests
}

func always(int) bool { return true }

func TestScheduleQuizThenOneInK(t *testing.T) {
	t.Parallel()
	s := Defaults()
	s.TestEveryTrusted = 0 // one rate for everyone
	s.QuizSize, s.TestEvery = 4, 10
	require.Equal(t, []int{1, 2, 3, 4, 14, 24, 34}, schedule(s, 40, always, always))
	s.QuizSize, s.TestEvery = 0, 3
	require.Equal(t, []int{3, 6, 9}, schedule(s, 10, always, always))
	s.QuizSize, s.TestEvery = 2, 0
	require.Equal(t, []int{1, 2}, schedule(s, 30, always, always))
	s.QuizSize, s.TestEvery = 0, 0
	require.Empty(t, schedule(s, 30, always, always))
	// TestsDue by hand: due(n) = min(n, N) + ⌊(n − N) / K⌋.
	s.QuizSize, s.TestEvery = 4, 10
	for n, want := range map[int]int{0: 0, 1: 1, 4: 4, 5: 4, 13: 4, 14: 5, 23: 5, 24: 6} {
		require.Equal(t, want, s.TestsDue(n), "due(%d)", n)
	}
	// With a lower rate for trusted contributors, what is due is counted
	// at that rate: due(n) = 4 + ⌊(n − 4) / 30⌋.
	s.TestEveryTrusted = 30
	for n, want := range map[int]int{4: 4, 14: 4, 33: 4, 34: 5, 64: 6} {
		require.Equal(t, want, s.TestsDue(n), "due(%d)", n)
	}
}

// A contributor who answers the quiz right is trusted at once (5 of 5:
// accuracy under 0.6 with probability 0.02) and tested one in
// TestEveryTrusted; one who answers everything wrong is suspect and gets
// test questions only; one with a middling quiz is tested one in
// TestEvery, every assignment while suspect.
func TestScheduleFollowsConfidence(t *testing.T) {
	t.Parallel()
	s := Defaults() // quiz 5, one in 8, one in 24 once trusted
	require.Equal(t, []int{1, 2, 3, 4, 5, 29, 53, 77}, schedule(s, 80, always, always))
	slow := Defaults()
	slow.TestEvery = 31 // over testEveryTrusted 24: trusted ones are tested one in 31 too, never more often
	require.Equal(t, []int{1, 2, 3, 4, 5, 36, 67}, schedule(slow, 70, always, always))
	require.Equal(t, 6, slow.TestsDue(66))
	require.Equal(t, 7, slow.TestsDue(67))
	never := func(int) bool { return false }
	require.Len(t, schedule(s, 30, always, never), 30, "a suspect gets nothing but test questions")

	// 4 of 5 in the quiz: under 0.6 with probability 0.18, uncertain: one
	// in 8 after the quiz (13, 21). Wrong at 13 (4 of 6: 0.38, still
	// uncertain) and at 21 (4 of 7: 0.57, suspect): tested at once (22);
	// right (5 of 8: 0.45), uncertain again: one in 8 (29, 37, …).
	right := func(k int) bool { return k != 1 && k != 6 && k != 7 }
	got := schedule(s, 80, always, right)
	require.Equal(t, []int{1, 2, 3, 4, 5, 13, 21, 22, 29, 37, 45, 53, 61, 69, 77}, got)
	require.Equal(t, ConfidenceSuspect, s.ConfidenceOf(counts(4, 7)))
	require.Equal(t, ConfidenceUncertain, s.ConfidenceOf(counts(5, 8)))
	require.Equal(t, ConfidenceUncertain, s.ConfidenceOf(counts(11, 14)), "after 69: 11 of 14 is under 0.6 with probability 0.07")
	require.Equal(t, s.NextAssignment(Counts{Taken: 17, TestsTaken: 9}, counts(4, 9)), s.NextAssignment(Counts{Taken: 17, TestsTaken: 9}, counts(4, 9)))

	// The reasons say which case it is.
	require.Contains(t, s.NextAssignment(Counts{Taken: 2, TestsTaken: 2}, counts(2, 2)).Reason, "quiz")
	require.Contains(t, s.NextAssignment(Counts{Taken: 6, TestsTaken: 5}, counts(1, 5)).Reason, "suspect")
	require.Contains(t, s.NextAssignment(Counts{Taken: 28, TestsTaken: 5}, counts(5, 5)).Reason, "trusted: one in 24")
	require.False(t, s.NextAssignment(Counts{Taken: 12, TestsTaken: 5}, counts(5, 5)).Test, "trusted: not at the 13th")
	require.True(t, s.NextAssignment(Counts{Taken: 12, TestsTaken: 5}, counts(4, 5)).Test, "uncertain: the 13th")
	require.Contains(t, s.NextAssignment(Counts{Taken: 12, TestsTaken: 5}, counts(4, 5)).Reason, "uncertain: one in 8")
	require.False(t, s.NextAssignment(Counts{Taken: 13, TestsTaken: 6}, counts(5, 6)).Test, "uncertain: not at the 14th")
	// No test after the quiz: testEvery 0 wins over suspicion.
	s.TestEvery = 0
	require.False(t, s.NextAssignment(Counts{Taken: 6, TestsTaken: 5}, counts(0, 5)).Test)
}

func TestScheduleOwesMissedTests(t *testing.T) {
	t.Parallel()
	s := Defaults()
	s.QuizSize, s.TestEvery, s.TestEveryTrusted = 4, 10, 0
	// No golden unit for the first 10 assignments: the four quiz questions
	// and the one due at the 14th are owed, given as soon as golden units
	// exist (due(15) = 4 + ⌊11/10⌋ = 5).
	require.Equal(t, []int{11, 12, 13, 14, 15, 24}, schedule(s, 30, func(i int) bool { return i > 10 }, always))
	next := s.NextAssignment(Counts{Taken: 10, TestsTaken: 0}, Trust{})
	require.True(t, next.Test)
	require.Contains(t, next.Reason, "quiz")
	require.False(t, s.NextAssignment(Counts{Taken: 4, TestsTaken: 4}, counts(4, 4)).Test)
	require.True(t, s.NextAssignment(Counts{Taken: 13, TestsTaken: 4}, counts(4, 4)).Test, "the 14th is the first after the quiz")
	next = s.NextAssignment(Counts{Taken: 20, TestsTaken: 4}, counts(4, 4))
	require.True(t, next.Test)
	require.Contains(t, next.Reason, "owed")
}

// Property: with golden units always available, the tests taken after n
// assignments are at least TestsDue(n); with one rate for everyone and
// every answer right, exactly that, the quiz first and then one in K; a
// trusted contributor is never left more than TestEveryTrusted
// assignments untested; and the same counts give the same answer.
func TestScheduleProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		s := Defaults()
		s.QuizSize = rng.IntN(8)
		s.TestEvery = []int{0, 2, 3, 5, 10, 17}[rng.IntN(6)]
		s.TestEveryTrusted = 0
		n := rng.IntN(200)
		tests := schedule(s, n, always, always)
		require.Equal(t, s.TestsDue(n), len(tests), "%+v n=%d", s, n)
		for i, p := range tests {
			if i < s.QuizSize {
				require.Equal(t, i+1, p, "the quiz comes first")
			} else {
				require.Equal(t, 0, (p-s.QuizSize)%s.TestEvery, "one in K after the quiz")
			}
		}
		if s.TestEvery > 0 {
			s.TestEveryTrusted = s.TestEvery * (1 + rng.IntN(4))
		}
		acc := rng.Float64()
		tests = schedule(s, n, always, func(int) bool { return rng.Float64() < acc })
		require.GreaterOrEqual(t, len(tests), s.TestsDue(n), "%+v n=%d", s, n)
		c := Counts{Taken: rng.IntN(100), TestsTaken: rng.IntN(20)}
		tr := counts(rng.IntN(10), 10)
		require.Equal(t, s.NextAssignment(c, tr), s.NextAssignment(c, tr))
	}
}

func TestScheduleExcludesEveryState(t *testing.T) {
	t.Parallel()
	got := TestExcludedStates()
	require.ElementsMatch(t, []crowd.AssignmentState{crowd.AssignmentActive, crowd.AssignmentSubmitted,
		crowd.AssignmentExpired, crowd.AssignmentReleased}, got)
	got[0] = "X"
	require.NotContains(t, TestExcludedStates(), crowd.AssignmentState("X"), "a copy")
}
