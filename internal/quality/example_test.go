package quality_test

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/task"
)

// A contributor who answers their quiz wrong is flagged after the fourth
// test question — their accuracy is under the minimum 0.5 with
// probability 0.985 — and a finalized unit they judged is reopened for
// one more clean judgment.
func Example() {
	s, err := quality.Decode([]byte(`{"quizSize": 4, "minTrust": 0.5, "minTests": 4}`))
	if err != nil {
		panic(err)
	}
	pool, who := uuid.MustParse("0190d5a0-0000-7000-8000-000000000001"), uuid.MustParse("0190d5a0-0000-7000-8000-000000000002")
	at := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

	trust, standing := quality.NewTrust(), quality.Standing{}
	counts := quality.Counts{}
	for _, right := range []bool{false, false, false, false} {
		fmt.Println(s.NextAssignment(counts, trust).Reason)
		counts.Taken++
		counts.TestsTaken++
		trust = s.ScoreTest(trust, right, at, "")
		d := s.CheckTrust(pool, who, trust, standing)
		if d.Flag {
			standing = quality.Standing{Flagged: true, Check: d.Check}
			fmt.Println("flagged:", d.Reason)
		}
	}

	jpu := task.JudgmentsPerUnit{Min: 3, Max: 3}
	repair := quality.PlanRepair(crowd.UnitFinalized, false, 3, jpu, []quality.Mark{
		{Tainted: true}, {}, {},
	})
	fmt.Println(repair.Action, repair.Target, repair.Reason)
	// Output:
	// assignment 1: a test question (quiz: the first 4 assignments); 0 taken, at least 1 due
	// assignment 2: a test question (quiz: the first 4 assignments); 1 taken, at least 2 due
	// assignment 3: a test question (quiz: the first 4 assignments); 2 taken, at least 3 due
	// assignment 4: a test question (quiz: the first 4 assignments); 3 taken, at least 4 due
	// flagged: accuracy below the minimum 0.500 with probability 0.985 (at least 0.950) after 4 test questions (0 right, trust 0.100)
	// reopen 4 1 judgments changed taint, 2 clean and 1 tainted now: under the minimum 3 clean, reopened for 1 more
}
