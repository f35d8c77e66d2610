package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// quizTask is a task whose pools put a test question first (a quiz of
// one) and none after; quality is spliced into its quality object.
const quizTask = `{"title": "Same product?", "instructions": "Do the two names describe the same product?",
 "display": [{"kind": "text", "from": "unit.left", "label": "Left"}, {"kind": "text", "from": "unit.right", "label": "Right"}],
 "fields": [{"name": "same", "kind": "choice", "required": true, "label": "Same product?",
             "options": [{"value": "yes", "label": "Same"}, {"value": "no", "label": "Different"}]},
            {"name": "note", "kind": "text", "maxLength": 200}],
 "judgmentsPerUnit": {"min": 1}, "assignmentSeconds": 600,
 "quality": {"quizSize": 1, "testEvery": 0%s}}`

// quizExplanation is the golden unit's explanation: markup that must show
// as text.
const quizExplanation = "Both name the <b>X-1</b> by Acme: the \"1\" and the dash are spelling, not a model."

// makeQuizPool makes a pool of quizTask (with the extra quality keys,
// e.g. `, "minTests": 1`) named name: one golden unit (answer "yes",
// quizExplanation) and regular units.
func makeQuizPool(t *testing.T, c *docket.Client, name, extra string, regular int) *docket.Pool {
	t.Helper()
	ctx := context.Background()
	tmpl, err := docket.ParseTask([]byte(fmt.Sprintf(quizTask, extra)))
	require.NoError(t, err)
	_, _, err = c.TaskPut(ctx, name, tmpl)
	require.NoError(t, err)
	putWorkflow(t, c, `{"name": "`+name+`", "steps": [{"name": "match", "human": {"task": "`+name+`"}}]}`)
	pool, _, err := c.PoolEnsure(ctx, name, 1, "match", name)
	require.NoError(t, err)
	var inputs []json.RawMessage
	for i := range regular {
		inputs = append(inputs, json.RawMessage(fmt.Sprintf(`{"left": "Widget %d", "right": "widget %d"}`, i, i)))
	}
	if regular > 0 {
		_, err = c.UnitsAdd(ctx, pool.ID, inputs)
		require.NoError(t, err)
	}
	_, err = c.GoldenAdd(ctx, pool.ID, []docket.GoldenUnit{{Input: json.RawMessage(`{"left": "Acme X-1", "right": "ACME X1"}`),
		Answer: json.RawMessage(`{"same": "yes"}`), Feedback: quizExplanation}})
	require.NoError(t, err)
	return pool
}

// verdictOf is the feedback block's verdict line, "" without one.
func verdictOf(r *response) string {
	s := find(r.Doc, "section", "test-feedback")
	if s == nil {
		return ""
	}
	return strings.Join(strings.Fields(text(find(s, "p", ""))), " ")
}

// TestTestFeedbackPages: on both backends, a contributor answers the
// quiz's test question wrong; the redirect to the next unit names it and
// that page says so with the expected answer, the explanation (as text)
// and the trust; the next, regular unit's judgment leads to a page with
// no feedback. Another session of the same contributor, or an id that
// is no test of this session's, shows nothing. When the wrong answer
// flags the contributor, the pools page shows the feedback with the
// refusal.
func TestTestFeedbackPages(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		pool := makeQuizPool(t, b.client, "quiz", "", 2)
		ada := b.signIn(t, RoleContributor)

		r := ada.post(t, "/work/pools/"+pool.ID.String()+"/take", nil)
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		test := assignmentOf(t, r.Header.Get("Location"))
		r = ada.get(t, r.Header.Get("Location"))
		require.Equal(t, http.StatusOK, r.Status)
		require.Nil(t, find(r.Doc, "section", "test-feedback"), "nothing before the answer")
		require.Contains(t, r.Body, "Acme X-1", "the quiz's test question")
		require.NotContains(t, r.Body, "X-1</b>", "nor its explanation")

		r = ada.post(t, "/work/a/"+test.String()+"/submit", url.Values{"f.same": {"no"}})
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		loc, err := url.Parse(r.Header.Get("Location"))
		require.NoError(t, err)
		require.Equal(t, "saved", loc.Query().Get("m"))
		require.Equal(t, test.String(), loc.Query().Get("t"), "the redirect names the test answered")
		regular := assignmentOf(t, loc.Path)
		page := ada.get(t, loc.String())
		require.Equal(t, http.StatusOK, page.Status)
		require.Equal(t, "Test question: incorrect — the expected answer was Same.", verdictOf(page))
		require.Equal(t, quizExplanation, text(find(page.Doc, "p", "test-explanation")))
		require.Contains(t, page.Body, "&lt;b&gt;X-1&lt;/b&gt;")
		require.Contains(t, text(find(page.Doc, "p", "test-trust")), "0.25 (0 of 1 test question right)")
		require.NotNil(t, find(page.Doc, "form", "work-form"), "the next unit's form below it")
		require.Contains(t, page.Body, "Widget")
		require.Equal(t, page.Body, ada.get(t, loc.String()).Body, "a reload shows it again")

		// Nobody else's: another session of Ada, a made-up id, a regular
		// assignment's id.
		other := b.signIn(t, RoleContributor)
		require.Empty(t, verdictOf(other.get(t, loc.String())))
		require.Empty(t, verdictOf(ada.get(t, "/work/a/"+regular.String()+"?t="+uuid.NewString())))
		require.Empty(t, verdictOf(ada.get(t, "/work/a/"+regular.String()+"?t="+regular.String())))
		require.Empty(t, verdictOf(ada.get(t, "/work/a/"+regular.String()+"?t=x")))

		// A regular unit: saved, no test named, no feedback.
		r = ada.post(t, "/work/a/"+regular.String()+"/submit", url.Values{"f.same": {"yes"}})
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		loc, err = url.Parse(r.Header.Get("Location"))
		require.NoError(t, err)
		require.False(t, loc.Query().Has("t"), loc.String())
		page = ada.get(t, loc.String())
		require.Equal(t, http.StatusOK, page.Status)
		require.Nil(t, find(page.Doc, "section", "test-feedback"))
		require.Contains(t, text(find(page.Doc, "p", "work-message")), "Saved")

		// A wrong answer that flags them (one test is enough here: under
		// 0.6 with probability 0.88, over the certainty 0.8): the pools
		// page, with the feedback and the refusal.
		strict := makeQuizPool(t, b.client, "strict", `, "minTests": 1, "certainty": 0.8`, 1)
		r = ada.post(t, "/work/pools/"+strict.ID.String()+"/take", nil)
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		test = assignmentOf(t, r.Header.Get("Location"))
		a, err := b.client.AssignmentGet(ctx, test)
		require.NoError(t, err)
		u, err := b.client.UnitGet(ctx, a.UnitID)
		require.NoError(t, err)
		require.True(t, u.Golden)
		ada.get(t, r.Header.Get("Location"))
		r = ada.post(t, "/work/a/"+test.String()+"/submit", url.Values{"f.same": {"no"}})
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		require.Equal(t, "/work?m=saved-refused&t="+test.String(), r.Header.Get("Location"))
		page = ada.get(t, r.Header.Get("Location"))
		require.Equal(t, "Test question: incorrect — the expected answer was Same.", verdictOf(page))
		require.Equal(t, "Saved. You may not work on that pool.", text(find(page.Doc, "p", "work-message")))
	})
}
