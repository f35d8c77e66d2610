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

// TestsDue is how many of a contributor's first n assignments in the pool
// should be test questions: the first QuizSize of them, then one in
// TestEvery (the TestEvery-th, 2·TestEvery-th, … after the quiz).
//
//	due(n) = min(n, N) + ⌊(n − N) / K⌋   (the second term 0 for n ≤ N or K = 0)
func (s Settings) TestsDue(n int) int {
	if n <= 0 {
		return 0
	}
	due := min(n, s.QuizSize)
	if s.TestEvery > 0 && n > s.QuizSize {
		due += (n - s.QuizSize) / s.TestEvery
	}
	return due
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
// pool must be a test question: it must when fewer test questions than
// due were taken (TestsDue of Taken + 1). The rule is deterministic — the
// same counts always give the same answer — and counts debts: a test
// question that could not be given (none left) is owed, and given as soon
// as a golden unit is left for them (a requester who adds golden units
// late gets them used on everyone). An EXPIRED or RELEASED test question
// counts as taken: giving it back does not skip the test, and it is never
// shown again (see TestExcludedStates).
func (s Settings) NextAssignment(c Counts) Next {
	n := c.Taken + 1
	due := s.TestsDue(n)
	if c.TestsTaken < due {
		phase := "after the quiz, one in " + fmt.Sprint(s.TestEvery)
		if c.Taken < s.QuizSize {
			phase = fmt.Sprintf("quiz: the first %d assignments", s.QuizSize)
		}
		return Next{Test: true, Reason: fmt.Sprintf("assignment %d: %d test questions due (%s), %d taken", n, due, phase, c.TestsTaken)}
	}
	return Next{Reason: fmt.Sprintf("assignment %d: %d test questions due, %d taken", n, due, c.TestsTaken)}
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
