package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// testPhoto is the image the browser test's units show and box: 800×500.
const testPhoto = `<svg xmlns="http://www.w3.org/2000/svg" width="800" height="500" viewBox="0 0 800 500">
<rect width="800" height="500" fill="#dfe7f3"/><rect x="200" y="100" width="400" height="200" fill="#f6c983" stroke="#b86e00" stroke-width="4"/>
<text x="400" y="215" font-family="sans-serif" font-size="48" text-anchor="middle" fill="#1d2330">LOGO</text>
<circle cx="650" cy="400" r="60" fill="#9fd5b2"/></svg>`

// TestBrowserWork: a contributor labels three units in a real chromium
// with the keyboard — one refused first (the required field left empty,
// the problem shown at the field) then fixed — and draws a box with the
// mouse, which arrives as fractions of the image; the page beats while
// open; every unit finalizes and the operator's pool page shows them.
func TestBrowserWork(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx, messages := headless(t)
	shots := screenshotDir(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /test/photo.svg", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "image/svg+xml")
		_, _ = w.Write([]byte(testPhoto))
	})
	mux.Handle("/", b.handler)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	pool, _ := makeWorkPool(t, b.client, 3, "/test/photo.svg")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/work"),
		signIn(b.keys[RoleContributor]),
		chromedp.WaitVisible(chromedp.CSS("button.start")),
		screenshot(shots, "work-pools"),
		chromedp.Click(chromedp.CSS("button.start")),
		chromedp.WaitVisible(chromedp.ID("work-form")),
	))
	current := func() uuid.UUID {
		action, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("work-form").getAttribute("action")`))
		require.NoError(t, err)
		id, err := uuid.Parse(strings.TrimSuffix(strings.TrimPrefix(action, "/work/a/"), "/submit"))
		require.NoError(t, err, action)
		return id
	}
	// next waits for the page after a submission of prev.
	// The page navigates under the poll: a poll the navigation ends is
	// polled again on the new page.
	next := func(prev uuid.UUID) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.readyState === "complete" && (location.pathname === "/work" ||
				(document.getElementById("work-form") !== null && document.getElementById("work-form").getAttribute("action").indexOf("`+prev.String()+`") < 0))`,
				chromedp.WithPollingTimeout(time.Until(deadline))))
			if err == nil {
				return
			}
			// "Inspected target navigated", "Cannot find context".
			require.Contains(t, err.Error(), "(-32000)", "no next page after %s", prev)
			require.True(t, time.Now().Before(deadline), "no next page after %s", prev)
		}
	}
	ctrlEnter := chromedp.KeyEvent("\r", chromedp.KeyModifiers(chromedp.ModifierCtrl))
	checked := func(id string) bool {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("`+id+`").checked`))
		require.NoError(t, err)
		return v
	}

	// Unit 1: the countdown runs, the page beats; 1 and b pick, Ctrl+Enter
	// submits.
	first := current()
	countdown, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("countdown")))
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^[01]:\d\d$`), countdown)
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("lease-status").dataset.beats >= "1"`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err, "the page sent no heartbeat")
	a, err := b.client.AssignmentGet(context.Background(), first)
	require.NoError(t, err)
	require.True(t, a.HeartbeatAt.After(a.StartedAt), "the heartbeat reached the store")
	require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent("1"), chromedp.KeyEvent("b")))
	require.True(t, checked("f-same-0"), "1 picks the first option")
	require.True(t, checked("f-tags-0"), "b ticks blurry")
	require.NoError(t, chromedp.Do(ctx, ctrlEnter))
	next(first)

	// Unit 2: Ctrl+Enter with nothing picked: refused, the problem at the
	// field; 2 then Ctrl+Enter saves it.
	second := current()
	require.NotEqual(t, first, second)
	saved, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("work-message")))
	require.NoError(t, err)
	require.Contains(t, saved, "Saved")
	require.NoError(t, chromedp.Do(ctx, ctrlEnter, chromedp.WaitVisible(chromedp.ID("problems"))))
	fieldError, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#f-same-field .field-error")))
	require.NoError(t, err)
	require.NotEmpty(t, fieldError)
	require.NoError(t, chromedp.Do(ctx, screenshot(shots, "work-error")))
	require.Equal(t, second, current(), "the same unit, to fix")
	require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent("2")))
	require.True(t, checked("f-same-1"))
	require.NoError(t, chromedp.Do(ctx, ctrlEnter))
	next(second)

	// Unit 3: a box drawn with the mouse from (25%, 20%) to (75%, 60%).
	third := current()
	rect, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => {
		const svg = document.getElementById("f-boxes-overlay");
		svg.scrollIntoView({block: "center"});
		const r = svg.getBoundingClientRect();
		return [r.left, r.top, r.width, r.height];
	})()`))
	require.NoError(t, err)
	require.Len(t, rect, 4)
	require.Greater(t, rect[2], 100.0, "the image is drawn: %v", rect)
	x0, y0 := rect[0]+0.25*rect[2], rect[1]+0.2*rect[3]
	x1, y1 := rect[0]+0.75*rect[2], rect[1]+0.6*rect[3]
	require.NoError(t, chromedp.Do(ctx,
		chromedp.MouseEvent(chromedp.MouseMoved, x0, y0),
		chromedp.MouseEvent(chromedp.MousePressed, x0, y0, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		chromedp.MouseEvent(chromedp.MouseMoved, (x0+x1)/2, (y0+y1)/2, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, x1, y1, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseReleased, x1, y1, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		chromedp.KeyEvent("1"),
	))
	boxesJSON, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("f-boxes").value`))
	require.NoError(t, err)
	var drawn []map[string]any
	require.NoError(t, json.Unmarshal([]byte(boxesJSON), &drawn), boxesJSON)
	require.Len(t, drawn, 1, boxesJSON)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`),
		screenshot(shots, "web-work"),
		ctrlEnter,
	))
	next(third)
	location, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, srv.URL+"/work?m=saved", location, "no unit left: back to the pools")

	// What arrived: the keyboard's answers, the refused post stored
	// nothing, the box as fractions of the image.
	judgment := func(assignment uuid.UUID) map[string]any {
		a, err := b.client.AssignmentGet(context.Background(), assignment)
		require.NoError(t, err)
		require.Equal(t, docket.AssignmentSubmitted, a.State)
		js, err := b.client.JudgmentList(context.Background(), a.UnitID)
		require.NoError(t, err)
		require.Len(t, js, 1)
		var m map[string]any
		require.NoError(t, json.Unmarshal(js[0].Data, &m))
		return m
	}
	j := judgment(first)
	require.Equal(t, "yes", j["same"])
	require.Equal(t, []any{"blurry"}, j["tags"])
	require.Equal(t, "no", judgment(second)["same"])
	j = judgment(third)
	require.Equal(t, "yes", j["same"])
	boxes, ok := j["boxes"].([]any)
	require.True(t, ok, "%v", j)
	require.Len(t, boxes, 1)
	box := boxes[0].(map[string]any)
	require.Equal(t, "logo", box["label"])
	for k, want := range map[string]float64{"x": 0.25, "y": 0.2, "w": 0.5, "h": 0.4} {
		require.InDelta(t, want, box[k], 0.01, "%s of %v", k, box)
	}

	// The operator sees the pool's units final.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("form.signout button")),
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.Navigate(srv.URL+"/pools/"+pool.ID.String()),
		signIn(b.keys[docket.RoleAdmin]),
		chromedp.WaitVisible(chromedp.ID("pool-counts")),
		screenshot(shots, "pool-finalized"),
	))
	counts, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("pool-counts")))
	require.NoError(t, err)
	require.Contains(t, counts, "3 finalized")
	units, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("units")))
	require.NoError(t, err)
	require.Equal(t, 3, strings.Count(units, "FINALIZED"), units)
	// Its progress panels are drawn, and a unit opens with its judgments.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.ID("hours-chart")),
		chromedp.WaitVisible(chromedp.ID("confidence-chart")),
		chromedp.Click(chromedp.CSS("#units tbody a[href^='/units/']")),
		chromedp.WaitVisible(chromedp.ID("judgments")),
		screenshot(shots, "unit"),
	))
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("unit-state")))
	require.NoError(t, err)
	require.Equal(t, "FINALIZED", state)

	for _, m := range messages() {
		if strings.Contains(m, "status of 422") {
			continue // the refused submission, on purpose
		}
		require.NotContains(t, m, "Content Security Policy", "the pages must run under the CSP")
		require.False(t, strings.HasPrefix(m, "exception") || strings.HasPrefix(m, "error"), m)
	}
	t.Logf("screenshots in %s; console: %q", shots, messages())
}

// TestBrowserStartOnce: in a real chromium, the "Start working" form sent
// three times at once from the page (as a double click does when the
// first request is still on its way) opens one assignment three times,
// and the pool has one active assignment; clicking Start twice more while
// that unit is open lands on the same unit, still one active.
func TestBrowserStartOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx, messages := headless(t)
	pool, _ := makeWorkPool(t, b.client, 3, "/static/favicon.svg")
	active := func() int {
		t.Helper()
		p, err := b.client.PoolGet(context.Background(), pool.ID)
		require.NoError(t, err)
		return p.Counts.ActiveAssignments
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/work"),
		signIn(b.keys[RoleContributor]),
		chromedp.WaitVisible(chromedp.CSS("button.start")),
	))
	urls, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
		const f = document.querySelector("button.start").form;
		const send = () => fetch(f.action, {method: "POST", body: new URLSearchParams(new FormData(f))}).then(r => r.url);
		return Promise.all([send(), send(), send()]);
	})()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Len(t, urls, 3)
	first := assignmentOf(t, strings.TrimPrefix(urls[0], b.server.URL))
	for _, u := range urls {
		require.Equal(t, first, assignmentOf(t, strings.TrimPrefix(u, b.server.URL)), "%q", urls)
	}
	require.Equal(t, 1, active())

	// Two clicks on the button, the second while the first is on its way.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`(() => {
			const b = document.querySelector("button.start");
			b.click();
			setTimeout(() => b.click(), 0);
		})()`),
	))
	// The page navigates under the poll: a poll the navigation ends is
	// polled again on the new page.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.readyState === "complete" && document.getElementById("work-form") !== null`,
			chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil {
			break
		}
		require.Contains(t, err.Error(), "(-32000)", "no work page")
		require.True(t, time.Now().Before(deadline), "no work page")
	}
	action, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("work-form").getAttribute("action")`))
	require.NoError(t, err)
	require.Equal(t, "/work/a/"+first.String()+"/submit", action)
	require.Equal(t, 1, active())
	for _, m := range messages() {
		require.NotContains(t, m, "Content Security Policy")
	}
}

// TestBrowserHeartbeatTrouble: a heartbeat the server fails to record (a
// 500: the database busy a moment) does not tell the contributor the unit
// is gone, nor stop the beats — only a refusal does (docs/web.md: 409
// when the unit is no longer held, and the page says so).
func TestBrowserHeartbeatTrouble(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx, messages := headless(t)
	// assignmentSeconds 30: a beat every 3 s.
	makeWorkPoolOf(t, b.client, strings.Replace(workTask, `"assignmentSeconds": 60`, `"assignmentSeconds": 30`, 1), 2, "/static/favicon.svg")
	var failed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /work/a/{id}/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		if failed.Add(1) == 1 { // the first beat fails as a store error makes it fail
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"state":"ACTIVE","expiresAt":"2000-01-01T00:00:00Z","now":"2000-01-01T00:00:00Z","error":"the heartbeat failed"}` + "\n"))
			return
		}
		b.handler.ServeHTTP(w, r)
	})
	mux.Handle("/", b.handler)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/work"),
		signIn(b.keys[RoleContributor]),
		chromedp.WaitVisible(chromedp.CSS("button.start")),
		chromedp.Click(chromedp.CSS("button.start")),
		chromedp.WaitVisible(chromedp.ID("work-form")),
	))
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("lease-status").dataset.beats >= "1"`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err, "a failed beat stopped the beats")
	require.GreaterOrEqual(t, failed.Load(), int32(2), "the first beat failed, a later one went through")
	status, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("lease-status").textContent + "|" + document.getElementById("countdown").className`))
	require.NoError(t, err)
	require.Equal(t, "|", status, "a beat recorded: no warning, the countdown not expired")

	// A refusal still ends it: the unit given back, the next beat's 409
	// says so and the beats stop.
	action, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("work-form").getAttribute("action")`))
	require.NoError(t, err)
	_, err = b.client.AssignmentRelease(context.Background(), assignmentOf(t, strings.TrimSuffix(action, "/submit")), b.contributor.ID)
	require.NoError(t, err)
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("lease-status").textContent.indexOf("no longer yours") >= 0`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err, "a 409 says the unit is gone")
	for _, m := range messages() {
		require.NotContains(t, m, "Content Security Policy")
		require.False(t, strings.HasPrefix(m, "exception"), m)
	}
}
