package quality

import (
	"fmt"

	"github.com/docket-run/docket/internal/crowd"
)

// Counts are what a pool knows of one contributor's assignments there.
type Counts struct {
	// Taken is every assignment the contributor was given in the pool, in
	// any state (ACTIVE, SUBMITTED, EXPIRED, RELEASED), test questions
	// included.
	Taken int
	// TestsTaken is how many of them were test questions (golden units).
	TestsTaken int
}

// TestsDue is how many of a contributor's first n assignments in the
// pool must at least be test questions: the first QuizSize of them, then
// one in R after the quiz (the R-th, 2R-th, …), R the slowest rate a
// contributor can be tested at (TestEveryTrusted, never under
// TestEvery). Tests the schedule wanted but could not give (no golden
// unit was left) are owed up to this count.
//
//	due(n) = min(n, N) + ⌊(n − N) / R⌋   (the second term 0 for n ≤ N or TestEvery = 0)
func (s Settings) TestsDue(n int) int {
	if n <= 0 {
		return 0
	}
	due := min(n, s.QuizSize)
	if r := s.slowestRate(); r > 0 && n > s.QuizSize {
		due += (n - s.QuizSize) / r
	}
	return due
}

// slowestRate is one in how many assignments after the quiz a trusted
// contributor is tested: TestEveryTrusted, but never under TestEvery; 0
// for no test after the quiz.
func (s Settings) slowestRate() int {
	if s.TestEvery == 0 {
		return 0
	}
	return max(s.TestEvery, s.TestEveryTrusted)
}

// Next is the scheduling decision for a contributor's next assignment.
type Next struct {
	// Test: take a golden unit (a test question). When the pool has none
	// left for this contributor (crowd.ErrNoUnit from the golden take),
	// take a regular unit instead: a contributor is never kept from work
	// because the requester has too few test questions.
	Test bool
	// Reason says why, with the numbers.
	Reason string
}

// NextAssignment decides whether a contributor's next assignment in the
// pool, the n-th (n = Taken + 1), must be a test question, from their
// counts and what their test questions say of them (ConfidenceOf t):
//
//   - the quiz: the first QuizSize assignments are test questions;
//   - after it (when TestEvery > 0), at the rate their standing calls
//     for: every assignment while they are suspect (more likely below
//     MinTrust than not: a regular judgment of theirs would likely be
//     tainted, a test question settles it); one in TestEveryTrusted once
//     trusted (at least MinTrust with probability Certainty); one in
//     TestEvery otherwise — the assignments n with (n − QuizSize) a
//     multiple of the rate;
//   - and whatever is owed: fewer test questions taken than TestsDue(n),
//     because no golden unit was left when one was due.
//
// The rule is deterministic — the same counts and trust always give the
// same answer. An EXPIRED or RELEASED test question counts as taken:
// giving it back does not skip the test, and it is never shown again (see
// TestExcludedStates).
func (s Settings) NextAssignment(c Counts, t Trust) Next {
	n := c.Taken + 1
	due := s.TestsDue(n)
	test := func(why string) Next {
		return Next{Test: true, Reason: fmt.Sprintf("assignment %d: a test question (%s); %d taken, at least %d due", n, why, c.TestsTaken, due)}
	}
	if c.TestsTaken < min(n, s.QuizSize) {
		return test(fmt.Sprintf("quiz: the first %d assignments", s.QuizSize))
	}
	rate := s.TestEvery
	if s.TestEvery > 0 && n > s.QuizSize {
		conf := s.ConfidenceOf(t)
		switch {
		case conf == ConfidenceSuspect:
			return test(fmt.Sprintf("suspect: accuracy more likely below %.3f than not after %d of %d right", s.MinTrust, t.TestsCorrect, t.TestsAnswered))
		case conf == ConfidenceTrusted:
			rate = s.slowestRate()
		}
		if (n-s.QuizSize)%rate == 0 {
			return test(fmt.Sprintf("%s: one in %d", conf, rate))
		}
		if c.TestsTaken < due {
			return test("owed: none was left when it was due")
		}
		return Next{Reason: fmt.Sprintf("assignment %d: %s, one in %d; %d taken", n, conf, rate, c.TestsTaken)}
	}
	if c.TestsTaken < due {
		return test("owed: none was left when it was due")
	}
	return Next{Reason: fmt.Sprintf("assignment %d: no test question after the quiz; %d taken", n, c.TestsTaken)}
}

// TestExcludedStates are the states of a contributor's assignments that
// exclude a golden unit from their test-question take: all of them. A test
// question is never shown twice to one person, even when they let the
// first assignment expire or gave it back. The store's golden take must
// therefore skip every golden unit with any assignment of the contributor
// — `NOT EXISTS (SELECT 1 FROM docket_assignments a WHERE a.unit_id = u.id
// AND a.contributor_id = $contributor)`, with no condition on a.state —
// which is what the UNIQUE (unit_id, contributor_id) of the assignments
// also enforces for regular units.
func TestExcludedStates() []crowd.AssignmentState {
	return append([]crowd.AssignmentState(nil), crowd.AssignmentStates...)
}
