package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/api"
	"github.com/docket-run/docket/internal/task"
	"github.com/docket-run/docket/internal/testdb"
)

// judge has contributor c take a unit of the pool and answer same.
func judge(t *testing.T, c *docket.Client, poolID, contributor uuid.UUID, same string) *docket.SubmittedJudgment {
	t.Helper()
	ctx := context.Background()
	ta, err := c.AssignmentTake(ctx, poolID, contributor)
	require.NoError(t, err)
	s, err := c.JudgmentSubmit(ctx, ta.Assignment.ID, contributor, json.RawMessage(`{"same":"`+same+`"}`))
	require.NoError(t, err)
	return s
}

// TestPoolProgressPages: two contributors judge; the pool page shows the
// rate, the ETA, agreement and the contributors from the samples; the
// unit page shows the input, each judgment against the result; the
// exports equal the API's byte for byte; a viewer sees it all, a
// contributor none of it, no session nothing.
func TestPoolProgressPages(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		tmpl, err := docket.ParseTask([]byte(labelTask))
		require.NoError(t, err)
		_, _, err = b.client.TaskPut(ctx, "same", tmpl)
		require.NoError(t, err)
		putWorkflow(t, b.client, `{"name": "review", "steps": [{"name": "label", "human": {"task": "same"}}]}`)
		pool, _, err := b.client.PoolEnsure(ctx, "review", 1, "label", "same")
		require.NoError(t, err)
		_, err = b.client.UnitsAdd(ctx, pool.ID, []json.RawMessage{json.RawMessage(`{"photo":"<a>.png"}`), json.RawMessage(`{"photo":"b.png"}`)})
		require.NoError(t, err)
		bob, err := b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "bob", Name: "Bob"})
		require.NoError(t, err)
		cyd, err := b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "cyd", Name: "Cyd"})
		require.NoError(t, err)

		// Three judgments on two units that need two each: one unit is
		// finalized, whichever the takes picked.
		var fin *docket.Unit
		for _, who := range []uuid.UUID{b.contributor.ID, bob.ID, cyd.ID} {
			if s := judge(t, b.client, pool.ID, who, "yes"); s.Finalized != nil {
				fin = s.Finalized
			}
		}
		require.NotNil(t, fin)
		unit := fin.ID
		b.clock.Add(time.Since(b.clock.Now()))

		viewer := b.signIn(t, docket.RoleViewer)
		r := viewer.get(t, "/pools/"+pool.ID.String())
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		require.NotEqual(t, "0", text(find(r.Doc, "span", "rate")), "judgments in the last hours make a rate")
		require.Contains(t, text(find(r.Doc, "dd", "eta")), "about")
		require.NotNil(t, find(r.Doc, "svg", "hours-chart"))
		require.NotNil(t, find(r.Doc, "svg", "confidence-chart"))
		require.Contains(t, text(find(r.Doc, "td", "agree-all")), "100% (2 of 2)", "both judgments of the finalized unit said yes")
		workers := text(find(r.Doc, "table", "contributors"))
		require.Contains(t, workers, "Ada")
		require.Contains(t, workers, "Bob")
		require.Contains(t, workers, "Cyd")
		require.Contains(t, workers, "quality control")
		require.Equal(t, "/pools/"+pool.ID.String()+"/results?format=csv", attr(find(r.Doc, "a", "export-csv"), "href"))
		require.Contains(t, r.Body, `href="/units/`+unit.String()+`"`)

		r = viewer.get(t, "/units/"+unit.String())
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		require.Equal(t, "FINALIZED", text(find(r.Doc, "span", "unit-state")))
		require.Contains(t, text(find(r.Doc, "pre", "result")), `"same": "yes"`)
		js := text(find(r.Doc, "table", "judgments"))
		require.Equal(t, 2, strings.Count(js, "same ✓"), js)
		require.NotContains(t, js, "✗")
		input := text(find(r.Doc, "pre", "input"))
		require.True(t, strings.Contains(input, `"<a>.png"`) || strings.Contains(input, `"b.png"`), input)
		require.Equal(t, http.StatusNotFound, viewer.get(t, "/units/"+uuid.NewString()).Status)
		require.Equal(t, http.StatusNotFound, viewer.get(t, "/units/nope").Status)

		// The exports are the API's, byte for byte.
		srv := httptest.NewServer(api.New(api.Config{Client: b.client}))
		t.Cleanup(srv.Close)
		for _, format := range []string{"jsonl", "csv"} {
			r := viewer.get(t, "/pools/"+pool.ID.String()+"/results?format="+format)
			require.Equal(t, http.StatusOK, r.Status)
			require.Contains(t, r.Header.Get("Content-Disposition"), "attachment")
			require.Contains(t, r.Body, fin.ID.String())
			req, _ := http.NewRequest("GET", srv.URL+"/v1/pools/"+pool.ID.String()+"/results?format="+format, nil)
			req.Header.Set("Authorization", "Bearer "+b.keys[docket.RoleViewer])
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			want, err := io.ReadAll(res.Body)
			res.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, res.StatusCode)
			require.Equal(t, string(want), r.Body, format)
			require.Equal(t, res.Header.Get("Content-Type"), r.Header.Get("Content-Type"))
		}
		require.Equal(t, http.StatusBadRequest, viewer.get(t, "/pools/"+pool.ID.String()+"/results?format=xml").Status)
		require.Equal(t, http.StatusNotFound, viewer.get(t, "/pools/"+uuid.NewString()+"/results").Status)

		contributor := b.signIn(t, RoleContributor)
		anon := b.browser(t)
		for _, p := range []string{"/units/" + unit.String(), "/pools/" + pool.ID.String() + "/results?format=csv"} {
			require.Equal(t, http.StatusForbidden, contributor.get(t, p).Status, p)
			require.Equal(t, http.StatusSeeOther, anon.get(t, p).Status, p)
		}
	})
}

// sampleStats is the pool page's panels for a full sample reaching back
// two hours: three judgments on a finalized unit (two agreeing), a
// hundred more from one contributor.
func sampleStats(t *testing.T, pool *docket.Pool, now time.Time) *poolStats {
	t.Helper()
	ada, bob := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	conf := 0.95
	u := &docket.Unit{ID: uuid.Must(uuid.NewV7()), State: docket.UnitFinalized, Result: json.RawMessage(`{"same":"yes"}`), Confidence: &conf}
	var js []*docket.Judgment
	for i := range statsJudgments {
		at := now.Add(-time.Duration(i) * 3 * time.Second)
		j := &docket.Judgment{ID: uuid.Must(uuid.NewV7()), UnitID: uuid.Must(uuid.NewV7()), ContributorID: bob, Data: json.RawMessage(`{"same":"no"}`), StartedAt: at.Add(-5 * time.Second), SubmittedAt: at}
		switch i {
		case 0, 1:
			j.UnitID, j.ContributorID, j.Data = u.ID, ada, json.RawMessage(`{"same":"yes"}`)
		case 2:
			j.UnitID = u.ID
		}
		js = append(js, j)
	}
	tmpl, err := docket.ParseTask([]byte(labelTask))
	require.NoError(t, err)
	ct, err := task.Compile(tmpl)
	require.NoError(t, err)
	fields := ct.Fields
	s := computeStats(pool, js, []*docket.Unit{u, {ID: uuid.Must(uuid.NewV7()), State: docket.UnitFinalized}}, fields, now)
	require.True(t, s.Full)
	require.Equal(t, 1, s.NoConf)
	s.Workers[1].Name = "Ada"
	return s
}

// sampleUnit is a unit page's data: a golden unit, one judgment agreeing
// and one not, more than the page lists.
func sampleUnit(t *testing.T, pool *docket.Pool, now time.Time) *unitData {
	t.Helper()
	trust := 0.5
	u := &docket.Unit{ID: pool.ID, PoolID: pool.ID, RunID: pool.ID, State: docket.UnitJudgable, Golden: true, Input: json.RawMessage(`{"photo":"<b>.png"}`),
		Answer: json.RawMessage(`{"same":"yes"}`), JudgmentCount: 2, JudgmentsPerUnit: 3, CreatedAt: now}
	j := &docket.Judgment{ID: pool.ID, UnitID: u.ID, ContributorID: pool.ID, Data: json.RawMessage(`{"same":"yes"}`), Trust: &trust, Tainted: true, StartedAt: now, SubmittedAt: now.Add(time.Second)}
	return &unitData{Unit: u, Pool: pool, More: true, Judgments: []unitJudgment{
		{Judgment: j, Name: "Ada", Seconds: "1 s", Agrees: []string{"same"}},
		{Judgment: j, Seconds: "1 s", Disagree: []string{"same"}},
	}}
}
