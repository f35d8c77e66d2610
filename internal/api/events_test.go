package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/natsembed"
)

// getWithin is a GET as role that must be answered whole within 5 s: a
// stream opened where a 400 was due fails the test instead of holding it.
func (b *bundle) getWithin(t *testing.T, role docket.Role, path string) *response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", b.server.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+b.keys[role])
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err, "%s answered %d and kept streaming", path, res.StatusCode)
	return &response{Status: res.StatusCode, Header: res.Header, Body: data}
}

// sseEvent is one event of a stream; Comment is set for comment lines.
type sseEvent struct {
	ID, Event, Data string
	Comment         string
}

// sseStream reads a text/event-stream response in a goroutine.
type sseStream struct {
	res    *http.Response
	events chan sseEvent
}

// stream opens an SSE stream as role and requires 200.
func (b *bundle) stream(t *testing.T, role docket.Role, path string, headers ...string) *sseStream {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", b.server.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+b.keys[role])
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	require.True(t, res.Close, "the connection ends with the stream")
	s := &sseStream{res: res, events: make(chan sseEvent, 1000)}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(res.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				s.events <- sseEvent{Comment: strings.TrimSpace(line[1:])}
			default:
				k, v, _ := strings.Cut(line, ": ")
				switch k {
				case "id":
					ev.ID = v
				case "event":
					ev.Event = v
				case "data":
					ev.Data = v
				}
			}
		}
	}()
	t.Cleanup(s.Close)
	return s
}

// Close disconnects.
func (s *sseStream) Close() { _ = s.res.Body.Close() }

// read returns the next n events (comments skipped), failing after 30 s.
func (s *sseStream) read(t *testing.T, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	deadline := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-s.events:
			require.True(t, ok, "stream ended after %d of %d events", len(out), n)
			if ev.Comment == "" {
				out = append(out, ev)
			}
		case <-deadline:
			t.Fatalf("only %d of %d events within 30 s", len(out), n)
		}
	}
	return out
}

// eventsBundle is an API server whose outbox is relayed to a real
// (embedded) NATS JetStream bus.
func eventsSetup(t *testing.T, backend testdb.Backend, opts ...option) *bundle {
	t.Helper()
	opts = append(opts, func(c *Config) { c.EventPoll = 50 * time.Millisecond })
	b := setup(t, backend, opts...)
	srv, err := natsembed.Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	bus, err := docket.OpenEventBus(t.Context(), docket.EventBusConfig{Embedded: srv})
	require.NoError(t, err)
	t.Cleanup(bus.Close)
	relay := b.client.NewEventRelay(bus, docket.EventRelayConfig{PollInterval: 10 * time.Millisecond})
	require.NoError(t, relay.Start(context.WithoutCancel(t.Context())))
	t.Cleanup(relay.Stop)
	return b
}

// history is every published event, in publish order, that f selects.
func (b *bundle) history(t *testing.T, f docket.EventFilter) []docket.Event {
	t.Helper()
	h := b.client.EventHistory()
	var out []docket.Event
	cur := docket.EventCursor{}
	for {
		evs, next, err := h.Read(t.Context(), cur, f, 100)
		require.NoError(t, err)
		out = append(out, evs...)
		if next == cur {
			return out
		}
		cur = next
	}
}

// waitPublished waits until the relay has published everything.
func (b *bundle) waitPublished(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := b.client.UnpublishedEventRows(t.Context())
		require.NoError(t, err)
		if n == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d outbox rows still unpublished", n)
		time.Sleep(10 * time.Millisecond)
	}
}

type sseJob struct{}

func (sseJob) JobType() string { return "sse_test" }

// makeEvents inserts n jobs one by one and cancels every other one: 1.5n
// events.
func (b *bundle) makeEvents(t *testing.T, n int) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for i := range n {
		res, err := b.client.Insert(t.Context(), sseJob{}, nil)
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
		if i%2 == 0 {
			_, err := b.client.Cancel(t.Context(), res.Job.ID)
			require.NoError(t, err)
		}
	}
	return ids
}

func requireEnvelope(t *testing.T, want docket.Event, got sseEvent) {
	t.Helper()
	require.Equal(t, want.ID, got.ID)
	require.Equal(t, want.Type, got.Event)
	var env docket.Event
	require.NoError(t, json.Unmarshal([]byte(got.Data), &env))
	require.Equal(t, want.ID, env.ID)
	require.Equal(t, want.Subject, env.Subject)
	require.JSONEq(t, string(want.Data), string(env.Data))
	require.WithinDuration(t, want.OccurredAt, env.OccurredAt, time.Millisecond)
}

func TestSSEResumeWithoutGapsOrDuplicates(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := eventsSetup(t, backend)
		first := b.stream(t, docket.RoleViewer, "/v1/events")
		b.makeEvents(t, 10) // 15 events
		seen := first.read(t, 7)
		first.Close() // gone mid-stream
		b.makeEvents(t, 10)
		b.waitPublished(t)

		second := b.stream(t, docket.RoleViewer, "/v1/events", "Last-Event-ID", seen[len(seen)-1].ID)
		seen = append(seen, second.read(t, 30-len(seen))...)
		want := b.history(t, docket.EventFilter{})
		require.Len(t, want, 30)
		require.Len(t, seen, len(want))
		for i := range want {
			requireEnvelope(t, want[i], seen[i])
		}
		// And live: new events arrive on the open stream.
		b.makeEvents(t, 1)
		live := second.read(t, 2)
		want = b.history(t, docket.EventFilter{})
		requireEnvelope(t, want[30], live[0])
		requireEnvelope(t, want[31], live[1])
	})
}

func TestSSEResumeInsideARow(t *testing.T) {
	t.Parallel()
	b := eventsSetup(t, testdb.Backends()[0])
	var batch []docket.InsertParams
	for range 5 {
		batch = append(batch, docket.InsertParams{Args: sseJob{}})
	}
	_, err := b.client.InsertMany(t.Context(), batch) // one row, five events
	require.NoError(t, err)
	b.makeEvents(t, 2)
	b.waitPublished(t)
	want := b.history(t, docket.EventFilter{})
	require.Len(t, want, 8)
	require.True(t, strings.HasSuffix(want[1].ID, "-1"), "the batch is one row: %s", want[1].ID)
	// Resume after the second event of the batch's row, by query parameter.
	s := b.stream(t, docket.RoleAdmin, "/v1/events?lastEventId="+want[1].ID)
	got := s.read(t, 6)
	for i := range got {
		requireEnvelope(t, want[2+i], got[i])
	}
}

func TestSSEFilters(t *testing.T) {
	t.Parallel()
	b := eventsSetup(t, testdb.Backends()[0])
	ids := b.makeEvents(t, 4)
	b.waitPublished(t)
	all := b.history(t, docket.EventFilter{})
	require.Len(t, all, 6)

	// One job: its whole kept history, then nothing else.
	job := b.stream(t, docket.RoleViewer, "/v1/jobs/"+ids[0].String()+"/events")
	want := b.history(t, docket.EventFilter{JobID: ids[0]})
	require.Len(t, want, 2, "inserted and canceled")
	got := job.read(t, 2)
	for i := range got {
		requireEnvelope(t, want[i], got[i])
		require.Equal(t, "jobs/"+ids[0].String(), want[i].Subject)
	}
	// Types and job id on the whole stream, from the start (the first
	// event's id as Last-Event-ID resumes after it).
	s := b.stream(t, docket.RoleViewer, "/v1/events?types=job.state_changed&jobId="+ids[2].String(), "Last-Event-ID", all[0].ID)
	want = b.history(t, docket.EventFilter{JobID: ids[2]})
	got = s.read(t, 2)
	for i := range got {
		requireEnvelope(t, want[i], got[i])
	}
	// Later events of other jobs do not show on the job's stream.
	b.makeEvents(t, 2)
	_, err := b.client.Retry(t.Context(), ids[0]) // CANCELED -> QUEUED
	require.NoError(t, err)
	b.waitPublished(t)
	got = job.read(t, 1)
	want = b.history(t, docket.EventFilter{JobID: ids[0]})
	requireEnvelope(t, want[2], got[0])
	progress := b.history(t, docket.EventFilter{Types: []string{"job.progress"}})
	require.Empty(t, progress)
}

func TestSSEHeartbeat(t *testing.T) {
	t.Parallel()
	b := eventsSetup(t, testdb.Backends()[0], func(c *Config) { c.EventHeartbeat = 20 * time.Millisecond })
	s := b.stream(t, docket.RoleViewer, "/v1/events")
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev := <-s.events:
			if ev.Comment == "heartbeat" {
				return
			}
		case <-deadline:
			t.Fatal("no heartbeat")
		}
	}
}

func TestSSEErrors(t *testing.T) {
	t.Parallel()
	b := eventsSetup(t, testdb.Backends()[0])
	ids := b.makeEvents(t, 1)
	b.waitPublished(t)
	all := b.history(t, docket.EventFilter{})

	p := b.do(t, docket.RoleViewer, "GET", "/v1/events", nil, "Last-Event-ID", "nope").Problem(t, http.StatusBadRequest)
	require.Equal(t, "Last-Event-ID", p.Errors[0].Field)
	p = b.do(t, docket.RoleViewer, "GET", "/v1/events", nil, "Last-Event-ID", "999999-0").Problem(t, http.StatusGone)
	require.Contains(t, p.Detail, "999999-0")
	p = b.do(t, docket.RoleViewer, "GET", "/v1/events?types=job.state_changed,Bad%20Type", nil).Problem(t, http.StatusBadRequest)
	require.Equal(t, "types", p.Errors[0].Field)
	p = b.do(t, docket.RoleViewer, "GET", "/v1/events?jobId=42", nil).Problem(t, http.StatusBadRequest)
	require.Equal(t, "jobId", p.Errors[0].Field)
	// A misspelt or repeated parameter is refused, not ignored (which
	// streamed every event): every bad one is named, with the bad values
	// (types=x) in the same problem, after them.
	p = b.do(t, docket.RoleViewer, "GET", "/v1/events?type=job.progress&jobId=42&jobId=43&types=x", nil).Problem(t, http.StatusBadRequest)
	require.Equal(t, []string{"jobId", "type", "types"}, problemFields(p), p.Detail)
	p = b.do(t, docket.RoleViewer, "GET", "/v1/jobs/"+ids[0].String()+"/events?jobId="+ids[0].String(), nil).Problem(t, http.StatusBadRequest)
	require.Equal(t, []string{"jobId"}, problemFields(p), p.Detail)
	p = b.do(t, docket.RoleViewer, "GET", "/v1/events?lastEventId=1-0&lastEventId=2-0", nil).Problem(t, http.StatusBadRequest)
	require.Equal(t, []string{"lastEventId"}, problemFields(p), p.Detail)
	// A malformed Last-Event-ID is named with the others, as it was given.
	p = b.do(t, docket.RoleViewer, "GET", "/v1/events?types=nope&jobId=42&lastEventId=x", nil).Problem(t, http.StatusBadRequest)
	require.ElementsMatch(t, []string{"types", "jobId", "lastEventId"}, problemFields(p), p.Detail)
	p = b.do(t, docket.RoleViewer, "GET", "/v1/jobs/42/events?types=nope", nil, "Last-Event-ID", "x").Problem(t, http.StatusBadRequest)
	require.ElementsMatch(t, []string{"jobId", "types", "Last-Event-ID"}, problemFields(p), p.Detail)
	// A type the stream never carries streamed nothing, for ever.
	p = b.getWithin(t, docket.RoleViewer, "/v1/jobs/"+ids[0].String()+"/events?types=job.progress,unit.finalized").Problem(t, http.StatusBadRequest)
	require.Equal(t, []string{"types"}, problemFields(p), p.Detail)
	require.Contains(t, p.Detail, `"unit.finalized": never in this stream, which carries only job.state_changed, job.progress`)
	p = b.getWithin(t, docket.RoleViewer, "/v1/events?jobId="+ids[0].String()+"&types=run.state_changed").Problem(t, http.StatusBadRequest)
	require.Equal(t, []string{"types"}, problemFields(p), p.Detail)
	b.do(t, docket.RoleViewer, "GET", "/v1/jobs/42/events", nil).Problem(t, http.StatusBadRequest)
	b.do(t, docket.RoleViewer, "GET", "/v1/jobs/"+uuid.Must(uuid.NewV7()).String()+"/events", nil).Problem(t, http.StatusNotFound)
	b.do(t, docket.RoleViewer, "GET", "/v1/jobs/"+ids[0].String()+"/events", nil, "Last-Event-ID", "5-x").Problem(t, http.StatusBadRequest)
	b.do(t, docket.RoleWorker, "GET", "/v1/events", nil).Problem(t, http.StatusForbidden)
	b.do(t, "", "GET", "/v1/events", nil).Problem(t, http.StatusUnauthorized)
	b.do(t, docket.RoleViewer, "POST", "/v1/events", nil).Problem(t, http.StatusMethodNotAllowed)
	// The last event is a fine place to resume: the stream waits.
	s := b.stream(t, docket.RoleViewer, "/v1/events", "Last-Event-ID", all[len(all)-1].ID)
	b.makeEvents(t, 1)
	got := s.read(t, 2)
	all = b.history(t, docket.EventFilter{})
	requireEnvelope(t, all[len(all)-2], got[0])
}

func TestSSEEndsWithTheServer(t *testing.T) {
	t.Parallel()
	b := eventsSetup(t, testdb.Backends()[0])
	s := b.stream(t, docket.RoleViewer, "/v1/events")
	b.server.CloseClientConnections()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case _, ok := <-s.events:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the stream did not end")
		}
	}
}

func TestHealthReportsTheBus(t *testing.T) {
	t.Parallel()
	var busErr atomic.Pointer[error]
	b := setup(t, testdb.Backends()[0], func(c *Config) {
		c.BusHealth = func() error {
			if err := busErr.Load(); err != nil {
				return *err
			}
			return nil
		}
	})
	var h healthResponse
	r := b.do(t, "", "GET", "/healthz", nil)
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &h)
	require.Equal(t, "ok", h.Bus)
	require.Empty(t, h.BusDetail)

	down := errors.New("event bus is not connected")
	busErr.Store(&down)
	r = b.do(t, "", "GET", "/healthz", nil)
	require.Equal(t, http.StatusOK, r.Status, "the API works without the bus")
	h = healthResponse{}
	r.JSON(t, &h)
	require.Equal(t, "ok", h.Status)
	require.Equal(t, "degraded", h.Bus)
	require.Contains(t, h.BusDetail, "unreachable")
	require.NotContains(t, string(r.Body), "not connected", "the bus's own error stays in the log")

	// The relay failing on the database is not the bus being unreachable
	// (the bus may be up); the bus down as well is.
	for relayErr, want := range map[error]string{
		fmt.Errorf("outbox relay: %w", docket.ErrEventRelayDatabase):                                      "cannot read the outbox from the database",
		errors.Join(docket.ErrEventBusDown, fmt.Errorf("outbox relay: %w", docket.ErrEventRelayDatabase)): "the event bus is unreachable",
	} {
		busErr.Store(&relayErr)
		h = healthResponse{}
		b.do(t, "", "GET", "/healthz", nil).JSON(t, &h)
		require.Equal(t, "degraded", h.Bus)
		require.Contains(t, h.BusDetail, want, relayErr.Error())
	}

	// Without a bus configured, no bus field.
	plain := setup(t, testdb.Backends()[0])
	r = plain.do(t, "", "GET", "/healthz", nil)
	require.NotContains(t, string(r.Body), "bus")
}

// TestSSEStreamsPerKey: a key holds at most MaxStreamsPerKey streams open
// at once, of both kinds; one more is 429 naming the limit, other keys are
// not held back, and a stream closed frees its place.
func TestSSEStreamsPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0], func(c *Config) { c.MaxStreamsPerKey = 2; c.EventPoll = 20 * time.Millisecond })
	job := b.insertJob(t, "q", nil)
	// try opens a stream and reads its answer's status, and a problem's
	// detail, without reading a stream's body.
	try := func(path string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), "GET", b.server.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+b.keys[docket.RoleViewer])
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		var p Problem
		if res.StatusCode != http.StatusOK {
			require.NoError(t, json.NewDecoder(res.Body).Decode(&p))
		}
		return res.StatusCode, p.Detail
	}
	first := b.stream(t, docket.RoleViewer, "/v1/events")
	b.stream(t, docket.RoleViewer, "/v1/jobs/"+job.ID.String()+"/events")
	for _, path := range []string{"/v1/events", "/v1/jobs/" + job.ID.String() + "/events"} {
		status, detail := try(path)
		require.Equal(t, http.StatusTooManyRequests, status, path)
		require.Contains(t, detail, "2 event streams open")
	}
	b.stream(t, docket.RoleProducer, "/v1/events") // another key
	first.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, _ := try("/v1/events")
		if status == http.StatusOK {
			return
		}
		require.Equal(t, http.StatusTooManyRequests, status)
		require.True(t, time.Now().Before(deadline), "the closed stream's place was not freed")
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSSEEndsWhenItsKeyIsRevoked: a key revoked stops working within
// authCacheTTL, and that includes the event streams it holds open: once
// the cached answer is gone (cleared here instead of waited for), the
// revoked key's streams end, of both kinds, and another key's goes on.
func TestSSEEndsWhenItsKeyIsRevoked(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: testdb.Backends()[0].URL(t), AutoMigrate: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	// The revoked key's failures put the address (every stream's) over its
	// limit of failed authentications at once: the other key's stream
	// is not ended by that 429, which speaks of other keys.
	s := New(Config{Client: client, EventPoll: 20 * time.Millisecond, EventHeartbeat: 20 * time.Millisecond,
		AuthFailureLimit: 1.0 / 3600, AuthFailureBurst: 1})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	b := &bundle{client: client, server: srv, keys: map[docket.Role]string{}}
	secret, revoked, err := client.CreateAPIKey(ctx, "revoked", docket.RoleViewer)
	require.NoError(t, err)
	b.keys[docket.RoleViewer] = secret
	other, _, err := client.CreateAPIKey(ctx, "other", docket.RoleProducer)
	require.NoError(t, err)
	b.keys[docket.RoleProducer] = other
	job := b.insertJob(t, "q", nil)

	all := b.stream(t, docket.RoleViewer, "/v1/events")
	one := b.stream(t, docket.RoleViewer, "/v1/jobs/"+job.ID.String()+"/events")
	kept := b.stream(t, docket.RoleProducer, "/v1/events")
	require.NoError(t, client.RevokeAPIKey(ctx, revoked.ID))
	s.authMu.Lock()
	clear(s.authCache) // as after authCacheTTL
	s.authMu.Unlock()

	ended := func(st *sseStream) bool {
		deadline := time.After(10 * time.Second)
		for {
			select {
			case _, ok := <-st.events:
				if !ok {
					return true
				}
			case <-deadline:
				return false
			}
		}
	}
	require.True(t, ended(all), "the revoked key's stream of every event is still open")
	require.True(t, ended(one), "the revoked key's stream of a job is still open")
	// The other key's stream still sends its heartbeats, through a check
	// of its key made while the address is over its limit.
	s.authMu.Lock()
	clear(s.authCache)
	s.authMu.Unlock()
	until := time.After(3 * eventKeyCheck)
	for beats := 0; ; {
		select {
		case ev, ok := <-kept.events:
			require.True(t, ok, "another key's stream ended")
			if ev.Comment == "heartbeat" {
				beats++
			}
			continue
		case <-until:
			require.Positive(t, beats, "another key's stream sends no heartbeat")
		}
		break
	}
}
