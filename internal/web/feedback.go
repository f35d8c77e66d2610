package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/task"
)

// Feedback on test questions (docs/quality.md, docs/web.md): when the
// unit a contributor just submitted was a test question, the page after
// it — the next unit, or the pools when none is left — says whether they
// were right and, as far as the pool's testFeedback allows, the expected
// answer and the requester's explanation, with their trust in the pool.
// It is what JudgmentSubmit scored (docket.TestResult), kept in the
// session under the submitted assignment's id, which the redirect names
// (?t=): a reload shows it again, another session cannot, and nothing is
// read from the database for it. Before an answer nothing of it exists: a
// test question's page is a unit's page.

// testsKept is how many test results a session keeps (the newest).
const testsKept = 20

// testView is the feedback block of a page.
type testView struct {
	Correct bool
	// Fields: each field the golden answer gives, right or wrong, with
	// the expected answer in words when the pool shows it.
	Fields []testField
	// Answer: the pool shows the expected answer (testFeedback "answer").
	Answer bool
	// Feedback is the requester's explanation (plain text: html/template
	// escapes it).
	Feedback string
	Trust    string
	// TestsCorrect of TestsAnswered test questions right in the pool.
	TestsCorrect, TestsAnswered int
}

type testField struct {
	Label    string
	Correct  bool
	Expected string // "" when not shown
}

// testViewOf puts a test result in words with the task's labels.
func testViewOf(ct *docket.CompiledTask, res *docket.TestResult) *testView {
	v := &testView{Correct: res.Correct, Answer: res.Expected != nil, Feedback: res.Feedback,
		Trust: strconv.FormatFloat(res.Trust, 'f', 2, 64), TestsCorrect: res.TestsCorrect, TestsAnswered: res.TestsAnswered}
	var expected task.Judgment
	if res.Expected != nil {
		// Stored valid; an answer the template no longer reads shows no
		// values rather than failing the page.
		expected, _ = ct.ParseAnswer(res.Expected)
	}
	for _, fs := range res.Fields {
		tf := testField{Label: fs.Field, Correct: fs.Correct}
		if f, ok := ct.Field(fs.Field); ok {
			if f.Label != "" {
				tf.Label = f.Label
			}
			if val, ok := expected[fs.Field]; ok {
				tf.Expected = answerText(f, val)
			}
		}
		v.Fields = append(v.Fields, tf)
	}
	return v
}

// answerText says a field's value in words: an option's label, a
// number, the text quoted, the boxes counted.
func answerText(f *task.Field, v any) string {
	label := func(value string) string {
		for _, o := range f.Options {
			if o.Value == value && o.Label != "" {
				return o.Label
			}
		}
		return value
	}
	switch x := v.(type) {
	case string:
		if f.Kind == task.KindText {
			return strconv.Quote(x)
		}
		return label(x)
	case []string:
		if len(x) == 0 {
			return "none"
		}
		out := make([]string, len(x))
		for i, s := range x {
			out[i] = label(s)
		}
		return strings.Join(out, ", ")
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case int:
		return strconv.Itoa(x)
	case []task.Box:
		parts := make([]string, len(x))
		for i, b := range x {
			parts[i] = fmt.Sprintf("%s at %.0f%%, %.0f%% (%.0f%% × %.0f%%)", b.Label, 100*b.X, 100*b.Y, 100*b.W, 100*b.H)
		}
		if len(parts) == 0 {
			return "no box"
		}
		return strings.Join(parts, "; ")
	}
	return fmt.Sprint(v)
}

// keepTest keeps what the submitted assignment's test question scored
// in the session, and returns the id the redirect names (uuid.Nil for a
// regular unit: nothing to show).
func keepTest(r *http.Request, assignment uuid.UUID, ct *docket.CompiledTask, res *docket.TestResult) uuid.UUID {
	if res == nil {
		return uuid.Nil
	}
	ss := sessionOf(r.Context())
	ss.testMu.Lock()
	defer ss.testMu.Unlock()
	if ss.tested == nil {
		ss.tested = map[uuid.UUID]*testView{}
	}
	if _, ok := ss.tested[assignment]; !ok {
		ss.testOrder = append(ss.testOrder, assignment)
	}
	ss.tested[assignment] = testViewOf(ct, res)
	for len(ss.testOrder) > testsKept {
		delete(ss.tested, ss.testOrder[0])
		ss.testOrder = ss.testOrder[1:]
	}
	return assignment
}

// testShown is the feedback the page's ?t= names, nil when none (or not
// this session's).
func testShown(r *http.Request) *testView {
	id, err := uuid.Parse(r.URL.Query().Get("t"))
	if err != nil {
		return nil
	}
	ss := sessionOf(r.Context())
	ss.testMu.Lock()
	defer ss.testMu.Unlock()
	return ss.tested[id]
}
