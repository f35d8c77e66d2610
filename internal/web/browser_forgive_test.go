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

// TestBrowserForgive: in chromium, an admin opens the page of a spammer
// quality control flagged (wrong on three test questions through the
// real take and judgment, seedQuality), is refused without typing the
// confirmation, types it and forgives them: the page says so, the state
// reads forgiven, their judgments are no longer struck through, the pool
// panel lists them as forgiven, and the unit they judged was recomputed
// with them. No CSP violation, no script error.
func TestBrowserForgive(t *testing.T) {
	t.Parallel()
	b := setupQuality(t, testdb.Backends()[0])
	s := seedQuality(t, b)
	ctx, messages := headless(t)
	shots := screenshotDir(t)
	page := b.server.URL + "/pools/" + s.pool.ID.String() + "/contributors/" + s.spm.ID.String()

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(page),
		signIn(b.keys[docket.RoleAdmin]),
		chromedp.WaitVisible(chromedp.ID("forgive-form")),
		chromedp.ScrollIntoView(chromedp.ID("forgive-form")),
		screenshot(shots, "web-forgive"),
	))
	standing, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("standing")))
	require.NoError(t, err)
	require.Contains(t, standing, "FLAGGED by the trust check")
	struck, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#judgments tr.tainted').length`))
	require.NoError(t, err)
	require.Equal(t, 4, struck, "the first unit and three test questions")

	// Without the confirmation: refused on the page, nothing forgiven.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("forgive")),
		chromedp.WaitVisible(chromedp.ID("errors")),
	))
	refusal, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("errors")))
	require.NoError(t, err)
	require.Contains(t, refusal, "confirm: type forgive")
	st, err := b.client.ContributorQualityGet(context.Background(), s.pool.ID, s.spm.ID)
	require.NoError(t, err)
	require.True(t, st.Standing.Flagged)

	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("confirm"), "forgive"),
		chromedp.Click(chromedp.ID("forgive")),
		chromedp.WaitVisible(chromedp.ID("message")),
	))
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("message")))
	require.NoError(t, err)
	require.Contains(t, msg, "Forgiven: Spam Bot's flag (trust check) is lifted")
	standing, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("standing")))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(standing, "forgiven"), standing)
	state, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#forgive-form, #judgments tr.tainted').length`))
	require.NoError(t, err)
	require.Zero(t, state, "no form, nothing struck through")

	// The pool's panel and the unit they judged.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("pool-link")),
		chromedp.WaitVisible(chromedp.ID("contributors")),
	))
	row, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`tr[data-contributor="`+s.spm.ID.String()+`"]`)))
	require.NoError(t, err)
	require.Contains(t, row, "forgiven")
	require.NotContains(t, row, "FLAGGED")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/units/"+s.unit.ID.String()),
		chromedp.WaitVisible(chromedp.ID("audits")),
	))
	audits, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("audits")))
	require.NoError(t, err)
	require.Contains(t, audits, "un-flagged")
	tainted, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#judgments tr.tainted').length`))
	require.NoError(t, err)
	require.Zero(t, tainted, "the spammer's judgment counts again")

	for _, m := range messages() {
		if m == "error: Failed to load resource: the server responded with a status of 400 (Bad Request)" {
			continue // the unconfirmed form, refused on purpose
		}
		require.NotContains(t, m, "Content Security Policy")
		require.False(t, strings.HasPrefix(m, "exception") || strings.HasPrefix(m, "error"), m)
	}
}
