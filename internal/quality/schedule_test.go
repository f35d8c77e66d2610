package quality

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
)

// schedule runs n assignments through NextAssignment, a golden unit being
// available whenever available(i) says so, and returns the 1-based
// positions that were test questions.
func schedule(s Settings, n int, available func(i int) bool) []int {
	var c Counts
	var tests []int
	for i := 1; i <= n; i++ {
		if s.NextAssignment(c).Test && available(i) {
			c.TestsTaken++
			tests = append(tests, i)
		}
		c.Taken++
	}
	return tests
}

func always(int) bool { return true }

func TestScheduleQuizThenOneInK(t *testing.T) {
	t.Parallel()
	s := Defaults()
	s.QuizSize, s.TestEvery = 4, 10
	require.Equal(t, []int{1, 2, 3, 4, 14, 24, 34}, schedule(s, 40, always))
	s.QuizSize, s.TestEvery = 0, 3
	require.Equal(t, []int{3, 6, 9}, schedule(s, 10, always))
	s.QuizSize, s.TestEvery = 2, 0
	require.Equal(t, []int{1, 2}, schedule(s, 30, always))
	s.QuizSize, s.TestEvery = 0, 0
	require.Empty(t, schedule(s, 30, always))
	// TestsDue by hand: due(n) = min(n, N) + ⌊(n − N) / K⌋.
	s.QuizSize, s.TestEvery = 4, 10
	for n, want := range map[int]int{0: 0, 1: 1, 4: 4, 5: 4, 13: 4, 14: 5, 23: 5, 24: 6} {
		require.Equal(t, want, s.TestsDue(n), "due(%d)", n)
	}
}

func TestScheduleOwesMissedTests(t *testing.T) {
	t.Parallel()
	s := Defaults()
	s.QuizSize, s.TestEvery = 4, 10
	// No golden unit for the first 10 assignments: the four quiz questions
	// and the one due at the 14th are owed, given as soon as golden units
	// exist (due(15) = 4 + ⌊11/10⌋ = 5).
	require.Equal(t, []int{11, 12, 13, 14, 15, 24}, schedule(s, 30, func(i int) bool { return i > 10 }))
	next := s.NextAssignment(Counts{Taken: 10, TestsTaken: 0})
	require.True(t, next.Test)
	require.Contains(t, next.Reason, "4 test questions due")
	require.False(t, s.NextAssignment(Counts{Taken: 4, TestsTaken: 4}).Test)
	require.True(t, s.NextAssignment(Counts{Taken: 13, TestsTaken: 4}).Test, "the 14th is the first after the quiz")
}

// Property: with golden units always available, the tests taken after n
// assignments are exactly TestsDue(n), the schedule never gives more than
// N + ⌈(n − N)/K⌉, and the same counts give the same answer.
func TestScheduleProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		s := Defaults()
		s.QuizSize = rng.IntN(8)
		s.TestEvery = []int{0, 2, 3, 5, 10, 17}[rng.IntN(6)]
		n := rng.IntN(200)
		tests := schedule(s, n, always)
		require.Equal(t, s.TestsDue(n), len(tests), "%+v n=%d", s, n)
		for i, p := range tests {
			if i < s.QuizSize {
				require.Equal(t, i+1, p, "the quiz comes first")
			} else {
				require.Equal(t, 0, (p-s.QuizSize)%s.TestEvery, "one in K after the quiz")
			}
		}
		c := Counts{Taken: rng.IntN(100), TestsTaken: rng.IntN(20)}
		require.Equal(t, s.NextAssignment(c), s.NextAssignment(c))
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
