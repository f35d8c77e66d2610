package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// Defaults of the SSE streams (Config.EventHeartbeat, Config.EventPoll).
const (
	eventHeartbeatDefault = 15 * time.Second
	eventPollDefault      = time.Second
	// eventWriteTimeoutDefault: a client that has not taken a write in
	// this long is cut off (it resumes with Last-Event-ID).
	eventWriteTimeoutDefault = 30 * time.Second
	// eventPage bounds the outbox rows one read of the history takes.
	eventPage = 500
	// eventKeyCheck: how often an open stream looks whether its key still
	// works. The look is answered by the key cache, read again from the
	// database every authCacheTTL, so a revoked key's streams end within
	// that and this.
	eventKeyCheck = time.Second
	// lastEventIDParam is the query form of the Last-Event-ID header, for
	// clients that cannot set headers on their first request.
	lastEventIDParam = "lastEventId"
)

func (s *Server) eventRoutes() []route {
	return []route{
		{Method: "GET", Path: "/v1/events", Perm: permRead, Query: []string{"types", lastEventIDParam, "jobId"}, Lists: []string{"types"}, Handler: http.HandlerFunc(s.streamEvents)},
		{Method: "GET", Path: "/v1/jobs/{jobId}/events", Perm: permRead, Query: []string{"types", lastEventIDParam}, Lists: []string{"types"}, Handler: http.HandlerFunc(s.streamJobEvents)},
	}
}

// streamEvents serves GET /v1/events?types=…&jobId=…: every event from
// now on (or, with Last-Event-ID, right after that one), as Server-Sent
// Events.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) {
	q, pending := query(r)
	var carries []string // every type, or a job's when one is asked for
	if q.Get("jobId") != "" {
		carries = jobEventTypes
	}
	f, err := eventFilter(q, carries)
	if id := q.Get("jobId"); id != "" {
		var perr error
		if f.JobID, perr = uuid.Parse(id); perr != nil {
			err = errors.Join(err, invalidField("jobId", "must be a job id (UUID)"))
		}
	}
	if err = errors.Join(queryErrors(pending), err, checkLastEventID(r, q)); err != nil {
		s.fail(w, r, err)
		return
	}
	s.stream(w, r, f, func(ctx context.Context, h *docket.EventHistory) (docket.EventCursor, error) { return h.Tail(ctx) })
}

// streamJobEvents serves GET /v1/jobs/{jobId}/events: one job's state
// changes and progress, from the oldest kept (or after Last-Event-ID).
func (s *Server) streamJobEvents(w http.ResponseWriter, r *http.Request) {
	q, pending := query(r)
	id, err := uuid.Parse(r.PathValue("jobId"))
	if err != nil {
		err = invalidField("jobId", "must be a job id (UUID)")
	}
	f, ferr := eventFilter(q, jobEventTypes)
	if err = errors.Join(queryErrors(pending), err, ferr, checkLastEventID(r, q)); err != nil {
		s.fail(w, r, err)
		return
	}
	if _, err := s.client.Get(r.Context(), id); err != nil {
		s.fail(w, r, err)
		return
	}
	f.JobID = id
	s.stream(w, r, f, func(context.Context, *docket.EventHistory) (docket.EventCursor, error) {
		return docket.EventCursor{}, nil
	})
}

// lastEventID is the event a client resumes after: the Last-Event-ID
// header, or the lastEventId query parameter; "" for none. field names
// where it came from. q is r's query.
func lastEventID(r *http.Request, q url.Values) (id, field string) {
	if id = r.Header.Get("Last-Event-ID"); id != "" {
		return id, "Last-Event-ID"
	}
	return q.Get(lastEventIDParam), lastEventIDParam
}

// checkLastEventID refuses a malformed Last-Event-ID, naming the header
// or parameter it came in.
func checkLastEventID(r *http.Request, q url.Values) error {
	id, field := lastEventID(r, q)
	if id == "" {
		return nil
	}
	if err := docket.CheckEventID(id); err != nil {
		return invalidField(field, err.Error())
	}
	return nil
}

// The event types of one job's stream and of one workflow run's: the
// events whose subject is the job (jobs/<id>) or the run (runs/<id>).
var (
	jobEventTypes = []string{"job.state_changed", "job.progress"}
	runEventTypes = []string{"run.state_changed", "step.state_changed"}
)

// eventFilter reads ?types=a,b (a list: comma-separated or repeated). An
// unknown type is refused, as webhook subscriptions refuse it, rather than
// streaming nothing forever; so is a type the stream never carries
// (carries: the types of one job's or run's stream; nil: every type),
// such as unit.finalized on a job's stream. (A parameter the stream does
// not take is refused by its route, rather than streaming what it did
// not ask for.)
func eventFilter(q url.Values, carries []string) (docket.EventFilter, error) {
	var f docket.EventFilter
	var bad []error
	var unknown, elsewhere []string
	for _, t := range splitList(q["types"]) {
		switch {
		case !slices.Contains(docket.WebhookEventTypes(), t):
			unknown = append(unknown, fmt.Sprintf("%q", t))
		case carries != nil && !slices.Contains(carries, t):
			elsewhere = append(elsewhere, fmt.Sprintf("%q", t))
		default:
			f.Types = append(f.Types, t)
		}
	}
	if len(unknown) > 0 {
		bad = append(bad, invalidField("types", fmt.Sprintf("%s: not an event type; known: %s", strings.Join(unknown, ", "), strings.Join(docket.WebhookEventTypes(), ", "))))
	}
	if len(elsewhere) > 0 {
		bad = append(bad, invalidField("types", fmt.Sprintf("%s: never in this stream, which carries only %s", strings.Join(elsewhere, ", "), strings.Join(carries, ", "))))
	}
	return f, errors.Join(bad...)
}

// stream writes the history after the start cursor (or after the event of
// Last-Event-ID) as SSE, then new events as they are published, until the
// client goes or the server shuts down.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, f docket.EventFilter, start func(context.Context, *docket.EventHistory) (docket.EventCursor, error)) {
	ctx := r.Context()
	h := s.client.EventHistory()
	// Subscribed before the start is read: nothing published after it is
	// missed.
	wake, unsubscribe := h.Wake()
	defer unsubscribe()

	var cur docket.EventCursor
	var err error
	// None pending: the stream's handler answered them.
	q, _ := query(r)
	if last, _ := lastEventID(r, q); last != "" { // checked by checkLastEventID
		cur, err = h.After(ctx, last)
		if errors.Is(err, docket.ErrEventNotInHistory) {
			err = problem(http.StatusGone, "event-gone", "Event not in the history",
				fmt.Sprintf("event %s is not in the event history (pruned after the retention period, or never published): resuming after it would leave a gap", last))
		}
	} else {
		cur, err = start(ctx, h)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Each open stream reads the history at every wake-up and poll: a key
	// may hold only so many at once.
	if k := principal(ctx); k != nil {
		if !s.streams.open(k.ID, s.cfg.MaxStreamsPerKey) {
			writeProblem(w, problem(http.StatusTooManyRequests, "too-many-streams", "Too many event streams",
				fmt.Sprintf("this API key has %d event streams open on this server, the most it may: close one first", s.cfg.MaxStreamsPerKey)))
			return
		}
		defer s.streams.close(k.ID)
	}

	rc := http.NewResponseController(w)
	// A client that stops reading must not hold its stream, and the
	// server's shutdown, forever: every write has EventWriteTimeout to go
	// through, and the request's end (the client gone, the server
	// shutting down) cuts a write that is stuck.
	writeTimeout := orDefault(s.cfg.EventWriteTimeout, eventWriteTimeoutDefault)
	extend := func() { _ = rc.SetWriteDeadline(time.Now().Add(writeTimeout)) }
	stopCut := context.AfterFunc(ctx, func() { _ = rc.SetWriteDeadline(time.Now()) })
	defer stopCut()
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no") // no buffering in nginx
	// The connection ends with the stream: the write deadlines set below
	// must not outlive it on a connection kept alive for another request.
	hd.Set("Connection", "close")
	extend()
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 1000\n\n"); err != nil || rc.Flush() != nil {
		return
	}

	heartbeat := time.NewTicker(orDefault(s.cfg.EventHeartbeat, eventHeartbeatDefault))
	defer heartbeat.Stop()
	poll := time.NewTicker(orDefault(s.cfg.EventPoll, eventPollDefault))
	defer poll.Stop()
	secret, _ := bearer(r) // the route's authorization checked it
	checked := time.Now()
	for {
		// A key revoked ends its streams as it ends its other calls: an
		// open stream would otherwise go on for as long as its client.
		// A check that cannot be made (the database failing) ends
		// nothing. The address's limit on failed authentications plays
		// no part (recheckKey).
		if time.Since(checked) >= eventKeyCheck {
			checked = time.Now()
			if _, err := s.recheckKey(ctx, secret); err != nil && ctx.Err() == nil && problemFor(err).Status < 500 {
				return
			}
		}
		evs, next, err := h.Read(ctx, cur, f, eventPage)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("read event history failed; ending the stream", "path", r.URL.Path, "error", err)
			}
			return // the client reconnects with Last-Event-ID
		}
		for i := range evs {
			extend()
			if err := writeEvent(w, &evs[i]); err != nil {
				return
			}
		}
		if len(evs) > 0 && rc.Flush() != nil {
			return
		}
		if next != cur {
			cur = next
			continue // more may follow at once
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-poll.C:
		case <-heartbeat.C:
			extend()
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// writeEvent writes one SSE event: id, type, and the envelope as data
// (JSON on one line).
func writeEvent(w http.ResponseWriter, ev *docket.Event) error {
	data, err := json.Marshal(ev) // compact: one line
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", ev.ID, ev.Type, data)
	return err
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// streamCounts counts the event streams open on this server, by API key.
type streamCounts struct {
	mu    sync.Mutex
	byKey map[uuid.UUID]int
}

// open counts one more stream of key unless it has max open already.
func (c *streamCounts) open(key uuid.UUID, max int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey[key] >= max {
		return false
	}
	if c.byKey == nil {
		c.byKey = map[uuid.UUID]int{}
	}
	c.byKey[key]++
	return true
}

// close counts one stream of key fewer.
func (c *streamCounts) close(key uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey[key]--; c.byKey[key] <= 0 {
		delete(c.byKey, key)
	}
}
