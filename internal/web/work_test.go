package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/task"
	"github.com/docket-run/docket/internal/testdb"
)

// workTask has a field of every kind and a display block of every kind;
// one judgment finalizes a unit.
const workTask = `{"title": "Label the photo", "instructions": "Look at the photo, then answer.",
 "display": [{"kind": "text", "from": "unit.caption", "label": "Caption"},
             {"kind": "image", "from": "unit.photo"},
             {"kind": "link", "from": "unit.source", "label": "Source"}],
 "fields": [{"name": "same", "kind": "choice", "required": true, "label": "Same product?",
             "options": [{"value": "yes", "label": "Same"}, {"value": "no", "label": "Different"}]},
            {"name": "tags", "kind": "multi_choice", "options": [{"value": "blurry", "key": "b"}, {"value": "dark", "key": "d"}]},
            {"name": "note", "kind": "text", "maxLength": 200},
            {"name": "count", "kind": "number", "integer": true, "min": 0, "max": 10},
            {"name": "stars", "kind": "rating", "scale": 5},
            {"name": "boxes", "kind": "bbox", "image": "unit.photo", "labels": ["logo", "face"], "max": 5}],
 "judgmentsPerUnit": {"min": 1}, "assignmentSeconds": 60}`

// makeWorkPool makes a pool of workTask with n units; each unit's caption is
// "unit <i>" and its photo photo.
func makeWorkPool(t *testing.T, c *docket.Client, n int, photo string) (*docket.Pool, []*docket.Unit) {
	t.Helper()
	return makeWorkPoolOf(t, c, workTask, n, photo)
}

// makeWorkPoolOf is makeWorkPool with the task template src.
func makeWorkPoolOf(t *testing.T, c *docket.Client, src string, n int, photo string) (*docket.Pool, []*docket.Unit) {
	t.Helper()
	ctx := context.Background()
	tmpl, err := docket.ParseTask([]byte(src))
	require.NoError(t, err)
	_, _, err = c.TaskPut(ctx, "photo", tmpl)
	require.NoError(t, err)
	putWorkflow(t, c, `{"name": "catalog", "steps": [{"name": "label", "human": {"task": "photo"}}]}`)
	pool, _, err := c.PoolEnsure(ctx, "catalog", 1, "label", "photo")
	require.NoError(t, err)
	var inputs []json.RawMessage
	for i := range n {
		in, err := json.Marshal(map[string]any{"caption": fmt.Sprintf("unit %d <b>", i), "photo": photo, "source": "https://example.com/p/" + fmt.Sprint(i)})
		require.NoError(t, err)
		inputs = append(inputs, in)
	}
	units, err := c.UnitsAdd(ctx, pool.ID, inputs)
	require.NoError(t, err)
	return pool, units
}

// assignmentOf is the assignment id a work page's redirect names.
func assignmentOf(t *testing.T, location string) uuid.UUID {
	t.Helper()
	rest, ok := strings.CutPrefix(location, "/work/a/")
	require.True(t, ok, "not a work page: %q", location)
	rest, _, _ = strings.Cut(rest, "?")
	id, err := uuid.Parse(rest)
	require.NoError(t, err)
	return id
}

// fieldErrors are the inline errors of each fieldset of a work page.
func fieldErrors(doc *html.Node) map[string]string {
	out := map[string]string{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "fieldset" {
			var errs []string
			var inner func(n *html.Node)
			inner = func(n *html.Node) {
				if n.Type == html.ElementNode && n.Data == "p" && attr(n, "class") == "field-error" {
					errs = append(errs, text(n))
				}
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					inner(c)
				}
			}
			inner(n)
			if len(errs) > 0 {
				out[attr(n, "data-field")] = strings.Join(errs, "; ")
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return out
}

// inputs lists the attributes of every input, textarea of a form by name.
func inputs(n *html.Node, name string) []*html.Node {
	var out []*html.Node
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && (n.Data == "input" || n.Data == "textarea") && attr(n, "name") == name {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func TestWorkPages(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		pool, units := makeWorkPool(t, b.client, 3, "/static/favicon.svg")
		ada := b.signIn(t, RoleContributor)

		// The pools: this one, with its 3 units.
		r := ada.get(t, "/work")
		require.Equal(t, http.StatusOK, r.Status)
		row := text(find(find(r.Doc, "table", "work-pools"), "tbody", ""))
		require.Contains(t, row, "Label the photo")
		require.Contains(t, row, "catalog / label")
		require.Contains(t, row, "3")

		// Start working: a unit, drawn from the task.
		r = ada.post(t, "/work/pools/"+pool.ID.String()+"/take", nil)
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		first := assignmentOf(t, r.Header.Get("Location"))
		r = ada.get(t, "/work/a/"+first.String())
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, WorkContentSecurityPolicy, r.Header.Get("Content-Security-Policy"))
		a1, err := b.client.AssignmentGet(ctx, first)
		require.NoError(t, err)
		require.Contains(t, r.Body, "&lt;b&gt;", "the caption is shown, escaped")
		require.Contains(t, r.Body, `src="/static/favicon.svg"`)
		require.Contains(t, r.Body, `href="https://example.com/p/`)
		require.NotNil(t, find(r.Doc, "strong", "countdown"))
		same := inputs(r.Doc, "f.same")
		require.Len(t, same, 2)
		require.Equal(t, "radio", attr(same[0], "type"))
		require.Equal(t, "1", attr(same[0], "data-key"), "digits pick the first choice field's options")
		require.Equal(t, "2", attr(same[1], "data-key"))
		tags := inputs(r.Doc, "f.tags")
		require.Len(t, tags, 2)
		require.Equal(t, "checkbox", attr(tags[0], "type"))
		require.Equal(t, "b", attr(tags[0], "data-key"), "a template's own keys are kept")
		require.Equal(t, "textarea", inputs(r.Doc, "f.note")[0].Data)
		count := inputs(r.Doc, "f.count")[0]
		require.Equal(t, "number", attr(count, "type"))
		require.Equal(t, "1", attr(count, "step"))
		require.Equal(t, "10", attr(count, "max"))
		require.Len(t, inputs(r.Doc, "f.stars"), 5)
		require.Empty(t, attr(inputs(r.Doc, "f.stars")[0], "data-key"), "the digits are taken")
		require.Equal(t, "[]", attr(inputs(r.Doc, "f.boxes")[0], "value"))
		require.Contains(t, r.Body, `<script src="/static/work.js" defer></script>`)

		// An empty form: 422, the required field named at its place.
		r = ada.post(t, "/work/a/"+first.String()+"/submit", url.Values{})
		require.Equal(t, http.StatusUnprocessableEntity, r.Status)
		errs := fieldErrors(r.Doc)
		require.Contains(t, errs, "same")
		require.Len(t, errs, 1, "%v", errs)
		require.Contains(t, text(find(r.Doc, "div", "problems")), "same")

		// Every bad field at once, the ones the form cannot read and the
		// ones the task refuses; what was entered is kept.
		bad := url.Values{"f.same": {"maybe"}, "f.count": {"many"}, "f.stars": {"9"}, "f.note": {"kept"},
			"f.boxes": {`[{"label":"logo","x":0.8,"y":0.1,"w":0.5,"h":0.2}]`}, "f.tags": {"dark"}}
		r = ada.post(t, "/work/a/"+first.String()+"/submit", bad)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status)
		errs = fieldErrors(r.Doc)
		for _, f := range []string{"same", "count", "stars", "boxes"} {
			require.Contains(t, errs, f, "%v", errs)
		}
		require.NotContains(t, errs, "note")
		require.NotContains(t, errs, "tags")
		require.Contains(t, errs["count"], "must be a number")
		require.Contains(t, errs["boxes"], "right edge")
		require.Equal(t, "kept", text(inputs(r.Doc, "f.note")[0]))
		require.Equal(t, "checked", checkedValue(inputs(r.Doc, "f.tags"), "dark"))
		a, err := b.client.AssignmentGet(ctx, first)
		require.NoError(t, err)
		require.Equal(t, docket.AssignmentActive, a.State, "a refused judgment leaves the assignment active")

		// A form without the session's CSRF token is refused.
		forged := url.Values{"csrf": {"forged"}, "f.same": {"yes"}}
		require.Equal(t, http.StatusForbidden, ada.do(t, "POST", "/work/a/"+first.String()+"/submit", forged).Status)
		require.Equal(t, http.StatusForbidden, ada.do(t, "POST", "/work/a/"+first.String()+"/skip", forged).Status)

		// Heartbeat: the lease, as JSON; refused without the CSRF token.
		res := ada.do(t, "POST", "/work/a/"+first.String()+"/heartbeat", url.Values{"csrf": {"nope"}})
		require.Equal(t, http.StatusForbidden, res.Status)
		res = ada.post(t, "/work/a/"+first.String()+"/heartbeat", nil)
		require.Equal(t, http.StatusOK, res.Status, res.Body)
		var hb heartbeatView
		require.NoError(t, json.Unmarshal([]byte(res.Body), &hb))
		require.Equal(t, "ACTIVE", hb.State)
		require.True(t, hb.ExpiresAt.Equal(a1.ExpiresAt.UTC()), "%v %v", hb.ExpiresAt, a1.ExpiresAt)
		a, err = b.client.AssignmentGet(ctx, first)
		require.NoError(t, err)
		require.True(t, a.HeartbeatAt.After(a1.HeartbeatAt), "the heartbeat was recorded")

		// Another contributor reaches none of it.
		bob, err := b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "bob", Name: "Bob"})
		require.NoError(t, err)
		bobKey, _, err := b.client.CreateContributorKey(ctx, bob.ID, "bob")
		require.NoError(t, err)
		b.keys["bob"] = bobKey
		other := b.signIn(t, "bob")
		require.Equal(t, http.StatusNotFound, other.get(t, "/work/a/"+first.String()).Status, "another's assignment looks unknown")
		for _, verb := range []string{"submit", "skip", "heartbeat"} {
			r = other.post(t, "/work/a/"+first.String()+"/"+verb, url.Values{"f.same": {"no"}})
			require.Equal(t, http.StatusNotFound, r.Status, verb)
		}
		a, err = b.client.AssignmentGet(ctx, first)
		require.NoError(t, err)
		require.Equal(t, docket.AssignmentActive, a.State)
		require.Equal(t, http.StatusNotFound, other.get(t, "/work/a/"+uuid.NewString()).Status)
		require.Equal(t, http.StatusNotFound, other.get(t, "/work/a/nope").Status)

		// A good answer is stored as the API would store it, the unit is
		// final, and the next unit opens at once.
		good := url.Values{"f.same": {"yes"}, "f.tags": {"blurry", "dark"}, "f.note": {"line one\r\nline two"}, "f.count": {"4"},
			"f.stars": {"5"}, "f.boxes": {`[{"label":"face","x":0.25,"y":0.2,"w":0.5,"h":0.4}]`}, "f.unknown": {"ignored"}}
		r = ada.post(t, "/work/a/"+first.String()+"/submit", good)
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		require.Contains(t, r.Header.Get("Location"), "?m=saved")
		second := assignmentOf(t, r.Header.Get("Location"))
		require.NotEqual(t, first, second)
		a, err = b.client.AssignmentGet(ctx, first)
		require.NoError(t, err)
		require.Equal(t, docket.AssignmentSubmitted, a.State)
		js, err := b.client.JudgmentList(ctx, a.UnitID)
		require.NoError(t, err)
		require.Len(t, js, 1)
		require.JSONEq(t, `{"same":"yes","tags":["blurry","dark"],"note":"line one\nline two","count":4,"stars":5,
			"boxes":[{"label":"face","x":0.25,"y":0.2,"w":0.5,"h":0.4}]}`, string(js[0].Data))
		u, err := b.client.UnitGet(ctx, a.UnitID)
		require.NoError(t, err)
		require.Equal(t, docket.UnitFinalized, u.State)
		r = ada.get(t, r.Header.Get("Location"))
		require.Contains(t, text(find(r.Doc, "p", "work-message")), "Saved")

		// The submitted one shows as over, with a way on.
		r = ada.get(t, "/work/a/"+first.String())
		require.Equal(t, http.StatusOK, r.Status)
		require.Contains(t, text(find(r.Doc, "span", "lease-over")), "SUBMITTED")
		require.Nil(t, find(r.Doc, "form", "work-form"))
		require.NotNil(t, find(r.Doc, "button", "next"))
		res = ada.post(t, "/work/a/"+first.String()+"/heartbeat", nil)
		require.Equal(t, http.StatusConflict, res.Status)
		r = ada.post(t, "/work/a/"+first.String()+"/submit", url.Values{"f.same": {"no"}})
		require.Equal(t, http.StatusConflict, r.Status)
		require.Contains(t, r.Body, "Not saved")

		// Skip gives the unit back and opens another.
		r = ada.post(t, "/work/a/"+second.String()+"/skip", nil)
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		third := assignmentOf(t, r.Header.Get("Location"))
		a, err = b.client.AssignmentGet(ctx, second)
		require.NoError(t, err)
		require.Equal(t, docket.AssignmentReleased, a.State)

		// The last unit: saved, and back to the pools, which have nothing
		// left for ada (the skipped unit is never handed to her again).
		r = ada.post(t, "/work/a/"+third.String()+"/submit", url.Values{"f.same": {"no"}})
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		require.Equal(t, "/work?m=saved", r.Header.Get("Location"))
		r = ada.get(t, "/work?m=saved")
		require.Contains(t, text(find(r.Doc, "p", "work-message")), "no unit left")
		require.NotNil(t, find(r.Doc, "td", "no-work"))
		r = ada.post(t, "/work/pools/"+pool.ID.String()+"/take", nil)
		require.Equal(t, "/work?m=none", r.Header.Get("Location"))
		got, err := b.client.PoolGet(ctx, pool.ID)
		require.NoError(t, err)
		require.Equal(t, 2, got.Counts.Finalized)
		require.Len(t, units, 3)

		// An admin's key is no contributor's: the page says so, and it
		// takes nothing.
		admin := b.signIn(t, docket.RoleAdmin)
		r = admin.get(t, "/work")
		require.NotNil(t, find(r.Doc, "p", "no-contributor"))
		require.Equal(t, http.StatusForbidden, admin.post(t, "/work/pools/"+pool.ID.String()+"/take", nil).Status)
		require.Equal(t, http.StatusForbidden, admin.get(t, "/work/a/"+third.String()).Status)
		// A paused pool hands out nothing; an unknown pool is 404.
		_, err = b.client.PoolPause(ctx, pool.ID)
		require.NoError(t, err)
		require.Equal(t, "/work?m=closed", ada.post(t, "/work/pools/"+pool.ID.String()+"/take", nil).Header.Get("Location"))
		require.Equal(t, http.StatusNotFound, ada.post(t, "/work/pools/"+uuid.NewString()+"/take", nil).Status)
		require.Equal(t, http.StatusNotFound, ada.post(t, "/work/pools/nope/take", nil).Status)
	})
}

// checkedValue is "checked" when the input of value is checked.
func checkedValue(ns []*html.Node, value string) string {
	for _, n := range ns {
		if attr(n, "value") == value {
			for _, a := range n.Attr {
				if a.Key == "checked" {
					return "checked"
				}
			}
		}
	}
	return ""
}

// TestJudgmentFromForm: how the form's values become a judgment.
func TestJudgmentFromForm(t *testing.T) {
	t.Parallel()
	tmpl, err := docket.ParseTask([]byte(workTask))
	require.NoError(t, err)
	ct, err := task.Compile(tmpl)
	require.NoError(t, err)
	for _, tc := range []struct {
		form     string
		want     string
		problems []string
	}{
		{"", `{}`, nil},
		{"f.same=&f.tags=&f.note=&f.count=&f.stars=&f.boxes=%5B%5D", `{}`, nil},
		{"f.same=yes&f.tags=dark&f.tags=blurry&f.note=a%0D%0Ab&f.count=+2.5+&f.stars=3&csrf=x&f.other=1",
			`{"same":"yes","tags":["dark","blurry"],"note":"a\nb","count":2.5,"stars":3}`, nil},
		{`f.boxes=[{"label":"logo","x":0,"y":0,"w":1,"h":1}]`, `{"boxes":[{"label":"logo","x":0,"y":0,"w":1,"h":1}]}`, nil},
		{"f.same=yes&f.same=no&f.count=1e400&f.stars=x&f.boxes=%7B%7D&f.note=n", `{"note":"n"}`, []string{"same", "count", "stars", "boxes"}},
		{"f.count=NaN&f.boxes=%5B&f.note=1&f.note=2", `{}`, []string{"count", "boxes", "note"}},
	} {
		form, err := url.ParseQuery(tc.form)
		require.NoError(t, err)
		data, problems := judgmentFromForm(ct.Fields, form)
		require.JSONEq(t, tc.want, string(data), tc.form)
		var names []string
		for name := range problems {
			names = append(names, name)
		}
		require.ElementsMatch(t, tc.problems, names, tc.form)
	}
	// A required multi_choice or bbox with nothing is [], which its
	// minimum then judges.
	tmpl, err = docket.ParseTask([]byte(`{"title": "t", "fields": [{"name": "tags", "kind": "multi_choice", "required": true, "min": 1, "options": [{"value": "a"}]},
		{"name": "boxes", "kind": "bbox", "required": true, "image": "unit.p", "labels": ["x"]}]}`))
	require.NoError(t, err)
	ct, err = task.Compile(tmpl)
	require.NoError(t, err)
	data, problems := judgmentFromForm(ct.Fields, url.Values{})
	require.Empty(t, problems)
	require.JSONEq(t, `{"tags":[],"boxes":[]}`, string(data))
	err = ct.ValidateJudgment(data)
	var ve *docket.TaskValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "tags", ve.Errors[0].Field)
}

// TestWorkSubmitLongAnswer: a judgment the API takes is taken from the
// work page's form too. A text field may hold TextMaxLengthDefault
// characters; form-encoded, 10,000 characters outside ASCII are some
// 90 kB, more than the 64 kB other forms may post. A form too large for
// any page is refused as too large (413), not as a bad CSRF token.
func TestWorkSubmitLongAnswer(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		tmpl, err := docket.ParseTask([]byte(`{"title": "Translate", "fields": [{"name": "text", "kind": "text", "required": true}],
		  "judgmentsPerUnit": {"min": 1}}`))
		require.NoError(t, err)
		_, _, err = b.client.TaskPut(ctx, "translate", tmpl)
		require.NoError(t, err)
		putWorkflow(t, b.client, `{"name": "tr", "steps": [{"name": "do", "human": {"task": "translate"}}]}`)
		pool, _, err := b.client.PoolEnsure(ctx, "tr", 1, "do", "translate")
		require.NoError(t, err)
		_, err = b.client.UnitsAdd(ctx, pool.ID, []json.RawMessage{json.RawMessage(`{}`)})
		require.NoError(t, err)
		ada := b.signIn(t, RoleContributor)
		r := ada.post(t, "/work/pools/"+pool.ID.String()+"/take", nil)
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		id := assignmentOf(t, r.Header.Get("Location"))

		long := strings.Repeat("日", task.TextMaxLengthDefault)
		r = ada.post(t, "/work/a/"+id.String()+"/submit", url.Values{"f.text": {long}})
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		a, err := b.client.AssignmentGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, docket.AssignmentSubmitted, a.State)
		js, err := b.client.JudgmentList(ctx, a.UnitID)
		require.NoError(t, err)
		require.Len(t, js, 1)
		require.JSONEq(t, `{"text":"`+long+`"}`, string(js[0].Data))

		// Too large for any form: said so.
		r = ada.post(t, "/work/a/"+id.String()+"/submit", url.Values{"f.text": {strings.Repeat("x", 2<<20)}})
		require.Equal(t, http.StatusRequestEntityTooLarge, r.Status)
		require.Contains(t, r.Body, "too large")
		admin := b.signIn(t, docket.RoleAdmin)
		r = admin.post(t, "/queues/pause", url.Values{"queue": {strings.Repeat("x", 100<<10)}})
		require.Equal(t, http.StatusRequestEntityTooLarge, r.Status)
		require.Contains(t, r.Body, "too large")
	})
}

// TestWorkTakeOnce: "Start working" sent several times at once (a double
// click, a form posted twice) takes one unit: every answer opens the same
// assignment and the pool has one active assignment; the same holds for a
// judgment form sent twice (both open the same next unit). Once the unit
// is done, Start takes a new one.
func TestWorkTakeOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend)
		pool, _ := makeWorkPool(t, b.client, 3, "/static/favicon.svg")
		ada := b.signIn(t, RoleContributor)
		active := func() int {
			t.Helper()
			p, err := b.client.PoolGet(ctx, pool.ID)
			require.NoError(t, err)
			return p.Counts.ActiveAssignments
		}

		const clicks = 5
		form := url.Values{"csrf": {ada.csrf}}.Encode()
		statuses, locations, errs := make([]int, clicks), make([]string, clicks), make([]error, clicks)
		var wg sync.WaitGroup
		for i := range clicks {
			wg.Go(func() {
				req, err := http.NewRequest("POST", b.server.URL+"/work/pools/"+pool.ID.String()+"/take", strings.NewReader(form))
				if err != nil {
					errs[i] = err
					return
				}
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				res, err := ada.http.Do(req)
				if err != nil {
					errs[i] = err
					return
				}
				_ = res.Body.Close()
				statuses[i], locations[i] = res.StatusCode, res.Header.Get("Location")
			})
		}
		wg.Wait()
		first := assignmentOf(t, locations[0])
		for i := range clicks {
			require.NoError(t, errs[i])
			require.Equal(t, http.StatusSeeOther, statuses[i])
			require.Equal(t, first, assignmentOf(t, locations[i]), "every click opens the first take's assignment")
		}
		require.Equal(t, 1, active())
		require.Equal(t, first, assignmentOf(t, ada.post(t, "/work/pools/"+pool.ID.String()+"/take", nil).Header.Get("Location")),
			"Start again while the unit is open: the same unit")

		// The judgment sent twice: saved once, one next unit.
		answer := url.Values{"f.same": {"yes"}}
		r1 := ada.post(t, "/work/a/"+first.String()+"/submit", answer)
		require.Equal(t, http.StatusSeeOther, r1.Status, r1.Body)
		r2 := ada.post(t, "/work/a/"+first.String()+"/submit", answer)
		require.Equal(t, http.StatusSeeOther, r2.Status, r2.Body)
		second := assignmentOf(t, r1.Header.Get("Location"))
		require.NotEqual(t, first, second)
		require.Equal(t, second, assignmentOf(t, r2.Header.Get("Location")))
		require.Equal(t, 1, active())

		// Skipped: the next Start takes another unit.
		r := ada.post(t, "/work/a/"+second.String()+"/skip", nil)
		require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
		third := assignmentOf(t, r.Header.Get("Location"))
		require.NotEqual(t, second, third)
		require.Equal(t, third, assignmentOf(t, ada.post(t, "/work/pools/"+pool.ID.String()+"/take", nil).Header.Get("Location")))
		require.Equal(t, 1, active())
	})
}
