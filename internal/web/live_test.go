package web

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/natsembed"
)

// liveSetup is a dashboard whose outbox is relayed to a real (embedded)
// NATS JetStream bus, as in docket serve, with BusHealth reporting it.
func liveSetup(t *testing.T, backend testdb.Backend) *bundle {
	t.Helper()
	b := setup(t, backend)
	srv, err := natsembed.Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	bus, err := docket.OpenEventBus(t.Context(), docket.EventBusConfig{Embedded: srv})
	require.NoError(t, err)
	t.Cleanup(bus.Close)
	relay := b.client.NewEventRelay(bus, docket.EventRelayConfig{PollInterval: 10 * time.Millisecond})
	require.NoError(t, relay.Start(context.WithoutCancel(t.Context())))
	t.Cleanup(relay.Stop)
	b.handler, err = New(Config{Client: b.client, Now: b.clock.Now,
		BusHealth: func() error { return errors.Join(bus.Health(), relay.Health()) }})
	require.NoError(t, err)
	b.server = httptest.NewServer(b.handler)
	t.Cleanup(b.server.Close)
	return b
}

// sseLines opens path as an event stream in br's session and sends each
// "event:" line's name, with the time it arrived, until the test ends.
type sseEvent struct {
	name string
	at   time.Time
}

func (br *browser) stream(t *testing.T, path string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", br.b.server.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	res, err := br.http.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	require.Equal(t, ContentSecurityPolicy, res.Header.Get("Content-Security-Policy"))
	out := make(chan sseEvent, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				select {
				case out <- sseEvent{name, time.Now()}:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); res.Body.Close(); <-done })
	return out
}

// waitPublished waits until the relay has published every outbox row.
func waitPublished(t *testing.T, c *docket.Client) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := c.UnpublishedEventRows(context.Background())
		require.NoError(t, err)
		if n == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d outbox rows unpublished after 30 s", n)
		time.Sleep(10 * time.Millisecond) // polling the outbox with a deadline
	}
}

func nextEvent(t *testing.T, ch <-chan sseEvent, within time.Duration) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		require.True(t, ok, "the stream ended")
		return ev
	case <-time.After(within):
		t.Fatalf("no event within %s", within)
	}
	return sseEvent{}
}

// TestLiveStreams: a run's stream says "refresh" when one of its steps
// finishes (an event published by the relay), not for other runs' events;
// the overview's stream refreshes at most once a second however many
// events arrive; without an event bus, streams refresh every 5 s; no
// stream without a session.
func TestLiveStreams(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := liveSetup(t, backend)
		putWorkflow(t, b.client, fanFlow)
		putWorkflow(t, b.client, `{"name": "other", "steps": [{"name": "only", "job": {"type": "t", "queue": "other"}}]}`)
		started, err := b.client.RunStart(ctx, "fan", map[string]any{"items": []int{1, 2}}, nil)
		require.NoError(t, err)
		id := started.Run.ID

		anon := b.browser(t)
		r := anon.get(t, "/runs/"+id.String()+"/events")
		require.Equal(t, http.StatusSeeOther, r.Status, "no stream without a session")
		require.Equal(t, http.StatusSeeOther, anon.get(t, "/overview/events").Status)
		contributor := b.signIn(t, RoleContributor)
		require.Equal(t, http.StatusForbidden, contributor.get(t, "/runs/"+id.String()+"/events").Status)

		viewer := b.signIn(t, docket.RoleViewer)
		require.Equal(t, http.StatusNotFound, viewer.get(t, "/runs/0190c6a4-0000-7000-8000-000000000000/events").Status)
		waitPublished(t, b.client) // the run's start is history before the stream opens
		events := viewer.stream(t, "/runs/"+id.String()+"/events")
		// Another run's events say nothing to this stream.
		_, err = b.client.RunStart(ctx, "other", nil, nil)
		require.NoError(t, err)
		select {
		case ev := <-events:
			t.Fatalf("a refresh (%v) for another run's event", ev)
		case <-time.After(2 * time.Second):
		}
		split := leaseWF(t, b.client, 1)[0]
		require.NoError(t, b.client.LeaseComplete(ctx, split.ID, json.RawMessage(`{}`)))
		require.Equal(t, "refresh", nextEvent(t, events, 10*time.Second).name)

		require.Equal(t, "up", text(find(viewer.get(t, "/").Doc, "span", "bus-health")), "the overview shows the bus is up")
		// The live part of the run page, as live.js fetches it.
		r = viewer.get(t, "/runs/"+id.String()+"/live")
		require.Equal(t, http.StatusOK, r.Status)
		require.Contains(t, attr(dagNodeOf(t, r.Doc, "split"), "class"), "ss-succeeded")
		require.NotContains(t, r.Body, "<html", "a fragment, not a page")
		require.Equal(t, http.StatusNotFound, viewer.get(t, "/runs/nope/live").Status)

		// The overview: a burst of events over 3 s gives at most one
		// refresh a second.
		overview := viewer.stream(t, "/overview/events")
		opened := time.Now()
		start := time.Now()
		for time.Since(start) < 3*time.Second {
			insert(t, b.client, "email", "mail", `{}`)
			time.Sleep(20 * time.Millisecond) // a steady flow of events, not a wait for state
		}
		var got []sseEvent
		for {
			select {
			case ev := <-overview:
				got = append(got, ev)
				continue
			case <-time.After(1500 * time.Millisecond):
			}
			break
		}
		require.NotEmpty(t, got, "the overview heard of the new jobs")
		// ~150 jobs published over 3 s: without the limit, about one
		// refresh each; with it, at most one a second (counted, not timed
		// one by one: a busy test machine may deliver two close together).
		elapsed := time.Since(opened)
		require.LessOrEqual(t, len(got), int(elapsed/liveMinGap)+2, "%d refreshes in %s", len(got), elapsed)
	})
}

// TestLiveFallback: with no event bus known to the dashboard, a stream
// refreshes every liveFallback even though nothing is published — not
// never, and not every check.
func TestLiveFallback(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	viewer := b.signIn(t, docket.RoleViewer)
	events := viewer.stream(t, "/overview/events")
	window := time.After(liveFallback + liveFallback/2)
	n := 0
	for done := false; !done; {
		select {
		case _, ok := <-events:
			require.True(t, ok, "the stream ended")
			n++
		case <-window:
			done = true
		}
	}
	// One at the first check, one liveFallback later; a check every
	// second would give 7.
	require.GreaterOrEqual(t, n, 1)
	require.LessOrEqual(t, n, 3)
}

// TestBrowserRunLive drives chromium on a run page while its steps
// finish: the DAG's nodes change colour without a reload, through the
// event stream (data-live-mode stays "sse": no polling fallback).
func TestBrowserRunLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := liveSetup(t, testdb.Backends()[0])
	bctx, messages := headless(t)
	shots := screenshotDir(t)
	putWorkflow(t, b.client, fanFlow)
	started, err := b.client.RunStart(ctx, "fan", map[string]any{"items": []int{1, 2}}, nil)
	require.NoError(t, err)
	runURL := b.server.URL + "/runs/" + started.Run.ID.String()
	fill := func(step string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](fmt.Sprintf(`getComputedStyle(document.querySelector('svg#dag g[data-step="%s"] rect')).fill`, step)))
		require.NoError(t, err)
		return v
	}
	waitFill := func(step, rgb string) {
		t.Helper()
		_, err := chromedp.Run(bctx, chromedp.Poll[bool](fmt.Sprintf(
			`getComputedStyle(document.querySelector('svg#dag g[data-step="%s"] rect')).fill === %q`, step, rgb),
			chromedp.WithPollingTimeout(20*time.Second)))
		require.NoError(t, err, "step %s did not turn %s (it is %s)", step, rgb, fill(step))
	}
	const (
		running   = "rgb(246, 201, 131)"
		succeeded = "rgb(159, 213, 178)"
		pending   = "rgb(227, 230, 236)"
		failed    = "rgb(239, 154, 154)"
	)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(runURL),
		signIn(b.keys[docket.RoleViewer]),
		chromedp.WaitVisible(chromedp.CSS(`svg#dag g[data-step="split"] rect`)),
	))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("run-live").dataset.liveMode === "sse"`,
		chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the stream connected")
	require.NoError(t, chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`)))
	require.Equal(t, running, fill("split"))
	require.Equal(t, pending, fill("each"))

	split := leaseWF(t, b.client, 1)[0]
	require.NoError(t, b.client.LeaseComplete(ctx, split.ID, json.RawMessage(`{}`)))
	waitFill("split", succeeded)
	waitFill("each", running)
	require.NoError(t, chromedp.Do(bctx, screenshot(shots, "run-live")))

	ls := leaseWF(t, b.client, 2)
	require.NoError(t, b.client.LeaseComplete(ctx, ls[0].ID, json.RawMessage(`{}`)))
	_, err = b.client.LeaseFail(ctx, ls[1].ID, "disk full", false)
	require.NoError(t, err)
	waitFill("each", failed)
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("run-state").textContent === "FAILED"`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err, "the run's state updated live")
	require.NoError(t, chromedp.Do(bctx, screenshot(shots, "web-run")))

	same, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.notReloaded === true`))
	require.NoError(t, err)
	require.True(t, same, "the page was not reloaded")
	mode, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("run-live").dataset.liveMode`))
	require.NoError(t, err)
	require.Equal(t, "sse", mode, "updated by the stream, never by polling")
	for _, m := range messages() {
		require.NotContains(t, m, "Content Security Policy", "the pages must run under the CSP")
		require.False(t, strings.HasPrefix(m, "exception") || strings.HasPrefix(m, "error"), m)
	}
}

// TestLiveStreamEndsWithSession: signing out ends the session's open
// streams (within a check, a second), as it would refuse their requests.
func TestLiveStreamEndsWithSession(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	viewer := b.signIn(t, docket.RoleViewer)
	events := viewer.stream(t, "/overview/events")
	require.Equal(t, http.StatusSeeOther, viewer.post(t, "/signout", nil).Status)
	deadline := time.After(3 * liveFallback)
	for {
		select {
		case _, ok := <-events:
			if !ok {
				return // ended
			}
		case <-deadline:
			t.Fatal("the stream outlived its session")
		}
	}
}

// TestLiveStreamEndsWithExpiryOrRevokedKey: a live stream ends when its
// session expires and when its API key is revoked (at the next re-check
// of the key), as any request of the session would be refused.
func TestLiveStreamEndsWithExpiryOrRevokedKey(t *testing.T) {
	t.Parallel()
	ended := func(t *testing.T, events <-chan sseEvent, what string) {
		t.Helper()
		deadline := time.After(3 * liveFallback)
		for {
			select {
			case _, ok := <-events:
				if !ok {
					return
				}
			case <-deadline:
				t.Fatalf("the stream outlived its session (%s)", what)
			}
		}
	}
	t.Run("Expiry", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testdb.Backends()[0])
		events := b.signIn(t, docket.RoleViewer).stream(t, "/overview/events")
		b.clock.Add(SessionTTLDefault + time.Second)
		ended(t, events, "expired")
	})
	t.Run("RevokedKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testdb.Backends()[0])
		secret, key, err := b.client.CreateAPIKey(context.Background(), "revoked", docket.RoleViewer)
		require.NoError(t, err)
		b.keys[docket.RoleViewer] = secret
		events := b.signIn(t, docket.RoleViewer).stream(t, "/overview/events")
		require.NoError(t, b.client.RevokeAPIKey(context.Background(), key.ID))
		b.clock.Add(recheckKeyEvery)
		ended(t, events, "key revoked")
	})
}

// TestLiveStreamsPerSession: a session holds at most
// liveStreamsPerSession live streams at once; one more is refused with
// 429 and Retry-After (its page polls instead) while the open ones go
// on; closing one frees its place; another session of the same key has
// its own.
func TestLiveStreamsPerSession(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	viewer := b.signIn(t, docket.RoleViewer)
	open := func(br *browser) (*http.Response, func()) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, "GET", br.b.server.URL+"/overview/events", nil)
		require.NoError(t, err)
		res, err := br.http.Do(req)
		require.NoError(t, err)
		closed := false
		end := func() {
			if !closed {
				closed = true
				cancel()
				res.Body.Close()
			}
		}
		t.Cleanup(end)
		return res, end
	}
	var ends []func()
	for range liveStreamsPerSession {
		res, end := open(viewer)
		require.Equal(t, http.StatusOK, res.StatusCode)
		ends = append(ends, end)
	}
	res, _ := open(viewer)
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	require.Equal(t, "5", res.Header.Get("Retry-After"))
	body := make([]byte, 200)
	n, _ := res.Body.Read(body)
	require.Contains(t, string(body[:n]), fmt.Sprintf("this session has %d live streams open", liveStreamsPerSession))
	// A run's stream counts against the same cap.
	require.Equal(t, http.StatusTooManyRequests, viewer.get(t, "/runs/0190c6a4-0000-7000-8000-000000000000/events").Status)

	other := b.signIn(t, docket.RoleViewer)
	res, _ = open(other)
	require.Equal(t, http.StatusOK, res.StatusCode, "another session of the key has its own streams")

	ends[0]()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, end := open(viewer)
		if res.StatusCode == http.StatusOK {
			break
		}
		end()
		require.True(t, time.Now().Before(deadline), "the closed stream's place was not freed")
		time.Sleep(10 * time.Millisecond) // polling for the server to see the close, with a deadline
	}
}
