package web

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/testdb"
)

// axControl is a form control as the browser's accessibility tree has it.
type axControl struct{ Role, Name, Description string }

// axControls lists the page's text boxes, number boxes, radio buttons and
// check boxes with the accessible name and description chromium computes
// for them (what a screen reader says).
func axControls(ctx context.Context) ([]axControl, error) {
	return chromedp.Run(ctx, func(ctx context.Context, tg *chromedp.Target) ([]axControl, error) {
		res, err := cdp.Call(ctx, tg, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
		if err != nil {
			return nil, err
		}
		str := func(v *accessibility.Value) string {
			var s string
			if v != nil {
				_ = json.Unmarshal(v.Value, &s)
			}
			return s
		}
		var out []axControl
		for _, n := range res.Nodes {
			if n.Ignored {
				continue
			}
			switch role := str(n.Role); role {
			case "textbox", "spinbutton", "radio", "checkbox":
				out = append(out, axControl{role, strings.TrimSpace(str(n.Name)), str(n.Description)})
			}
		}
		return out, nil
	})
}

// TestBrowserWorkAccessible: in chromium, every control of the work form
// has an accessible name — the text box and the number box took none from
// their field's legend, so a screen reader said "edit text, blank" — and
// after a refused answer the focus is on the first field in error, which
// is marked invalid and described by its error, rather than left at the
// top of the page.
func TestBrowserWorkAccessible(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx, messages := headless(t)
	makeWorkPool(t, b.client, 2, "/static/favicon.svg")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/work"),
		signIn(b.keys[RoleContributor]),
		chromedp.WaitVisible(chromedp.CSS("button.start")),
		chromedp.Click(chromedp.CSS("button.start")),
		chromedp.WaitVisible(chromedp.ID("work-form")),
	))
	named := func() []axControl {
		t.Helper()
		cs, err := axControls(ctx)
		require.NoError(t, err)
		roles := map[string]int{}
		for _, c := range cs {
			roles[c.Role]++
			require.NotEmpty(t, c.Name, "a %s with no name: %+v", c.Role, cs)
		}
		// workTask: one text, one number, the choice's 2, the rating's 5
		// and the box labels' 2 radios, the multi-choice's 2 boxes.
		require.Equal(t, map[string]int{"textbox": 1, "spinbutton": 1, "radio": 9, "checkbox": 2}, roles, "%+v", cs)
		return cs
	}
	cs := named()
	for _, c := range cs {
		switch c.Role {
		case "textbox":
			require.Equal(t, "note", c.Name, "the text box is named by its field")
		case "spinbutton":
			require.Equal(t, "count", c.Name)
		}
	}

	// Refused: nothing picked for the required choice, a count that is
	// not a whole number.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("f-count"), "2.5"),
		chromedp.Click(chromedp.ID("submit")),
		chromedp.WaitVisible(chromedp.ID("problems")),
	))
	focused, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.id`))
	require.NoError(t, err)
	require.Equal(t, "f-same-0", focused, "the focus is on the first field in error")
	invalid, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll("#work-form [aria-invalid=true]")).map(e => e.id)`))
	require.NoError(t, err)
	require.Equal(t, []string{"f-same-0", "f-same-1", "f-count"}, invalid)
	for _, c := range named() {
		if c.Role == "spinbutton" {
			require.Contains(t, c.Description, "must be an integer", "the error describes the box")
		}
	}
	for _, m := range messages() {
		if strings.Contains(m, "status of 422") {
			continue // the refused submission, on purpose
		}
		require.NotContains(t, m, "Content Security Policy")
		require.False(t, strings.HasPrefix(m, "exception") || strings.HasPrefix(m, "error"), m)
	}
}
