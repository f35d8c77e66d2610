package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestQualityOverHTTP: a task's quality settings reach its pool; a
// spammer is flagged after the quiz (two test questions, both wrong),
// which look exactly like regular units; they are refused more work
// (403 problem+json); an admin forgives them (and only an admin may). Bad settings
// are named field by field.
func TestQualityOverHTTP(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			cb := setupCrowd(t, backend)
			bad := strings.Replace(sameProduct, `"priority": 5}`, `"priority": 5, "quality": {"quizSize": -1, "minTrust": "high", "nope": 1}}`, 1)
			p := cb.do(t, docket.RoleAdmin, "PUT", "/v1/tasks/same-product", bad).Problem(t, http.StatusBadRequest)
			var fields []string
			for _, e := range p.Errors {
				fields = append(fields, e.Field)
			}
			require.ElementsMatch(t, []string{"quality.quizSize", "quality.minTrust", "quality.nope"}, fields)

			tmpl := strings.Replace(sameProduct, `"priority": 5}`,
				`"priority": 5, "quality": {"quizSize": 2, "testEvery": 0, "minTests": 2, "minTrust": 0.6}}`, 1)
			pool := cb.newPool(t, "label", 1, tmpl)
			pid := pool.ID.String()
			var golden unitsResponse
			r := cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/golden", map[string]any{"units": []any{
				map[string]any{"input": map[string]any{"left": "g1", "right": "g1"}, "answer": map[string]any{"same": "yes"}},
				map[string]any{"input": map[string]any{"left": "g2", "right": "g2"}, "answer": map[string]any{"same": "yes"}},
			}})
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			r.JSON(t, &golden)
			goldenIDs := map[uuid.UUID]bool{golden.Items[0].UnitID: true, golden.Items[1].UnitID: true}

			judge := func(w worker, answer string) (*takeResponse, map[string]json.RawMessage) {
				t.Helper()
				tr, resp := cb.take(t, w, pid)
				require.NotNil(t, tr, string(resp.Body))
				var raw map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(resp.Body, &raw))
				r := cb.as(t, w.secret, "POST", "/v1/judgments", map[string]any{"assignmentId": tr.AssignmentID, "data": map[string]any{"same": answer}})
				require.Less(t, r.Status, 300, string(r.Body))
				return tr, raw
			}
			// The quiz comes first for everyone: good's first assignment is a
			// test question too. The spammer's two, the same shape as good's.
			spammer, good := cb.newWorker(t, "spam", "en"), cb.newWorker(t, "good", "en")
			_, regularShape := judge(good, "yes") // test question 1 of good
			for i := range 2 {
				tr, raw := judge(spammer, "no")
				require.True(t, goldenIDs[tr.Unit.ID], "quiz question %d", i+1)
				require.ElementsMatch(t, keys(regularShape), keys(raw), "a test question looks like any unit")
				var unit map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(raw["unit"], &unit))
				require.NotContains(t, unit, "golden")
				require.NotContains(t, unit, "answer")
			}
			var q contributorQualityView
			cb.do(t, docket.RoleAdmin, "GET", "/v1/pools/"+pid+"/contributors/"+spammer.id, nil).JSON(t, &q)
			require.True(t, q.Flagged)
			require.Equal(t, "trust", *q.FlagCheck)
			require.Equal(t, 2, q.TestsAnswered)
			require.Equal(t, 0, q.TestsCorrect)
			require.Equal(t, 2, q.TestQuestions)
			pr := cb.as(t, spammer.secret, "POST", "/v1/assignments", map[string]any{"poolId": pid}).Problem(t, http.StatusForbidden)
			require.Contains(t, pr.Detail, "flagged")

			// Viewers and producers may not forgive; unknown ids are 404.
			cb.do(t, docket.RoleProducer, "POST", "/v1/pools/"+pid+"/contributors/"+spammer.id+"/forgive", nil).Problem(t, http.StatusForbidden)
			cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+uuid.NewString()+"/contributors/"+spammer.id+"/forgive", nil).Problem(t, http.StatusNotFound)
			cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/contributors/"+uuid.NewString()+"/forgive", nil).Problem(t, http.StatusNotFound)
			// The nil UUID is no contributor either, as for the GET: it was
			// 400 "contributorId: is required".
			cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/contributors/"+uuid.Nil.String()+"/forgive", nil).Problem(t, http.StatusNotFound)
			cb.do(t, docket.RoleAdmin, "GET", "/v1/pools/"+pid+"/contributors/"+uuid.Nil.String(), nil).Problem(t, http.StatusNotFound)
			cb.do(t, docket.RoleAdmin, "GET", "/v1/pools/"+pid+"/contributors/"+uuid.NewString(), nil).Problem(t, http.StatusNotFound)
			cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/contributors/x/forgive", nil).Problem(t, http.StatusBadRequest)
			cb.do(t, docket.RoleAdmin, "POST", "/v1/pools/"+pid+"/contributors/"+spammer.id+"/forgive", nil).JSON(t, &q)
			require.False(t, q.Flagged)
			require.Nil(t, q.FlagCheck)
			require.NotNil(t, q.ForgivenAt)
			require.Equal(t, 0, q.TestsAnswered)
			// The answer is what a later read returns (forgivenAt in the
			// database's microseconds, not the clock's nanoseconds).
			var again contributorQualityView
			cb.do(t, docket.RoleAdmin, "GET", "/v1/pools/"+pid+"/contributors/"+spammer.id, nil).JSON(t, &again)
			require.Equal(t, q, again)
			tr, _ := cb.take(t, spammer, pid)
			require.NotNil(t, tr, "forgiven: work again")

			var audits unitAuditsResponse
			cb.do(t, docket.RoleViewer, "GET", "/v1/units/"+tr.Unit.ID.String()+"/audits", nil).JSON(t, &audits)
			require.Empty(t, audits.Items)
			cb.do(t, docket.RoleViewer, "GET", "/v1/units/"+uuid.NewString()+"/audits", nil).Problem(t, http.StatusNotFound)
		})
	}
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
