package web

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestBrowserQuality: in chromium, a viewer finds the flagged spammer at
// the top of the pool's contributors panel, opens their page — the trust
// history drawn in the stylesheet's colours, the tainted judgment struck
// through — and follows it to the unit, whose tainted judgment and audit
// trail show. No CSP violation, no script error.
func TestBrowserQuality(t *testing.T) {
	t.Parallel()
	b := setupQuality(t, testdb.Backends()[0])
	s := seedQuality(t, b)
	ctx, messages := headless(t)
	shots := screenshotDir(t)
	spamLink := chromedp.CSS(`tr[data-contributor="` + s.spm.ID.String() + `"] a`)

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/pools/"+s.pool.ID.String()),
		signIn(b.keys[docket.RoleViewer]),
		chromedp.WaitVisible(chromedp.ID("contributors")),
		chromedp.ScrollIntoView(chromedp.ID("contributors")),
		screenshot(shots, "web-pool"),
	))
	first, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#contributors tbody tr:first-child`)))
	require.NoError(t, err)
	require.Contains(t, first, "Spam Bot")
	require.Contains(t, first, "FLAGGED")
	background, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('#contributors tr.flagged td')).backgroundColor`))
	require.NoError(t, err)
	require.Equal(t, "rgb(255, 246, 246)", background, "quality.css styles the flagged row")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(spamLink),
		chromedp.WaitVisible(chromedp.ID("trust-chart")),
		screenshot(shots, "web-contributor"),
	))
	dots, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#trust-chart circle').length`))
	require.NoError(t, err)
	require.Equal(t, 3, dots, "one point per trust change: three test questions")
	stroke, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('#trust-chart polyline')).stroke`))
	require.NoError(t, err)
	require.Equal(t, "rgb(91, 141, 239)", stroke)
	low, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('#trust-chart circle.low')).fill`))
	require.NoError(t, err)
	require.Equal(t, "rgb(210, 69, 69)", low, "a trust under the pool's minimum is red")
	struck, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('#judgments tr.tainted pre')).textDecorationLine`))
	require.NoError(t, err)
	require.Equal(t, "line-through", struck)

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#judgments tr.tainted a[href="/units/`+s.unit.ID.String()+`"]`)),
		chromedp.WaitVisible(chromedp.ID("audits")),
	))
	audit, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("audits")))
	require.NoError(t, err)
	require.Contains(t, audit, "recompute")
	require.Contains(t, audit, "Spam Bot flagged")
	tainted, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#judgments tr.tainted`)))
	require.NoError(t, err)
	require.Contains(t, tainted, "tainted — excluded")

	for _, m := range messages() {
		require.NotContains(t, m, "Content Security Policy")
		require.False(t, strings.HasPrefix(m, "exception") || strings.HasPrefix(m, "error"), m)
	}
}
