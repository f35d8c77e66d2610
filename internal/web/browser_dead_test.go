package web

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestBrowserDeadRetry: in chromium, a DEAD job is retried from its page;
// then every DEAD job of a filtered list is retried at once after typing
// the confirmation, which the page first asks for.
func TestBrowserDeadRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx, messages := headless(t)
	shots := screenshotDir(t)
	one := dead(t, b.client, "mail")
	images := []*docket.JobRow{dead(t, b.client, "images"), dead(t, b.client, "images")}
	state := func(row *docket.JobRow) docket.JobState {
		got, err := b.client.Get(context.Background(), row.ID)
		require.NoError(t, err)
		return got.State
	}

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/dead"),
		signIn(b.keys[docket.RoleProducer]),
		chromedp.WaitVisible(chromedp.ID("dead-jobs")),
		chromedp.Click(chromedp.CSS(`a[href="/jobs/`+one.ID.String()+`"]`)),
		chromedp.WaitVisible(chromedp.ID("retry")),
		chromedp.Click(chromedp.ID("retry")),
		chromedp.WaitVisible(chromedp.CSS(".message")),
	))
	require.Equal(t, docket.JobStateQueued, state(one))

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/dead"),
		chromedp.WaitVisible(chromedp.ID("queue")),
		chromedp.SendKeys(chromedp.ID("queue"), "images"),
		chromedp.Click(chromedp.ID("filter")),
		chromedp.WaitVisible(chromedp.ID("retry-all")),
		screenshot(shots, "dead"),
		// Without the confirmation: refused, nothing retried.
		chromedp.Click(chromedp.ID("retry-all")),
		chromedp.WaitVisible(chromedp.CSS(`ul.error`)),
	))
	refusal, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("ul.error")))
	require.NoError(t, err)
	require.Contains(t, refusal, "confirm:")
	require.Equal(t, docket.JobStateDead, state(images[0]))
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("confirm"), "retry"),
		chromedp.Click(chromedp.ID("retry-all")),
		chromedp.WaitVisible(chromedp.ID("dead-message")),
	))
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("dead-message")))
	require.NoError(t, err)
	require.Contains(t, msg, "Retried 2 DEAD jobs")
	for _, row := range images {
		require.Equal(t, docket.JobStateQueued, state(row))
	}
	for _, m := range messages() {
		if m == "error: Failed to load resource: the server responded with a status of 400 (Bad Request)" {
			continue // the refused retry, on purpose
		}
		require.NotContains(t, m, "Content Security Policy")
		require.False(t, strings.HasPrefix(m, "exception") || strings.HasPrefix(m, "error"), m)
	}
}
