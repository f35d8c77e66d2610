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
		require.Contains(t, workers, "0.500 (no test yet)", "no test question answered: the prior trust")
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
		Answer: json.RawMessage(`{"same":"yes"}`), Feedback: "Same <maker>", JudgmentCount: 2, JudgmentsPerUnit: 3, CreatedAt: now}
	j := &docket.Judgment{ID: pool.ID, UnitID: u.ID, ContributorID: pool.ID, Data: json.RawMessage(`{"same":"yes"}`), Trust: &trust, Tainted: true, StartedAt: now, SubmittedAt: now.Add(time.Second)}
	return &unitData{Unit: u, Pool: pool, More: true, Judgments: []unitJudgment{
		{Judgment: j, Name: "Ada", Seconds: "1 s", Agrees: []string{"same"}},
		{Judgment: j, Seconds: "1 s", Disagree: []string{"same"}},
	}}
}

// TestComputeStats: the rate, ETA, chart, histogram, agreement and
// medians of a small sample, worked out by hand.
func TestComputeStats(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 12, 30, 0, 0, time.UTC)
	ada, bob := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	one, half, zero := 1.0, 0.5, 0.0
	u := &docket.Unit{ID: uuid.Must(uuid.NewV7()), State: docket.UnitFinalized, Result: json.RawMessage(`{"same":"yes"}`), Confidence: &one}
	j := func(who uuid.UUID, ago time.Duration, took time.Duration, unit uuid.UUID, data string) *docket.Judgment {
		return &docket.Judgment{ID: uuid.Must(uuid.NewV7()), ContributorID: who, UnitID: unit, Data: json.RawMessage(data),
			StartedAt: now.Add(-ago - took), SubmittedAt: now.Add(-ago)}
	}
	other := uuid.Must(uuid.NewV7())
	js := []*docket.Judgment{ // newest first
		j(ada, 10*time.Minute, 4*time.Second, u.ID, `{"same":"yes"}`),
		j(bob, 20*time.Minute, 10*time.Second, u.ID, `{"same":"no"}`),
		j(ada, 70*time.Minute, 6*time.Second, other, `{"same":"no"}`),
		j(ada, 5*time.Hour, 8*time.Second, other, `{"same":"no"}`), // outside the 3 h rate window
	}
	tainted := j(bob, 30*time.Minute, time.Second, u.ID, `{"same":"no"}`)
	tainted.Tainted = true
	js = append(js[:2], append([]*docket.Judgment{tainted}, js[2:]...)...)
	pool := &docket.Pool{JudgmentsPerUnit: 3, Counts: docket.PoolCounts{Judgable: 4, New: 1, Finalized: 9}}
	tmpl, err := docket.ParseTask([]byte(labelTask))
	require.NoError(t, err)
	ct, err := task.Compile(tmpl)
	require.NoError(t, err)
	s := computeStats(pool, js, []*docket.Unit{u, {ID: other, Confidence: &half}, {ID: uuid.Must(uuid.NewV7()), Confidence: &zero}, {ID: uuid.Must(uuid.NewV7())}}, ct.Fields, now)

	require.False(t, s.Full)
	require.InDelta(t, 4.0/3, s.Rate, 1e-9, "4 judgments in the last 3 hours")
	require.Equal(t, 15, s.Remaining, "5 open units × 3")
	require.Equal(t, "11h15m0s", s.ETA)
	require.Len(t, s.PerHour.Bars, statsHours)
	last := s.PerHour.Bars[statsHours-1]
	require.Equal(t, 3, last.Count, "12:00–13:00 holds the judgments of 10, 20 and 30 minutes ago")
	require.Equal(t, 1, s.PerHour.Bars[statsHours-2].Count)
	require.Equal(t, 1, s.PerHour.Bars[statsHours-6].Count, "5 h ago: 07:30, in the 07:00 bar")
	require.False(t, s.PerHour.Partial)
	require.Equal(t, histH, last.H, "the tallest bar fills the chart")

	require.Equal(t, 1, s.NoConf)
	require.Equal(t, 1, s.Confidence.Bars[0].Count)
	require.Equal(t, 1, s.Confidence.Bars[5].Count)
	require.Equal(t, 1, s.Confidence.Bars[9].Count, "a confidence of 1 is in the last bin")

	require.Equal(t, []fieldAgreement{{Field: "same", Kind: "choice", agreement: agreement{Agreed: 1, Compared: 2, Percent: "50%"}}}, s.Agreement,
		"two untainted judgments of the finalized unit, one agreeing; the other unit is not finalized")
	require.Equal(t, agreement{Agreed: 1, Compared: 2, Percent: "50%"}, s.AgreeAll)

	require.Len(t, s.Workers, 2)
	require.Equal(t, contributorRow{ID: ada, Judgments: 3, Median: "6 s"}, s.Workers[0])
	require.Equal(t, contributorRow{ID: bob, Judgments: 2, Median: "5.5 s"}, s.Workers[1])

	// A full sample of the last ten minutes: the rate is over its span,
	// the hours before it are not counted.
	full := make([]*docket.Judgment, statsJudgments)
	for i := range full {
		full[i] = j(ada, time.Duration(i)*300*time.Millisecond, time.Second, other, `{"same":"no"}`)
	}
	s = computeStats(pool, full, nil, ct.Fields, now)
	require.True(t, s.Full)
	require.True(t, s.PerHour.Partial)
	require.True(t, s.PerHour.Bars[0].Unknown)
	require.False(t, s.PerHour.Bars[statsHours-1].Unknown)
	require.InDelta(t, float64(statsJudgments)/(float64(statsJudgments-1)*0.3/3600), s.Rate, 1)
	require.Empty(t, s.AgreeAll.Compared)
	require.Equal(t, "—", s.AgreeAll.Percent)
}
