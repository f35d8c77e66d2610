package web

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/testdb"
)

// TestBrowserTestFeedback: in chromium, a contributor answers the quiz's
// test question wrong with the keyboard; the next unit's page says so
// above the unit — the expected answer, the requester's explanation as
// text, their trust — then they answer that regular unit and the page
// after it has no feedback. No CSP violation, no script error.
func TestBrowserTestFeedback(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx, messages := headless(t)
	shots := screenshotDir(t)
	pool := makeQuizPool(t, b.client, "quiz", "", 1)
	ctrlEnter := chromedp.KeyEvent("\r", chromedp.KeyModifiers(chromedp.ModifierCtrl))
	feedbackShown := func() bool {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#test-feedback").length`))
		require.NoError(t, err)
		return n > 0
	}
	// waitPath waits for a loaded page whose path starts with prefix and
	// differs from not (the page navigates under the poll: a poll the
	// navigation ends is polled again).
	waitPage := func(prefix, not string) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.readyState === "complete" && location.pathname.startsWith("`+prefix+
				`") && location.pathname !== "`+not+`"`, chromedp.WithPollingTimeout(time.Until(deadline))))
			if err == nil {
				return
			}
			require.Contains(t, err.Error(), "(-32000)", "no page %s", prefix)
			require.True(t, time.Now().Before(deadline), "no page %s", prefix)
		}
	}

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/work"),
		signIn(b.keys[RoleContributor]),
		chromedp.WaitVisible(chromedp.CSS(`button.start[data-pool="`+pool.ID.String()+`"]`)),
		chromedp.Click(chromedp.CSS(`button.start[data-pool="`+pool.ID.String()+`"]`)),
		chromedp.WaitVisible(chromedp.ID("work-form")),
	))
	unit, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("unit")))
	require.NoError(t, err)
	require.Contains(t, unit, "Acme X-1", "the test question, like any unit")
	require.False(t, feedbackShown(), "nothing before the answer")
	testPath, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname`))
	require.NoError(t, err)

	// 2 picks Different (wrong: the answer is Same); Ctrl+Enter submits.
	require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent("2"), ctrlEnter))
	waitPage("/work/a/", testPath)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("test-feedback"))))
	verdict, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#test-feedback .verdict")))
	require.NoError(t, err)
	require.Equal(t, "Test question: incorrect — the expected answer was Same.", strings.Join(strings.Fields(verdict), " "))
	explanation, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("test-explanation")))
	require.NoError(t, err)
	require.Equal(t, quizExplanation, explanation, "the requester's markup shows as text")
	bolds, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#test-explanation b").length`))
	require.NoError(t, err)
	require.Zero(t, bolds)
	trust, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("test-trust")))
	require.NoError(t, err)
	require.Contains(t, trust, "0.25 (0 of 1 test question right)")
	colour, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.getElementById("test-feedback")).borderLeftColor`))
	require.NoError(t, err)
	require.Equal(t, "rgb(210, 69, 69)", colour, "the stylesheet's wrong colour")
	unit, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("unit")))
	require.NoError(t, err)
	require.Contains(t, unit, "Widget 0", "the next unit below the feedback")
	require.NoError(t, chromedp.Do(ctx, screenshot(shots, "web-test-feedback")))
	regularPath, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname`))
	require.NoError(t, err)

	// The regular unit: answered, the page after it says nothing of tests.
	require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent("1"), ctrlEnter))
	waitPage("/work", regularPath)
	location, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, b.server.URL+"/work?m=saved", location, "no unit left: the pools, no test named")
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("work-message"))))
	require.False(t, feedbackShown(), "a regular unit's answer shows no feedback")

	for _, m := range messages() {
		require.NotContains(t, m, "Content Security Policy", "the pages must run under the CSP")
		require.False(t, strings.HasPrefix(m, "exception") || strings.HasPrefix(m, "error"), m)
	}
}
