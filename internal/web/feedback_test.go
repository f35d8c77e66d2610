package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/task"
)

// feedbackTask has a field of every kind the expected answer is said in
// words for.
const feedbackTask = `{"title": "Label", "fields": [
 {"name": "same", "kind": "choice", "required": true, "label": "Same product?", "options": [{"value": "yes", "label": "Same"}, {"value": "no", "label": "Different"}]},
 {"name": "tags", "kind": "multi_choice", "options": [{"value": "blurry", "label": "Blurry"}, {"value": "dark"}]},
 {"name": "note", "kind": "text"}, {"name": "count", "kind": "number"}, {"name": "stars", "kind": "rating", "scale": 5},
 {"name": "boxes", "kind": "bbox", "image": "unit.photo", "labels": ["logo"]}]}`

func compiledTask(t *testing.T, src string) *docket.CompiledTask {
	t.Helper()
	tmpl, err := docket.ParseTask([]byte(src))
	require.NoError(t, err)
	ct, err := task.Compile(tmpl)
	require.NoError(t, err)
	return ct
}

// TestTestFeedbackRender renders the feedback of a test question on the
// work page and on the pools page with representative results — wrong
// with the expected answer and an explanation holding markup, wrong
// without the answer (testFeedback "verdict"), right — parses the HTML
// and reads what a contributor reads; the explanation is text, never
// markup.
func TestTestFeedbackRender(t *testing.T) {
	t.Parallel()
	h, err := New(Config{Client: nil, Auth: noAuth{}, Overview: func(context.Context, *docket.OverviewParams) (*docket.JobOverview, error) { return nil, nil }})
	require.NoError(t, err)
	contributor := &user{Name: "ada", Role: RoleContributor, CSRF: "t", Work: true}
	ct := compiledTask(t, feedbackTask)
	explain := "Both say <b>X-1</b> & \"the same\" maker.\n<script>alert(1)</script>"
	wrong := testViewOf(ct, &docket.TestResult{Correct: false, Fields: []docket.TestFieldScore{{Field: "same", Correct: false}},
		Expected: json.RawMessage(`{"same": "yes"}`), Feedback: explain, Trust: 0.25, TestsAnswered: 1})
	several := testViewOf(ct, &docket.TestResult{Correct: false,
		Fields:   []docket.TestFieldScore{{Field: "same", Correct: true}, {Field: "tags", Correct: false}, {Field: "count", Correct: true}},
		Expected: json.RawMessage(`{"same": "no", "tags": ["blurry", "dark"], "count": 2.5}`), Trust: 0.3, TestsCorrect: 1, TestsAnswered: 4})
	verdict := testViewOf(ct, &docket.TestResult{Correct: false, Fields: []docket.TestFieldScore{{Field: "same", Correct: false}}, Trust: 0.25, TestsAnswered: 1})
	right := testViewOf(ct, &docket.TestResult{Correct: true, Fields: []docket.TestFieldScore{{Field: "same", Correct: true}},
		Expected: json.RawMessage(`{"same": "yes"}`), Trust: 0.75, TestsCorrect: 1, TestsAnswered: 1})

	work := workView(t, true, "/p.png")
	for _, c := range []struct {
		name, page string
		data       any
		test       *testView
		verdict    string
		trust      string
		explain    string
		fields     []string
	}{
		{"wrong with the answer", "assignment", work, wrong, "Test question: incorrect — the expected answer was Same.",
			"Your trust in this pool is now 0.25 (0 of 1 test question right).", explain, nil},
		{"several fields", "assignment", work, several, "Test question: incorrect — the expected answer was Same product?: Different; tags: Blurry, dark; count: 2.5.",
			"Your trust in this pool is now 0.30 (1 of 4 test questions right).", "", []string{"Same product?: right", "tags: wrong", "count: right"}},
		{"verdict only, on the pools page", "work", &workData{Message: workMessages["saved"]}, verdict, "Test question: incorrect.",
			"Your trust in this pool is now 0.25 (0 of 1 test question right).", "", nil},
		{"right", "assignment", work, right, "Test question: correct.", "Your trust in this pool is now 0.75 (1 of 1 test question right).", "", nil},
		{"none", "assignment", work, nil, "", "", "", nil},
	} {
		switch d := c.data.(type) {
		case *assignmentData:
			cp := *d
			cp.Test = c.test
			c.data = &cp
		case *workData:
			cp := *d
			cp.Test = c.test
			c.data = &cp
		}
		rec := httptest.NewRecorder()
		h.render(rec, http.StatusOK, c.page, "layout", &view{Title: "Label", User: contributor, Data: c.data})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		body := rec.Body.String()
		doc := wellFormed(t, body)
		section := find(doc, "section", "test-feedback")
		if c.test == nil {
			require.Nil(t, section, "%s: a regular unit's page has no feedback", c.name)
			continue
		}
		require.NotNil(t, section, c.name)
		require.Equal(t, c.verdict, strings.Join(strings.Fields(text(find(section, "p", ""))), " "), c.name)
		require.Equal(t, "The unit you just answered was a test question with a known answer. "+c.trust,
			strings.Join(strings.Fields(text(find(section, "p", "test-trust"))), " "), c.name)
		if c.explain != "" {
			p := find(section, "p", "test-explanation")
			require.NotNil(t, p, c.name)
			require.Equal(t, c.explain, text(p), "%s: the explanation as written, as text", c.name)
			require.Nil(t, find(p, "b", ""), "no markup from the requester's text")
			require.NotContains(t, body, "<script>alert", "no script from it")
			require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
		} else {
			require.Nil(t, find(section, "p", "test-explanation"), c.name)
		}
		var items []string
		if ul := find(section, "ul", ""); ul != nil {
			for li := ul.FirstChild; li != nil; li = li.NextSibling {
				if li.Type == html.ElementNode {
					items = append(items, text(li))
				}
			}
		}
		require.Equal(t, c.fields, items, c.name)
		require.Contains(t, attr(section, "class"), map[bool]string{true: "right", false: "wrong"}[c.test.Correct])
	}
}

// TestAnswerText: an expected answer in words, per kind.
func TestAnswerText(t *testing.T) {
	t.Parallel()
	ct := compiledTask(t, feedbackTask)
	v := testViewOf(ct, &docket.TestResult{
		Fields: []docket.TestFieldScore{{Field: "same"}, {Field: "tags"}, {Field: "note"}, {Field: "count"}, {Field: "stars"}, {Field: "boxes"}, {Field: "gone"}},
		Expected: json.RawMessage(`{"same": "no", "tags": [], "note": "New  York", "count": 3, "stars": 4,
			"boxes": [{"label": "logo", "x": 0.25, "y": 0.2, "w": 0.5, "h": 0.4}]}`)})
	var got []string
	for _, f := range v.Fields {
		got = append(got, f.Label+" = "+f.Expected)
	}
	require.Equal(t, []string{"Same product? = Different", "tags = none", `note = "New  York"`, "count = 3", "stars = 4",
		"boxes = logo at 25%, 20% (50% × 40%)", "gone = "}, got)
	require.True(t, v.Answer)
	require.False(t, testViewOf(ct, &docket.TestResult{}).Answer, "no expected answer: verdict only")
}
