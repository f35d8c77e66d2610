package docket

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/testdb"
)

// TestTestFeedback: a judgment of a test question answers with what the
// pool's testFeedback allows — right or wrong field by field, the
// expected answer and the requester's explanation, the trust after it —
// the same when the judgment is sent again; a regular unit's judgment
// answers with none; "verdict" keeps the answer and its explanation back,
// "none" tells nothing.
func TestTestFeedback(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newQualityFixture(t, backend, "answer", "verdict", "none", "right")
			const why = `Both say "X-1" <b>&</b> the same maker.`
			for _, c := range []struct {
				step, settings string
			}{
				{"answer", `{"quizSize": 1, "testEvery": 0}`},
				{"verdict", `{"quizSize": 1, "testEvery": 0, "testFeedback": "verdict"}`},
				{"none", `{"quizSize": 1, "testEvery": 0, "testFeedback": "none"}`},
			} {
				pool, _ := f.pool(t, c.step, c.settings, 0, 1)
				_, err := f.c.GoldenAdd(ctx, pool.ID, []GoldenUnit{{Input: json.RawMessage(`{}`),
					Answer: json.RawMessage(`{"same": "yes", "tags": ["a"]}`), Feedback: why}})
				require.NoError(t, err)
				who := f.contributor(t)

				golden, err := f.c.AssignmentTake(ctx, pool.ID, who)
				require.NoError(t, err)
				require.True(t, golden.Unit.Golden, "the quiz first")
				sub, err := f.c.JudgmentSubmit(ctx, golden.Assignment.ID, who, json.RawMessage(`{"same": "no", "tags": ["a"]}`))
				require.NoError(t, err)
				again, err := f.c.JudgmentSubmit(ctx, golden.Assignment.ID, who, json.RawMessage(`{"same": "no", "tags": ["a"]}`))
				require.NoError(t, err)
				require.False(t, again.Created)
				require.Equal(t, sub.Test, again.Test, "%s: the same answer when sent again", c.step)
				switch c.step {
				case "none":
					require.Nil(t, sub.Test)
				default:
					require.NotNil(t, sub.Test, c.step)
					require.False(t, sub.Test.Correct)
					require.Equal(t, []TestFieldScore{{Field: "same", Correct: false}, {Field: "tags", Correct: true}}, sub.Test.Fields)
					require.Equal(t, 0.25, sub.Test.Trust, "one wrong test question: (0.5 + 0) / (1 + 1)")
					require.Equal(t, [2]int{0, 1}, [2]int{sub.Test.TestsCorrect, sub.Test.TestsAnswered})
					if c.step == "answer" {
						require.JSONEq(t, `{"same": "yes", "tags": ["a"]}`, string(sub.Test.Expected))
						require.Equal(t, why, sub.Test.Feedback, "stored and returned as given")
					} else {
						require.Nil(t, sub.Test.Expected)
						require.Empty(t, sub.Test.Feedback)
					}
				}

				regular, err := f.c.AssignmentTake(ctx, pool.ID, who)
				require.NoError(t, err)
				require.False(t, regular.Unit.Golden)
				sub, err = f.c.JudgmentSubmit(ctx, regular.Assignment.ID, who, json.RawMessage(`{"same": "yes"}`))
				require.NoError(t, err)
				require.Nil(t, sub.Test, "a regular unit's judgment says nothing")
				again, err = f.c.JudgmentSubmit(ctx, regular.Assignment.ID, who, json.RawMessage(`{"same": "yes"}`))
				require.NoError(t, err)
				require.Nil(t, again.Test)
			}

			// A right answer: correct, trust up.
			pool, _ := f.pool(t, "right", `{"quizSize": 1, "testEvery": 0}`, 1, 0)
			who := f.contributor(t)
			golden, err := f.c.AssignmentTake(ctx, pool.ID, who)
			require.NoError(t, err)
			sub, err := f.c.JudgmentSubmit(ctx, golden.Assignment.ID, who, json.RawMessage(`{"same": "yes"}`))
			require.NoError(t, err)
			require.True(t, sub.Test.Correct)
			require.Equal(t, 0.75, sub.Test.Trust)
			require.Empty(t, sub.Test.Feedback, "none given")
		})
	}
}

// TestGoldenFeedbackValidation: an explanation too long or holding a NUL
// is named with its unit's index, next to the answers' problems, and
// nothing is added; the longest one is kept whole.
func TestGoldenFeedbackValidation(t *testing.T) {
	t.Parallel()
	backend := testdb.Backends()[0]
	ctx := context.Background()
	f := newQualityFixture(t, backend, "label")
	pool, _ := f.pool(t, "label", `{}`, 0, 0)
	ok := json.RawMessage(`{"same": "yes"}`)
	_, err := f.c.GoldenAdd(ctx, pool.ID, []GoldenUnit{
		{Input: json.RawMessage(`{}`), Answer: ok, Feedback: strings.Repeat("é", GoldenFeedbackMaxLength+1)},
		{Input: json.RawMessage(`{}`), Answer: json.RawMessage(`{"same": "maybe"}`)},
		{Input: json.RawMessage(`{}`), Answer: ok, Feedback: "a\x00b"},
		{Input: json.RawMessage(`{}`), Answer: ok, Feedback: "\xff"},
	})
	var ve *CrowdValidationError
	require.True(t, errors.As(err, &ve), "%v", err)
	var fields []string
	for _, fe := range ve.Errors {
		fields = append(fields, fe.Field)
	}
	require.Equal(t, []string{"units[0].feedback", "units[1].answer.same", "units[2].feedback", "units[3].feedback"}, fields)
	require.Equal(t, "must be at most 2000 characters, not 2001", ve.Errors[0].Message)
	got, err := f.c.PoolGet(ctx, pool.ID)
	require.NoError(t, err)
	require.Zero(t, got.Counts.Golden, "nothing added")

	long := strings.Repeat("é", GoldenFeedbackMaxLength)
	units, err := f.c.GoldenAdd(ctx, pool.ID, []GoldenUnit{{Input: json.RawMessage(`{}`), Answer: ok, Feedback: long}})
	require.NoError(t, err)
	read, err := f.c.UnitGet(ctx, units[0].ID)
	require.NoError(t, err)
	require.Equal(t, long, read.Feedback)
}
