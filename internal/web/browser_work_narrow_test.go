package web

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// longWord is a run of text with no place to break a line: a URL, a
// hash, a word of a language written without spaces.
var longWord = strings.Repeat("x", 180)

// narrowTask has a long unbroken word in its instructions, a field's
// label, help and option, and shows a unit's long text, object and link.
var narrowTask = `{"title": "Label ` + longWord + `", "instructions": "Look: ` + longWord + `",
 "display": [{"kind": "text", "from": "unit.text", "label": "Text"}, {"kind": "text", "from": "unit.obj"},
             {"kind": "link", "from": "unit.link"}],
 "fields": [{"name": "same", "kind": "choice", "required": true, "label": "Same ` + longWord + `?", "help": "` + longWord + `",
             "options": [{"value": "yes", "label": "` + longWord + `"}, {"value": "no"}]},
            {"name": "note", "kind": "text"}],
 "judgmentsPerUnit": {"min": 1}, "assignmentSeconds": 600}`

// TestBrowserWorkNarrow: on a phone's width (375 px), the work page and
// the pools page fit the screen: a unit's long text with no space in it
// (non-ASCII too), a long link, and long words in the task's title,
// instructions, labels and options wrap instead of widening the page
// sideways (which hid the form's right half and the Submit button's
// neighbours off screen).
func TestBrowserWorkNarrow(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx, messages := headless(t)
	shots := screenshotDir(t)
	c := context.Background()
	tmpl, err := docket.ParseTask([]byte(narrowTask))
	require.NoError(t, err)
	_, _, err = b.client.TaskPut(c, "photo", tmpl)
	require.NoError(t, err)
	putWorkflow(t, b.client, `{"name": "catalog", "steps": [{"name": "label", "human": {"task": "photo"}}]}`)
	pool, _, err := b.client.PoolEnsure(c, "catalog", 1, "label", "photo")
	require.NoError(t, err)
	in, err := json.Marshal(map[string]any{"text": "élan " + strings.Repeat("日本語", 300) + " " + longWord,
		"obj": map[string]any{"k": longWord}, "link": "https://example.com/" + longWord})
	require.NoError(t, err)
	_, err = b.client.UnitsAdd(c, pool.ID, []json.RawMessage{in})
	require.NoError(t, err)

	// fits says whether the page is no wider than the window.
	fits := func(name string) {
		t.Helper()
		w, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
		require.NoError(t, err)
		require.NoError(t, chromedp.Do(ctx, screenshot(shots, name)))
		require.LessOrEqual(t, w[0], w[1], "%s: the page is %d px wide in a window of %d", name, w[0], w[1])
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(375, 800),
		chromedp.Navigate(b.server.URL+"/work"),
		signIn(b.keys[RoleContributor]),
		chromedp.WaitVisible(chromedp.CSS("button.start")),
	))
	fits("narrow-pools")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("button.start")),
		chromedp.WaitVisible(chromedp.ID("work-form")),
	))
	fits("narrow-work")
	// The page after a refused answer too: the problems listed above the
	// form.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("submit")),
		chromedp.WaitVisible(chromedp.ID("problems")),
	))
	fits("narrow-work-refused")
	for _, m := range messages() {
		if strings.Contains(m, "status of 422") {
			continue // the refused submission, on purpose
		}
		require.NotContains(t, m, "Content Security Policy")
		require.False(t, strings.HasPrefix(m, "exception") || strings.HasPrefix(m, "error"), m)
	}
}
