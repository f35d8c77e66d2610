package web

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestBrowserWorkSignedOut: a contributor's session ends while they
// answer a unit (the server restarted, say: sessions live in its memory).
// Their Submit is refused (401) — and the page said only "Sign in first"
// with a link to the sign-in page, which then led to the pools, the
// typed answer lost. Now the link leads back to the unit after signing
// in, and the unit's form opens with the answer as it was typed, to
// check and submit.
func TestBrowserWorkSignedOut(t *testing.T) {
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
	action, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("work-form").getAttribute("action")`))
	require.NoError(t, err)
	unitPage := strings.TrimSuffix(action, "/submit")
	id := assignmentOf(t, unitPage)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.KeyEvent("2"),
		chromedp.KeyEvent("d"),
		chromedp.SendKeys(chromedp.ID("f-note"), "kept — ünïcode"),
		chromedp.SendKeys(chromedp.ID("f-count"), "7"),
	))

	// The server forgets every session.
	b.handler.sessions.mu.Lock()
	clear(b.handler.sessions.byID)
	b.handler.sessions.mu.Unlock()

	// waitFor waits until js holds on the page the last action led to. The
	// page navigates under the poll: a poll the navigation ends is polled
	// again on the new page.
	waitFor := func(js, what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.readyState === "complete" && `+js,
				chromedp.WithPollingTimeout(time.Until(deadline))))
			if err == nil {
				return
			}
			require.Contains(t, err.Error(), "(-32000)", what)
			require.True(t, time.Now().Before(deadline), what)
		}
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("submit"))))
	waitFor(`document.querySelector("p.error") !== null`, "no refusal page")
	refusal, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main").textContent`))
	require.NoError(t, err)
	require.Contains(t, refusal, "Sign in")
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("signin-link") || document.querySelector("main a")).getAttribute("href")`))
	require.NoError(t, err)
	require.Equal(t, "/signin?next="+strings.ReplaceAll(unitPage, "/", "%2f"), href, "back to the unit")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("signin-link")),
		signIn(b.keys[RoleContributor]),
	))
	waitFor(`document.getElementById("work-form") !== null`, "not back on the unit")
	waitFor(`document.getElementById("draft-restored") !== null`, "the answer is not filled back in")
	location, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, b.server.URL+unitPage, location)
	form, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[String(document.getElementById("f-same-1").checked),
		String(document.getElementById("f-tags-1").checked), String(document.getElementById("f-tags-0").checked),
		document.getElementById("f-note").value, document.getElementById("f-count").value]`))
	require.NoError(t, err)
	require.Equal(t, []string{"true", "true", "false", "kept — ünïcode", "7"}, form, "the answer as typed")

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("submit"))))
	require.Eventually(t, func() bool {
		a, err := b.client.AssignmentGet(context.Background(), id)
		return err == nil && a.State == docket.AssignmentSubmitted
	}, 10*time.Second, 20*time.Millisecond, "the answer saved")
	a, err := b.client.AssignmentGet(context.Background(), id)
	require.NoError(t, err)
	js, err := b.client.JudgmentList(context.Background(), a.UnitID)
	require.NoError(t, err)
	require.Len(t, js, 1)
	var got map[string]any
	require.NoError(t, json.Unmarshal(js[0].Data, &got))
	require.Equal(t, map[string]any{"same": "no", "tags": []any{"dark"}, "note": "kept — ünïcode", "count": 7.0}, got)
	for _, m := range messages() {
		if strings.Contains(m, "status of 401") {
			continue // the refused submission, on purpose
		}
		require.NotContains(t, m, "Content Security Policy")
		require.False(t, strings.HasPrefix(m, "exception") || strings.HasPrefix(m, "error"), m)
	}
}
