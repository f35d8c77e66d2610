package web

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/testdb"
)

// rows returns the <tr> of a table's body.
func rows(table *html.Node) []*html.Node {
	var out []*html.Node
	tbody := find(table, "tbody", "")
	for tr := tbody.FirstChild; tr != nil; tr = tr.NextSibling {
		if tr.Type == html.ElementNode && tr.Data == "tr" {
			out = append(out, tr)
		}
	}
	return out
}

// TestQualityPages: the pool's contributors panel (flagged first, then
// the lowest trust; bounded with "n more"), a contributor's page (state,
// trust history drawn, recent judgments with the tainted one marked),
// the unit page (tainted judgment excluded, agreement, the audit of the
// result); a viewer sees them, a contributor none, no session nothing.
func TestQualityPages(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setupQuality(t, backend)
		s := seedQuality(t, b)
		viewer := b.signIn(t, docket.RoleViewer)
		poolPath := "/pools/" + s.pool.ID.String()

		r := viewer.get(t, poolPath)
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		trs := rows(find(r.Doc, "table", "contributors"))
		require.Len(t, trs, 3)
		want := []*docket.Contributor{s.spm, s.bob, s.ada}
		for i, tr := range trs {
			require.Equal(t, want[i].ID.String(), attr(tr, "data-contributor"), "flagged first, then trust ascending: row %d", i)
		}
		spam, bob, ada := text(trs[0]), text(trs[1]), text(trs[2])
		require.Equal(t, "flagged", attr(trs[0], "class"))
		require.Contains(t, spam, "Spam Bot")
		require.Contains(t, spam, "FLAGGED trust: accuracy below the minimum 0.600 with probability 0.986")
		require.Contains(t, spam, "0.125")
		require.Contains(t, spam, "0 of 3 right (0%)")
		require.Contains(t, bob, "forgiven")
		require.Contains(t, bob, "0.500 (no test yet)")
		require.Contains(t, bob, "none", "his test counts restarted")
		require.Contains(t, ada, "active")
		require.Contains(t, ada, "0.875")
		require.Contains(t, ada, "3 of 3 right (100%)")
		require.Equal(t, poolPath+"/contributors/"+s.spm.ID.String(), attr(find(trs[0], "a", ""), "href"))
		require.Nil(t, find(r.Doc, "p", "contributors-more"))

		// Unit page: the spammer's judgment tainted and excluded, the
		// others agreeing with the result, the audit of the change.
		r = viewer.get(t, "/units/"+s.unit.ID.String())
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		js := rows(find(r.Doc, "table", "judgments"))
		require.Len(t, js, 3)
		verdicts := map[string]string{}
		for _, tr := range js {
			row := text(tr)
			if attr(tr, "data-judgment") == s.spamJudgment.ID.String() {
				require.Equal(t, "tainted", attr(tr, "class"))
				require.Contains(t, row, "tainted — excluded")
				require.NotContains(t, row, "agreed", "a tainted judgment is not compared")
				continue
			}
			require.Empty(t, attr(tr, "class"))
			require.NotContains(t, row, "tainted")
			verdicts[attr(tr, "data-judgment")] = text(find(tr, "span", ""))
		}
		require.Len(t, verdicts, 2)
		for _, v := range verdicts {
			require.Contains(t, v, "agreed")
			require.NotContains(t, v, "disagreed")
		}
		require.Contains(t, text(find(r.Doc, "p", "judgments-clean")), "2 clean judgments count toward the result; 1 tainted")
		audits := rows(find(r.Doc, "table", "audits"))
		require.Len(t, audits, 1)
		a := text(audits[0])
		for _, w := range []string{"recompute", `{"same":"yes"} → {"same":"yes"}`, "0.667 → 1.000", "Spam Bot flagged (trust: accuracy below the minimum 0.600", "result recomputed"} {
			require.Contains(t, a, w)
		}
		require.Equal(t, poolPath+"/contributors/"+s.spm.ID.String(), attr(find(audits[0], "a", ""), "href"))

		// The spammer's page: the flag, trust drawn, the tainted judgment.
		r = viewer.get(t, poolPath+"/contributors/"+s.spm.ID.String())
		require.Equal(t, http.StatusOK, r.Status, r.Body)
		require.Contains(t, text(find(r.Doc, "dd", "standing")), "FLAGGED by the trust check: accuracy below the minimum 0.600")
		require.Equal(t, "0.125", text(find(r.Doc, "dd", "trust")))
		require.Equal(t, "0 of 3 right (0%)", text(find(r.Doc, "dd", "tests")))
		require.Contains(t, text(find(r.Doc, "dd", "too-fast")), "1 judgments", "their first judgment came 1 s after its take")
		require.Nil(t, find(r.Doc, "form", "forgive-form"), "a viewer may not forgive")
		require.NotNil(t, find(r.Doc, "p", "forgive-admin"))
		chart := find(r.Doc, "svg", "trust-chart")
		require.NotNil(t, chart)
		require.Len(t, strings.Fields(attr(find(chart, "polyline", ""), "points")), 3, "one point per change")
		require.Contains(t, text(find(chart, "circle", "")), "0.250 (0 of 1 right (0%))")
		hist := rows(find(r.Doc, "table", "history"))
		require.Len(t, hist, 3)
		require.Contains(t, text(hist[0]), "0.125", "newest first")
		mine := rows(find(r.Doc, "table", "judgments"))
		require.Len(t, mine, 4, "the first unit, three test questions")
		for _, tr := range mine {
			require.Equal(t, "tainted", attr(tr, "class"))
		}
		require.Equal(t, "/units/"+s.unit.ID.String(), attr(find(mine[len(mine)-1], "a", ""), "href"), "the oldest: the first unit")
		require.Equal(t, poolPath, attr(find(r.Doc, "a", "pool-link"), "href"))

		r = viewer.get(t, poolPath+"/contributors/"+s.ada.ID.String())
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, "active", text(find(r.Doc, "dd", "standing")))
		require.NotContains(t, attr(rows(find(r.Doc, "table", "judgments"))[0], "class"), "tainted")

		// A contributor the pool never met: no record, no history.
		stranger, err := b.client.ContributorCreate(t.Context(), docket.ContributorCreateParams{ExternalID: "stranger"})
		require.NoError(t, err)
		r = viewer.get(t, poolPath+"/contributors/"+stranger.ID.String())
		require.Equal(t, http.StatusOK, r.Status)
		require.Contains(t, text(find(r.Doc, "dd", "standing")), "no quality record")
		require.NotNil(t, find(r.Doc, "p", "trust-empty"))
		require.Contains(t, text(find(r.Doc, "table", "judgments")), "No judgments in this pool")
		for _, p := range []string{poolPath + "/contributors/" + uuid.NewString(), poolPath + "/contributors/nope",
			"/pools/" + uuid.NewString() + "/contributors/" + s.ada.ID.String(), "/pools/nope/contributors/" + s.ada.ID.String()} {
			require.Equal(t, http.StatusNotFound, viewer.get(t, p).Status, p)
		}

		// Bounded: 21 more contributors at the prior trust; 20 listed,
		// the flagged one first, Ada's high trust past the cut.
		s.more(t, 21)
		r = viewer.get(t, poolPath)
		trs = rows(find(r.Doc, "table", "contributors"))
		require.Len(t, trs, qualityTop)
		require.Equal(t, s.spm.ID.String(), attr(trs[0], "data-contributor"))
		require.Equal(t, s.bob.ID.String(), attr(trs[1], "data-contributor"), "0.5, the oldest id among the prior trusts")
		for _, tr := range trs {
			require.NotEqual(t, s.ada.ID.String(), attr(tr, "data-contributor"))
		}
		require.Contains(t, text(find(r.Doc, "p", "contributors-more")), "and 4 more contributors")

		// Roles: a contributor opens none of it; no session, sign in.
		contributor := b.signIn(t, RoleContributor)
		anon := b.browser(t)
		for _, p := range []string{poolPath + "/contributors/" + s.spm.ID.String(), "/units/" + s.unit.ID.String(), poolPath} {
			require.Equal(t, http.StatusForbidden, contributor.get(t, p).Status, p)
			require.Equal(t, http.StatusSeeOther, anon.get(t, p).Status, p)
		}
	})
}

// TestDrawTrust: the trust chart's geometry.
func TestDrawTrust(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := drawTrust(nil, 0.6)
	require.True(t, c.Empty)
	require.True(t, c.HasMin)
	require.Equal(t, trustTop+64, c.MinY, "0.6: 0.4 of the height from the top, rounded")
	c = drawTrust([]quality.TrustEntry{{At: at, Value: 1, TestsCorrect: 1, TestsAnswered: 1, Reason: "r"}}, 0)
	require.False(t, c.HasMin)
	require.Len(t, c.Dots, 1)
	require.Equal(t, trustTop, c.Dots[0].Y, "1 at the top")
	require.Equal(t, trustLeft+6+(trustW-trustLeft-12)/2, c.Dots[0].X, "one point: centred")
	c = drawTrust([]quality.TrustEntry{{At: at, Value: 0.75}, {At: at.Add(time.Minute), Value: 0.5}, {At: at.Add(2 * time.Minute), Value: 0, Reason: "wrong"}}, 0.6)
	require.Equal(t, []int{trustTop + trustH/4, trustTop + trustH/2, trustTop + trustH}, []int{c.Dots[0].Y, c.Dots[1].Y, c.Dots[2].Y})
	require.Equal(t, trustLeft+6, c.Dots[0].X, "oldest left")
	require.Equal(t, trustW-6, c.Dots[2].X, "newest right")
	require.Equal(t, []bool{false, true, true}, []bool{c.Dots[0].Low, c.Dots[1].Low, c.Dots[2].Low})
	require.Equal(t, at, c.First)
	require.Equal(t, at.Add(2*time.Minute), c.Last)
	require.Equal(t, "42,48 378,88 714,168", c.Points)
}

// qualityRenderCases render the quality panels with every branch:
// flagged, forgiven, active, low trust and unknown contributors, "n more",
// errors, an empty and a drawn trust history, tainted and test judgments,
// an audit trail.
func qualityRenderCases(t *testing.T, pool *docket.Pool, now time.Time) []renderCase {
	t.Helper()
	viewer := &user{Name: "v", Role: docket.RoleViewer, CSRF: "tok", Operate: true}
	id := uuid.Must(uuid.NewV7())
	panel := &qualityPanel{MinTrust: 0.6, MinTests: 8, Certainty: 0.95, More: "10,000+", Flagged: 1, SettingsError: "minTrust: <bad>", Rows: []qualityRow{
		{ID: id, Name: "Spam <bot>", Known: true, Judgments: "1,000+", Median: "1 s", Trust: quality.Trust{TestsCorrect: 1, TestsAnswered: 4, Value: 0.3},
			Scored: true, Flagged: true, Check: "trust", Reason: "trust <0.3>", FlaggedAt: now, TooFast: 3},
		{ID: id, Known: true, Judgments: "2", Median: "—", Trust: quality.Trust{TestsCorrect: 1, TestsAnswered: 9, Value: 0.15}, Scored: true, Low: true},
		{ID: id, Name: "Bob", Known: true, Judgments: "5", Median: "2 s", Trust: quality.Trust{Value: 0.5}, ForgivenAt: now},
		{ID: id, Name: "Ada", Judgments: "3", Sampled: true, Median: "4 s", Trust: quality.NewTrust()},
	}}
	trust := 0.75
	j := &docket.Judgment{ID: id, UnitID: id, PoolID: pool.ID, ContributorID: id, Data: json.RawMessage(`{"same":"<no>"}`), Trust: &trust, Tainted: true, Golden: true, StartedAt: now, SubmittedAt: now.Add(time.Second)}
	history := []quality.TrustEntry{{At: now, Value: 0.75, TestsCorrect: 1, TestsAnswered: 1, Reason: "test <1>: right"}, {At: now.Add(time.Minute), Value: 0.25, TestsCorrect: 1, TestsAnswered: 3, Reason: "wrong"}}
	st := &docket.ContributorQuality{PoolID: pool.ID, ContributorID: id, Trust: quality.Trust{TestsCorrect: 1, TestsAnswered: 3, Value: 0.25},
		Counts: quality.Counts{Taken: 7, TestsTaken: 3}, UpdatedAt: now}
	flagged := qualityRow{ID: id, Name: "Spam", Known: true, Trust: st.Trust, Scored: true, Low: true, Flagged: true, Check: "too_fast", Reason: "5 <fast>", FlaggedAt: now, ForgivenAt: now.Add(-time.Hour), TooFast: 5}
	contributor := &contributorData{Pool: pool, Contributor: &docket.Contributor{ID: id, Name: "Spam", ExternalID: "s"}, State: st, Known: true, Row: flagged,
		MinTrust: 0.6, MinTests: 8, Certainty: 0.95, Chart: drawTrust(history, 0.6), History: []quality.TrustEntry{history[1], history[0]}, HistoryAll: 2,
		Judgments: []contributorJudgment{{Judgment: j, Seconds: "1 s"}}, More: true, Tainted: 1}
	admin := &user{Name: "root", Role: docket.RoleAdmin, CSRF: "tok<1>", Operate: true, Admin: true}
	forgivable := *contributor
	forgivable.CanForgive, forgivable.Errors = true, []string{"confirm: type forgive <now>"}
	forgiven := *contributor
	forgiven.Row.Flagged, forgiven.Message = false, "Forgiven: Spam's flag <lifted>"
	stranger := &contributorData{Pool: pool, Contributor: &docket.Contributor{ID: id, ExternalID: "ext-<1>"}, State: &docket.ContributorQuality{Trust: quality.NewTrust()},
		Row: qualityRow{ID: id, Trust: quality.NewTrust()}, Chart: drawTrust(nil, 0)}
	conf := 0.5
	unit := &unitData{Unit: &docket.Unit{ID: id, PoolID: pool.ID, State: docket.UnitFinalized, Result: json.RawMessage(`{"same":"yes"}`), Confidence: &conf, FinalizedAt: now},
		Pool: pool, Clean: 1, Tainted: 1, AuditsError: "the audit trail could not be read: <timeout>",
		Judgments: []unitJudgment{{Judgment: j, Name: "Spam", Seconds: "1 s"}, {Judgment: &docket.Judgment{ID: id, PoolID: pool.ID, ContributorID: id, Data: json.RawMessage(`{"same":"yes"}`)}, Agreed: "agreed", Agrees: []string{"same"}},
			{Judgment: &docket.Judgment{ID: id, PoolID: pool.ID, ContributorID: id, Data: json.RawMessage(`{"same":"no"}`)}, Agreed: "disagreed", Disagree: []string{"same"}}},
		Audits: []unitAudit{
			{UnitAudit: &docket.UnitAudit{ID: id, UnitID: id, PoolID: pool.ID, At: now, Audit: quality.Audit{Old: quality.Result{Value: json.RawMessage(`{"same": "no"}`), Confidence: &conf},
				New: quality.Result{}, Action: quality.RepairReopen, Cause: quality.Cause{ContributorID: id, Check: quality.CheckTrust, Reason: "low <trust>"}, Why: "reopened for 1 more"}}, CauseName: "Spam"},
			{UnitAudit: &docket.UnitAudit{ID: id, UnitID: id, PoolID: pool.ID, At: now, Audit: quality.Audit{Old: quality.Result{}, New: quality.Result{Value: json.RawMessage(`{"same":"yes"}`)},
				Action: quality.RepairRecompute, Cause: quality.Cause{ContributorID: id, Check: quality.CheckForgiven, Untaint: true, Reason: "admin"}, Why: "recomputed"}}},
		}}
	return []renderCase{
		{"pool", "layout", &view{Title: "Pool", User: viewer, Data: &poolData{Pool: poolRowOf(pool), Quality: panel}},
			[]string{`class="flagged" data-contributor="` + id.String(), "Spam &lt;bot&gt;", "FLAGGED", "trust &lt;0.3&gt;", "1,000&#43;", "1 of 4 right (25%)",
				`class="low"`, "0.150", "forgiven", "no quality record yet", "0.500 (no test yet)", "(sampled)", `id="contributors-more">and 10,000&#43; more`,
				"(1 listed)", "under 0.60 with probability 0.95 or more, after 8 test questions", "minTrust: &lt;bad&gt;", "/pools/" + pool.ID.String() + "/contributors/" + id.String()}},
		{"pool", "layout", &view{Title: "Pool", User: viewer, Data: &poolData{Pool: poolRowOf(pool), QualityError: "list the contributors: <timeout>"}},
			[]string{"The contributors could not be read: list the contributors: &lt;timeout&gt;"}},
		{"pool", "layout", &view{Title: "Pool", User: viewer, Data: &poolData{Pool: poolRowOf(pool), Quality: &qualityPanel{}}},
			[]string{"No contributors yet", "Flagged contributors first, then the lowest trust"}},
		{"contributor", "layout", &view{Title: "Contributor", User: viewer, Data: contributor},
			[]string{"FLAGGED", "too_fast", "5 &lt;fast&gt;", "Forgiven before", `id="trust" class="low">0.250`, "1 of 3 right (33%)", "5 judgments under",
				"7 assignments", "3 of them test questions", "below 0.60 with probability 0.95 or more, after at least 8 of them", `id="trust-chart"`, `class="min"`, "minimum 0.60", `<polyline class="trust-line" points="42,48 714,128">`,
				"test &lt;1&gt;: right", `class="low"`, "the table lists the newest 2", `class="tainted"`, "test question", "&#34;&lt;no&gt;&#34;", "0.75",
				"older ones not listed", "1 tainted", `id="pool-link"`, `id="forgive-admin"`}},
		{"contributor", "layout", &view{Title: "Contributor", User: admin, Data: &forgivable},
			[]string{`<form method="post" action="/pools/` + pool.ID.String() + `/contributors/` + id.String() + `/forgive" id="forgive-form"`,
				`name="csrf" value="tok&lt;1&gt;"`, `id="confirm" name="confirm"`, `id="forgive"`, `id="errors"`, "confirm: type forgive &lt;now&gt;"}},
		{"contributor", "layout", &view{Title: "Contributor", User: admin, Data: &forgiven},
			[]string{`id="message">Forgiven: Spam&#39;s flag &lt;lifted&gt;`, `class="state forgiven"`}},
		{"contributor", "layout", &view{Title: "Contributor", User: viewer, Data: stranger},
			[]string{"ext-&lt;1&gt;", "no quality record of them yet", `id="trust-empty"`, "No judgments in this pool", "flags nobody on trust"}},
		{"unit", "layout", &view{Title: "Unit", User: viewer, Data: unit},
			[]string{`class="tainted"`, "tainted — excluded", `class="agree verdict">agreed`, `class="disagree verdict">disagreed`, "1 clean judgments count toward the result; 1 tainted",
				`id="audits"`, "reopen", `{&#34;same&#34;:&#34;no&#34;}</code> → <code>none`, "0.500 → —", "Spam</a> flagged", "low &lt;trust&gt;",
				"un-flagged", "forgiven", "none</code> → <code>{&#34;same&#34;:&#34;yes&#34;}", "&lt;timeout&gt;", "unit.result_changed"}},
	}
}
