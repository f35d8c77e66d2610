package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// Live updates. A page part that updates live (the overview's panel, a
// run page's DAG and steps) carries data-live-stream (an SSE URL) and
// data-live-fragment (the URL of its HTML); static/live.js opens the
// stream and, on each "refresh" message, fetches the fragment and swaps it
// in. The streams read docket's own event history (the one GET /v1/events
// and GET /v1/runs/{id}/events serve, fed by the outbox relay) with the
// session's authority, and say only "something changed": the page then
// asks for the fragment like any other request.
const (
	// liveMinGap: a stream sends at most one refresh per liveMinGap, so a
	// view refreshes at most once a second however many events arrive.
	liveMinGap = time.Second
	// liveFallback: while no event can arrive (no event bus is known to
	// the dashboard, or it reports it is down) a stream sends a refresh
	// this often instead — polling, done by the server. live.js polls at
	// the same period when the stream itself fails.
	liveFallback = 5 * time.Second
	// liveHeartbeat keeps proxies from closing an idle stream.
	liveHeartbeat = 15 * time.Second
	// livePage bounds the history rows one check of a run's stream reads.
	livePage = 500
	// liveStreamsPerSession is how many live streams one dashboard
	// session may hold open at once (a tab holds one or two). One more is
	// refused with 429 (liveOneMore): its page polls instead (live.js
	// does when its stream fails), and the streams already open go on.
	liveStreamsPerSession = 8
)

// liveSlot wraps a live stream's handler: it takes one of the session's
// liveStreamsPerSession slots for as long as the stream is open, or
// answers 429 with Retry-After when none is free. Refusing the new
// stream rather than closing the oldest keeps the open ones steady: a
// closed stream's page reconnects by itself, which would close the next.
func (h *Handler) liveSlot(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss := sessionOf(r.Context())
		ss.liveMu.Lock()
		full := ss.live >= liveStreamsPerSession
		if !full {
			ss.live++
		}
		ss.liveMu.Unlock()
		if full {
			w.Header().Set("Retry-After", strconv.Itoa(int(liveFallback/time.Second)))
			http.Error(w, fmt.Sprintf("this session has %d live streams open, the most one session may hold: close a tab, or let this page poll", liveStreamsPerSession), http.StatusTooManyRequests)
			return
		}
		defer func() {
			ss.liveMu.Lock()
			ss.live--
			ss.liveMu.Unlock()
		}()
		next(w, r)
	}
}

// liveCheck reports whether anything the view shows may have changed since
// the last check; it keeps its own place in the history.
type liveCheck func(ctx context.Context) (bool, error)

// overviewEvents streams a refresh to the overview whenever events were
// published (any: job state changes are most of them).
func (h *Handler) overviewEvents(w http.ResponseWriter, r *http.Request) {
	hist := h.client.EventHistory()
	tail, err := hist.Tail(r.Context())
	if err != nil {
		http.Error(w, "reading the event history failed", http.StatusServiceUnavailable)
		return
	}
	h.liveStream(w, r, hist, func(ctx context.Context) (bool, error) {
		now, err := hist.Tail(ctx)
		if err != nil || now == tail {
			return false, err
		}
		tail = now
		return true, nil
	})
}

// runEvents streams a refresh to a run page whenever an event of the run
// (its state, a step's state) was published.
func (h *Handler) runEvents(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		http.Error(w, "not a run id", http.StatusNotFound)
		return
	}
	if _, err := h.client.RunGet(r.Context(), id); err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, docket.ErrNotFound) {
			status = http.StatusNotFound
		}
		http.Error(w, "no such run", status)
		return
	}
	hist := h.client.EventHistory()
	cur, err := hist.Tail(r.Context())
	if err != nil {
		http.Error(w, "reading the event history failed", http.StatusServiceUnavailable)
		return
	}
	f := docket.EventFilter{RunID: id}
	h.liveStream(w, r, hist, func(ctx context.Context) (bool, error) {
		changed := false
		for {
			evs, next, err := hist.Read(ctx, cur, f, livePage)
			if err != nil {
				return changed, err
			}
			changed = changed || len(evs) > 0
			if next == cur {
				return changed, nil
			}
			cur = next
		}
	})
}

// liveStream writes "event: refresh" whenever check says so, at most once
// per liveMinGap, and every liveFallback while events cannot arrive; it
// checks when the history may have moved (Wake) and at least every
// liveMinGap. It ends when the client goes or a check fails (the browser
// reconnects).
func (h *Handler) liveStream(w http.ResponseWriter, r *http.Request, hist *docket.EventHistory, check liveCheck) {
	ctx := r.Context()
	ss := sessionOf(ctx)
	wake, unsubscribe := hist.Wake()
	defer unsubscribe()
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(s string) bool {
		_, err := fmt.Fprint(w, s)
		return err == nil && rc.Flush() == nil
	}
	// retry: how long the browser waits before reconnecting.
	if !send("retry: 2000\n\n") {
		return
	}
	tick := time.NewTicker(liveMinGap)
	defer tick.Stop()
	heartbeat := time.NewTicker(liveHeartbeat)
	defer heartbeat.Stop()
	// The pace is wall time (time.Since), not Config.Now: it limits load,
	// whatever the clock of the data says.
	var lastSent time.Time
	pending := false // a change seen, not sent yet (within liveMinGap of the last)
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if !send(": heartbeat\n\n") {
				return
			}
			continue
		case <-wake:
		case <-tick.C:
		}
		// The stream ends with its session (signed out, expired, the key
		// revoked), as any request of it would be refused.
		if !h.sessionLive(ctx, ss) {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, dashboardTimeout)
		changed, err := check(cctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				h.cfg.Logger.Warn("web: live stream check failed; ending the stream", "path", r.URL.Path, "error", err)
			}
			return
		}
		pending = pending || changed || (!h.eventsFlow() && time.Since(lastSent) >= liveFallback)
		if pending && time.Since(lastSent) >= liveMinGap {
			if !send("event: refresh\ndata: {}\n\n") {
				return
			}
			lastSent, pending = time.Now(), false
		}
	}
}

// sessionLive reports whether ss is still a live session: not deleted
// (signed out), not expired, its key still valid (re-checked as every
// request re-checks it).
func (h *Handler) sessionLive(ctx context.Context, ss *session) bool {
	h.sessions.mu.Lock()
	live := h.sessions.byID[ss.id] == ss && h.cfg.Now().Before(ss.expires)
	h.sessions.mu.Unlock()
	return live && h.stillValid(ctx, ss)
}

// eventsFlow reports whether events are being published: an event bus is
// configured (Config.BusHealth) and healthy.
func (h *Handler) eventsFlow() bool {
	return h.cfg.BusHealth != nil && h.cfg.BusHealth() == nil
}

// busHealth is the overview's line on the event bus: "" when none is
// known, "up", or the error.
func (h *Handler) busHealth() string {
	if h.cfg.BusHealth == nil {
		return ""
	}
	if err := h.cfg.BusHealth(); err != nil {
		return err.Error()
	}
	return "up"
}

// runLive is the live part of a run page, as live.js fetches it.
func (h *Handler) runLive(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), dashboardTimeout)
	defer cancel()
	d, status, msg, err := h.runPageData(r.WithContext(ctx))
	if d == nil {
		h.renderNoData(w, r, status, msg, err)
		return
	}
	h.render(w, http.StatusOK, "run", "live", &view{User: userOf(sessionOf(r.Context())), Data: d})
}
