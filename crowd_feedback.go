package docket

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/task"
)

// Feedback on test questions (docs/quality.md): once a contributor has
// submitted a judgment of a golden unit, they may learn whether it was
// right, field by field, the expected answer and the requester's
// explanation of it — as much as the pool's testFeedback setting allows.
// Nothing of it is known before they answer: a test question is taken,
// shown and answered like any unit.

// GoldenFeedbackMaxLength is the longest explanation of a golden answer
// (GoldenUnit.Feedback), in characters.
const GoldenFeedbackMaxLength = 2000

// Test feedback levels of a pool's quality settings (testFeedback).
const (
	// TestFeedbackAnswer: right or wrong, the expected answer and the
	// explanation (the default).
	TestFeedbackAnswer = quality.FeedbackAnswer
	// TestFeedbackVerdict: right or wrong only.
	TestFeedbackVerdict = quality.FeedbackVerdict
	// TestFeedbackNone: nothing.
	TestFeedbackNone = quality.FeedbackNone
)

// TestFieldScore is whether one field of a test judgment matched the
// golden answer.
type TestFieldScore = task.FieldScore

// TestResult is what a contributor learns of their judgment of a test
// question (a golden unit) once it is submitted.
type TestResult struct {
	// Correct: every field the golden answer gives was answered right.
	Correct bool
	// Fields has one entry per field the golden answer gives, in the
	// template's order.
	Fields []TestFieldScore
	// Expected is the golden answer (only the fields it gives), and
	// Feedback the requester's explanation of it ("" for none): both only
	// when the pool's testFeedback is "answer".
	Expected json.RawMessage
	Feedback string
	// Trust is the contributor's trust in the pool after this test
	// question: TestsCorrect right of TestsAnswered (docs/quality.md,
	// Trust).
	Trust         float64
	TestsCorrect  int
	TestsAnswered int
}

// GoldenFeedbackProblem says what is wrong with the explanation of a
// golden answer (GoldenUnit.Feedback), "" when nothing: GoldenAdd refuses
// it, and the API names it with the request's other problems.
func GoldenFeedbackProblem(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "must be valid UTF-8 text"
	case strings.ContainsRune(s, 0):
		return "must not contain the NUL character, which the database cannot store"
	case utf8.RuneCountInString(s) > GoldenFeedbackMaxLength:
		return fmt.Sprintf("must be at most %d characters, not %d", GoldenFeedbackMaxLength, utf8.RuneCountInString(s))
	}
	return ""
}

// testResultOf is what the contributor learns of a test judgment scored
// score against golden unit u, with their trust after it; nil when the
// pool tells nothing.
func testResultOf(level quality.TestFeedback, score task.Score, u *Unit, trust quality.Trust) *TestResult {
	if level == quality.FeedbackNone {
		return nil
	}
	r := &TestResult{Correct: score.Correct, Fields: score.Fields, Trust: trust.Value,
		TestsCorrect: trust.TestsCorrect, TestsAnswered: trust.TestsAnswered}
	if level == quality.FeedbackAnswer {
		r.Expected, r.Feedback = u.Answer, u.Feedback
	}
	return r
}

// testResultAgain scores again a test judgment submitted before (the same
// data sent twice: the first answer was lost), with the contributor's
// trust now; nil for a judgment of a regular unit, a tainted one (a
// flagged contributor's, never scored), or when the pool tells nothing.
func (c *Client) testResultAgain(ctx context.Context, pool *Pool, ct *task.Compiled, j *Judgment) (*TestResult, error) {
	qs, err := c.poolQuality(pool)
	if err != nil || !j.Golden || j.Tainted || qs.TestFeedback == quality.FeedbackNone {
		return nil, err
	}
	unit, err := c.store.UnitGet(ctx, j.UnitID)
	if err != nil {
		return nil, err
	}
	answer, err := ct.ParseAnswer(unit.Answer)
	if err != nil {
		return nil, fmt.Errorf("the answer of golden unit %s: %w", unit.ID, err)
	}
	parsed, err := ct.ParseJudgment(j.Data)
	if err != nil {
		return nil, fmt.Errorf("judgment %s: %w", j.ID, err)
	}
	st, err := c.store.QualityStateGet(ctx, pool.ID, j.ContributorID)
	if err != nil {
		return nil, err
	}
	return testResultOf(qs.TestFeedback, ct.Score(answer, parsed), unit, st.Trust), nil
}
