package api

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestGoldenFeedbackUpload: a golden unit's explanation (feedback, next to
// answer) is stored and shown to the requester; one too long or holding
// a NUL, or not a string, is named with its unit's index, with the
// request's other problems, and nothing is added.
func TestGoldenFeedbackUpload(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		pid := cb.newPool(t, "label", 0, sameProduct).ID.String()
		path := "/v1/pools/" + pid + "/golden"
		long := strings.Repeat("ü", docket.GoldenFeedbackMaxLength+1)
		p := cb.do(t, docket.RoleAdmin, "POST", path, map[string]any{"units": []any{
			map[string]any{"input": 3, "answer": map[string]any{"same": "yes"}, "feedback": long},
			map[string]any{"input": map[string]any{}, "answer": map[string]any{"same": "yes"}, "feedback": "a\u0000b"},
			map[string]any{"input": map[string]any{}, "answer": map[string]any{"same": "yes"}, "feedback": "fine"},
		}}).Problem(t, http.StatusBadRequest)
		require.Equal(t, []FieldError{
			{Field: "units[0].input", Message: "must be a JSON object: the unit's data"},
			{Field: "units[0].feedback", Message: "must be at most 2000 characters, not 2001"},
			{Field: "units[1].feedback", Message: "must not contain the NUL character, which the database cannot store"},
		}, p.Errors)
		p = cb.do(t, docket.RoleAdmin, "POST", path,
			`{"units": [{"input": {}, "answer": {"same": "yes"}, "feedback": 7}]}`).Problem(t, http.StatusBadRequest)
		require.Equal(t, []FieldError{{Field: "units[0].feedback", Message: "must be a string: why the answer is right"}}, p.Errors)
		var pv poolView
		cb.do(t, docket.RoleViewer, "GET", "/v1/pools/"+pid, nil).JSON(t, &pv)
		require.Zero(t, pv.Counts.Golden, "nothing added")

		why := strings.Repeat("ü", docket.GoldenFeedbackMaxLength-11) + " <b>why</b>"
		var added unitsResponse
		r := cb.do(t, docket.RoleAdmin, "POST", path, map[string]any{"units": []any{
			map[string]any{"input": map[string]any{"left": "a"}, "answer": map[string]any{"same": "yes"}, "feedback": why},
			map[string]any{"input": map[string]any{"left": "b"}, "answer": map[string]any{"same": "no"}},
		}})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		r.JSON(t, &added)
		require.Equal(t, why, added.Items[0].Feedback, "the longest explanation, whole")
		var u map[string]any
		cb.do(t, docket.RoleViewer, "GET", "/v1/units/"+added.Items[1].UnitID.String(), nil).JSON(t, &u)
		require.NotContains(t, u, "feedback", "none given: no key")
		cb.do(t, docket.RoleViewer, "GET", "/v1/units/"+added.Items[0].UnitID.String(), nil).JSON(t, &u)
		require.Equal(t, why, u["feedback"])
	})
}

// TestJudgmentTestResult: a test question is taken in the same shape as a
// regular unit; once judged, the 202 carries test {correct, fields,
// expected, feedback, trust, testsCorrect, testsAnswered} — and the same
// again with the 200 of a repeat; a regular unit's answer has no test.
func TestJudgmentTestResult(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		cb := setupCrowd(t, backend)
		tmpl := strings.Replace(sameProduct, `"priority": 5}`, `"priority": 5, "quality": {"quizSize": 1, "testEvery": 0}}`, 1)
		pid := cb.newPool(t, "label", 1, tmpl).ID.String()
		r := cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/golden", map[string]any{"units": []any{
			map[string]any{"input": map[string]any{"left": "X-1", "right": "X1"}, "answer": map[string]any{"same": "yes"},
				"feedback": "Both are the X-1 <model>."},
		}})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		w := cb.newWorker(t, "a", "en")

		judge := func(aid, answer string, status int) map[string]any {
			t.Helper()
			r := cb.as(t, w.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": aid, "data": map[string]any{"same": answer}})
			require.Equal(t, status, r.Status, string(r.Body))
			var body map[string]any
			r.JSON(t, &body)
			return body
		}
		keys := func(m map[string]any) []string {
			var ks []string
			for k := range m {
				ks = append(ks, k)
			}
			slices.Sort(ks)
			return ks
		}

		_, tr := cb.take(t, w, pid)
		var golden map[string]any
		tr.JSON(t, &golden)
		var gt takeResponse
		tr.JSON(t, &gt)
		require.Contains(t, string(gt.Unit.Input), "X-1", "the quiz's test question")
		first := judge(gt.AssignmentID.String(), "no", http.StatusAccepted)
		want := map[string]any{"correct": false, "fields": []any{map[string]any{"field": "same", "correct": false}},
			"expected": map[string]any{"same": "yes"}, "feedback": "Both are the X-1 <model>.",
			"trust": 0.25, "testsCorrect": float64(0), "testsAnswered": float64(1)}
		require.Equal(t, want, first["test"])
		require.Equal(t, []string{"assignmentId", "finalized", "judgmentId", "test", "unitId"}, keys(first))
		again := judge(gt.AssignmentID.String(), "no", http.StatusOK)
		require.Equal(t, first, again, "a repeat answers the same")

		_, tr = cb.take(t, w, pid)
		var regular map[string]any
		tr.JSON(t, &regular)
		require.Equal(t, keys(golden), keys(regular), "a test question is taken in the same shape")
		require.Equal(t, keys(golden["unit"].(map[string]any)), keys(regular["unit"].(map[string]any)))
		var rt takeResponse
		tr.JSON(t, &rt)
		body := judge(rt.AssignmentID.String(), "yes", http.StatusAccepted)
		require.NotContains(t, body, "test", "a regular unit's answer")
		require.Equal(t, []string{"assignmentId", "finalized", "judgmentId", "unitId"}, keys(body))
		body = judge(rt.AssignmentID.String(), "yes", http.StatusOK)
		require.NotContains(t, body, "test")
	})
}
