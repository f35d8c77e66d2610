package web

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// chromium finds Debian's chromium. Without it the browser tests skip,
// except under CI (CI set), where a missing browser is a failure:
// scripts/test.sh installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed: in CI the browser tests must run (scripts/test.sh installs it)")
	}
	t.Skip("chromium is not installed; scripts/test.sh installs it (apt-get install chromium)")
	return ""
}

// screenshotDir is where browser tests save screenshots: $DOCKET_SCREENSHOTS,
// or the test's temporary directory. The screenshots docs/ shows are the
// ones named web-*; with $DOCKET_WEB_SCREENSHOTS set they are written
// there too (screenshot), so that
//
//	DOCKET_WEB_SCREENSHOTS=$PWD/docs go test -run 'TestBrowser' ./internal/web
//
// refreshes docs/web-*.png from the current pages.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("DOCKET_SCREENSHOTS"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

// signIn fills the sign-in form on the page and sends it with key.
func signIn(key string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), key),
		chromedp.Click(chromedp.ID("signin")),
	)
}

// headless starts a headless chromium and returns its context, and a func
// returning the console messages and browser log entries so far (CSP
// violations and script errors among them).
func headless(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // tests may run as root in a container
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1200, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	// No timeout on the browser's context (chromedp.Run's rule): go test's
	// -timeout bounds the test.
	ctx, cancelCtx := chromedp.NewContext(actx)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	var mu sync.Mutex
	var messages []string
	done := make(chan struct{})
	listen, stopListen := context.WithCancel(ctx)
	go func() {
		defer close(done)
		for m, err := range chromedp.Console(listen) {
			if err != nil {
				return
			}
			mu.Lock()
			messages = append(messages, fmt.Sprintf("%s: %s", m.Type, m.Text))
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		stopListen()
		<-done
		cancelCtx()
		cancelAlloc()
	})
	return ctx, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), messages...) }
}

// screenshot saves the whole page as dir/name.png, and a docs screenshot
// (name web-*) in $DOCKET_WEB_SCREENSHOTS too when it is set.
func screenshot(dir, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		buf, err := chromedp.FullScreenshot(100)(ctx, tg)
		if err != nil {
			return err
		}
		if docs := os.Getenv("DOCKET_WEB_SCREENSHOTS"); docs != "" && strings.HasPrefix(name, "web-") {
			if err := os.WriteFile(filepath.Join(docs, name+".png"), buf, 0o644); err != nil {
				return err
			}
		}
		return os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644)
	})
}

// TestBrowserSignInAndCancel drives a real headless chromium: sign in
// with an API key, find a job inserted with the Go client in the list,
// open it, cancel it, and see its state change; the overview's DEAD count
// updates by itself (htmx polling) when a job dies. No page may log a
// CSP violation or a script error.
func TestBrowserSignInAndCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx, messages := headless(t)
	shots := screenshotDir(t)
	row := insert(t, b.client, "email", "mail", `{"to":"ada@example.com"}`)
	jobLink := chromedp.CSS(fmt.Sprintf(`a[href="/jobs/%s"]`, row.ID))

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/jobs"),
		chromedp.WaitVisible(chromedp.ID("key")),
		screenshot(shots, "signin"),
		chromedp.SendKeys(chromedp.ID("key"), b.keys[docket.RoleAdmin]),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(jobLink),
	))
	location, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, b.server.URL+"/jobs", location, "sign-in returns to the page asked for")
	require.NoError(t, chromedp.Do(ctx,
		screenshot(shots, "jobs"),
		chromedp.Click(jobLink),
		chromedp.WaitVisible(chromedp.ID("cancel")),
	))
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("job-state")))
	require.NoError(t, err)
	require.Equal(t, "QUEUED", state)
	htmxType, err := chromedp.Run(ctx, chromedp.Evaluate[string](`typeof htmx`))
	require.NoError(t, err)
	require.Equal(t, "object", htmxType, "the vendored htmx loaded under the CSP")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("cancel")),
		chromedp.WaitVisible(chromedp.CSS(".message")),
		screenshot(shots, "web-job"),
	))
	state, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("job-state")))
	require.NoError(t, err)
	require.Equal(t, "CANCELED", state)
	got, err := b.client.Get(context.Background(), row.ID)
	require.NoError(t, err)
	require.Equal(t, docket.JobStateCanceled, got.State)

	// The overview refreshes itself: a job dying shows within a poll,
	// without a reload.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.server.URL+"/"), chromedp.WaitVisible(chromedp.ID("dead-count"))))
	// The live panel may be swapped by htmx right after the page loads (the
	// stream's first event refreshes it): a node read by id can be the one
	// just detached, whose text is "". Ask the document instead.
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("dead-count").textContent === "0"`,
		chromedp.WithPollingTimeout(3*overviewRefresh*time.Second)))
	require.NoError(t, err, "the overview shows no DEAD job before one dies")
	require.NoError(t, chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`)))
	dead(t, b.client, "images")
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("dead-count").textContent === "1"`,
		chromedp.WithPollingTimeout(3*overviewRefresh*time.Second)))
	require.NoError(t, err, "the DEAD count did not refresh")
	same, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.notReloaded === true`))
	require.NoError(t, err)
	require.True(t, same, "htmx swapped the panel; the page did not reload")
	require.NoError(t, chromedp.Do(ctx, screenshot(shots, "web-overview")))

	// A run page draws its DAG as SVG, coloured by the stylesheet.
	putWorkflow(t, b.client, fanFlow)
	started, err := b.client.RunStart(context.Background(), "fan", map[string]any{"items": []int{1, 2}}, nil)
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.server.URL+"/runs/"+started.Run.ID.String()),
		chromedp.WaitVisible(chromedp.CSS(`svg#dag g[data-step="split"] rect`)),
		screenshot(shots, "run"),
	))
	fill, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('svg#dag g[data-step="split"] rect')).fill`))
	require.NoError(t, err)
	require.Equal(t, "rgb(246, 201, 131)", fill, "the running step is drawn in the stylesheet's colour")

	for _, m := range messages() {
		require.NotContains(t, m, "Content Security Policy", "the pages must run under the CSP")
		require.False(t, strings.HasPrefix(m, "exception") || strings.HasPrefix(m, "error"), m)
	}
	t.Logf("screenshots in %s; console: %q", shots, messages())
}
