package docket

import "fmt"

// Reviews makes a human step a review of human step step, an ancestor:
// its unit carries that step's input and answer, and its task's verdict
// field (approve, correct, reject) decides what becomes of the answer
// (docs/workflows.md, "Review steps"). Route it with If, for example
// If("steps.label.confidence < 0.8 || sample(0.1)").
func Reviews(step string) StepOption {
	return func(s *WorkflowStep) error {
		if s.Human == nil {
			return fmt.Errorf("Reviews applies to human steps only")
		}
		s.Human.Review = step
		return nil
	}
}
