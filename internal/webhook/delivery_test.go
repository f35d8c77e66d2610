package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/events"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// A receiver failing its first 3 deliveries gets every event eventually,
// each signed with its secret.
func TestDeliveredAfterFailures(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		rc := newReceiver(t, func(n int, _ *http.Request) int {
			if n <= 3 {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		})
		w := b.subscribe(t, rc.srv.URL+"/hook")
		b.start(t)
		b.insertJobs(t, 3)
		b.insertJobs(t, 2)
		want := b.eventIDs(t)
		require.Len(t, want, 5)

		ds := b.waitStates(t, w, 5, store.DeliveryDelivered)
		attempts := 0
		for _, d := range ds {
			attempts += d.Attempts
			require.Equal(t, http.StatusOK, d.LastStatusCode)
			require.Empty(t, d.LastError)
			require.False(t, d.FinishedAt.IsZero())
		}
		require.Equal(t, 5+3, attempts, "three failed attempts, then one each")

		got := map[string]int{}
		for _, r := range rc.requests() {
			require.NoError(t, Verify(testSecret, r.Header.Get(HeaderSignature), r.Header.Get(HeaderTimestamp), r.Body),
				"every delivery is signed with the subscription's secret")
			require.Error(t, Verify("wrong-secret-wrong-secret", r.Header.Get(HeaderSignature), r.Header.Get(HeaderTimestamp), r.Body),
				"a wrong secret fails verification")
			ts, err := strconv.ParseInt(r.Header.Get(HeaderTimestamp), 10, 64)
			require.NoError(t, err)
			require.WithinDuration(t, time.Now(), time.Unix(ts, 0), time.Minute)
			require.Equal(t, "application/json", r.Header.Get("Content-Type"))
			require.Equal(t, "job.state_changed", r.Header.Get(HeaderEventType))
			require.NotEmpty(t, r.Header.Get(HeaderDeliveryID))
			id := r.Header.Get(HeaderEventID)
			require.Contains(t, string(r.Body), `"id":"`+id+`"`, "the body is the event's envelope")
			got[id]++
		}
		var gotIDs []string
		for id := range got {
			gotIDs = append(gotIDs, id)
		}
		require.ElementsMatch(t, want, gotIDs, "every event arrived")
	})
}

// Running the fan-out twice, or two dispatchers at once, inserts each
// delivery once.
func TestFanOutIdempotent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		other, err := New(testConfig(b.st))
		require.NoError(t, err)
		w1 := b.subscribe(t, "http://127.0.0.1:1/a")
		w2, err := b.svc.Create(b.ctx, CreateParams{URL: "http://127.0.0.1:1/b", EventTypes: []string{"job.progress"}, Secret: testSecret})
		require.NoError(t, err)
		for range 4 {
			b.insertJobs(t, 3)
		}

		var wg sync.WaitGroup
		counts := make([]int, 2)
		for i, svc := range []*Service{b.svc, other} {
			wg.Go(func() {
				n, err := svc.FanOut(b.ctx)
				if err != nil {
					t.Error(err)
				}
				counts[i] = n
			})
		}
		wg.Wait()
		require.Equal(t, 12, counts[0]+counts[1], "one delivery per event to the subscription of every type")
		n, err := b.svc.FanOut(b.ctx)
		require.NoError(t, err)
		require.Zero(t, n, "a second pass finds nothing to do")

		ds := b.deliveries(t, w1)
		require.Len(t, ds, 12)
		var ids []string
		for _, d := range ds {
			ids = append(ids, d.EventID)
		}
		require.ElementsMatch(t, b.eventIDs(t), ids)
		require.Empty(t, b.deliveries(t, w2), "job.progress only")

		b.insertJobs(t, 1)
		n, err = other.FanOut(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "new rows only")
	})
}

// With no subscription, a new outbox row is left to the relay (which
// marks it fanned out as it publishes it) and one older than
// noSubscriberGrace is marked here; a subscription made meanwhile gets
// the rows left.
func TestFanOutWithoutSubscriberLeavesNewRowsToTheRelay(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		var now atomic.Int64
		now.Store(time.Now().UnixNano())
		var lists *webhookListCounter
		b := setup(t, backend, func(c *Config) {
			c.Now = func() time.Time { return time.Unix(0, now.Load()) }
			lists = &webhookListCounter{Store: c.Store}
			c.Store = lists
		})
		// fanOut runs one pass, which reads the subscriptions reads times:
		// once when it leaves every row to the relay, again after the
		// rows of a batch it fans out (a subscription made before those
		// rows committed gets them).
		fanOut := func(reads int64) int {
			t.Helper()
			before := lists.calls.Load()
			n, err := b.svc.FanOut(b.ctx)
			require.NoError(t, err)
			require.Equal(t, before+reads, lists.calls.Load(), "reads of the subscriptions in the pass")
			return n
		}
		pending := func() int {
			t.Helper()
			rows, err := b.st.WebhookOutboxListPending(b.ctx, &store.WebhookOutboxListPendingParams{Limit: 100})
			require.NoError(t, err)
			return len(rows)
		}
		b.insertJobs(t, 1)
		require.Zero(t, fanOut(1))
		require.Equal(t, 1, pending(), "left to the relay")

		// The relay publishes it: marked fanned out too.
		rows, err := b.st.OutboxListUnpublished(b.ctx, &store.OutboxListUnpublishedParams{})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		_, err = b.st.OutboxMarkPublished(b.ctx, &store.OutboxMarkPublishedParams{IDs: []int64{rows[0].ID}, Now: time.Now()})
		require.NoError(t, err)
		require.Zero(t, pending())

		// No relay: a row past the grace is marked by the dispatcher.
		b.insertJobs(t, 1)
		b.insertJobs(t, 1)
		require.Equal(t, 2, pending())
		now.Store(time.Now().Add(noSubscriberGrace + time.Second).UnixNano())
		fanOut(2)
		require.Zero(t, pending())

		// A row left while there was no subscription goes to one made
		// before the dispatcher's next pass.
		now.Store(time.Now().UnixNano())
		b.insertJobs(t, 2)
		fanOut(1)
		require.Equal(t, 1, pending())
		w := b.subscribe(t, "http://127.0.0.1:1/")
		require.Equal(t, 2, fanOut(2))
		require.Len(t, b.deliveries(t, w), 2)
		require.Zero(t, pending())
	})
}

// A subscription made after a pass began, before an event that committed
// after it, gets that event: the subscriptions a batch fans out to are
// read after its rows.
func TestFanOutSubscriptionMadeDuringThePass(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		var hook *beforeRowsStore
		b := setup(t, backend, func(c *Config) {
			hook = &beforeRowsStore{Store: c.Store}
			c.Store = hook
		})
		first := b.subscribe(t, "http://127.0.0.1:1/")
		var second *store.Webhook
		hook.before = func() { // after the pass's first read of the subscriptions
			second = b.subscribe(t, "http://127.0.0.1:2/")
			b.insertJobs(t, 1)
		}
		n, err := b.svc.FanOut(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Len(t, b.deliveries(t, first), 1)
		require.Len(t, b.deliveries(t, second), 1, "the subscription made before the event")
	})
}

// beforeRowsStore is a store that runs before (once) when the pending
// outbox rows are first read.
type beforeRowsStore struct {
	Store
	before func()
}

func (s *beforeRowsStore) WebhookOutboxListPending(ctx context.Context, p *store.WebhookOutboxListPendingParams) ([]*store.OutboxEvent, error) {
	if f := s.before; f != nil {
		s.before = nil
		f()
	}
	return s.Store.WebhookOutboxListPending(ctx, p)
}

// webhookListCounter is a store counting its WebhookList calls.
type webhookListCounter struct {
	Store
	calls atomic.Int64
}

func (s *webhookListCounter) WebhookList(ctx context.Context) ([]*store.Webhook, error) {
	s.calls.Add(1)
	return s.Store.WebhookList(ctx)
}

// A receiver's answer holding NUL or bytes that are not UTF-8 is recorded
// with U+FFFD in their place; PostgreSQL refused it, so the attempt and
// its error were never recorded.
func TestDeliveryErrorNotText(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, func(c *Config) { c.MaxAttempts = 1 })
		rc := newReceiver(t, func(int, *http.Request) int { return http.StatusInternalServerError })
		rc.body = "a\x00b\xff"
		w := b.subscribe(t, rc.srv.URL)
		b.start(t)
		b.insertJobs(t, 1)
		d := b.waitStates(t, w, 1, store.DeliveryDead)[0]
		require.Equal(t, "HTTP 500 Internal Server Error: a\uFFFDb\uFFFD", d.LastError)
	})
}

// A delivery that keeps failing is DEAD after MaxAttempts; redelivery
// brings it back.
func TestDeadThenRedeliver(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, func(c *Config) { c.MaxAttempts = 3 })
		rc := newReceiver(t, func(int, *http.Request) int { return http.StatusInternalServerError })
		w := b.subscribe(t, rc.srv.URL)
		b.start(t)
		b.insertJobs(t, 1)

		d := b.waitStates(t, w, 1, store.DeliveryDead)[0]
		require.Equal(t, 3, d.Attempts)
		require.Equal(t, http.StatusInternalServerError, d.LastStatusCode)
		require.Equal(t, "HTTP 500 Internal Server Error: not now", d.LastError)
		require.Len(t, rc.requests(), 3, "no attempt after the last")

		rc.setFail(nil)
		again, err := b.svc.Redeliver(b.ctx, w.ID, d.ID)
		require.NoError(t, err)
		require.Equal(t, store.DeliveryPending, again.State)
		require.Zero(t, again.Attempts)
		d = b.waitStates(t, w, 1, store.DeliveryDelivered)[0]
		require.Equal(t, 1, d.Attempts)
		require.Equal(t, http.StatusNoContent, d.LastStatusCode)
		require.Len(t, rc.requests(), 4)

		// A delivered one can be sent again too.
		_, err = b.svc.Redeliver(b.ctx, w.ID, d.ID)
		require.NoError(t, err)
		waitFor(t, "the redelivery", func() bool { return len(rc.requests()) == 5 })
		b.waitStates(t, w, 1, store.DeliveryDelivered)
	})
}

// After BreakerFailures consecutive failures an endpoint's breaker opens:
// no request reaches it while open (the attempts due meanwhile count,
// unsent); then one is tried, succeeds, and the rest follow.
func TestCircuitBreaker(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		type change struct {
			at       time.Time
			from, to string
		}
		var (
			mu      sync.Mutex
			changes []change
		)
		b := setup(t, backend, func(c *Config) {
			c.BreakerFailures = 3
			c.BreakerOpen = 300 * time.Millisecond
			c.OnBreakerChange = func(_, from, to string) {
				mu.Lock()
				defer mu.Unlock()
				changes = append(changes, change{time.Now(), from, to})
			}
		})
		history := func() []change {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(changes)
		}
		rc := newReceiver(t, func(int, *http.Request) int { return http.StatusBadGateway })
		w := b.subscribe(t, rc.srv.URL)
		b.start(t)
		b.insertJobs(t, 4)

		waitFor(t, "the breaker to open", func() bool { return len(history()) >= 1 })
		require.Equal(t, "open", history()[0].to)
		require.Len(t, rc.requests(), 3, "three consecutive failures open it")
		// The third failure reached the receiver before the breaker
		// opened on its answer: a lower bound of the opening that is not
		// late, where the open callback's own clock reading can be (it
		// once measured the open state at 299.6 ms).
		lastFailure := rc.requests()[2].At
		rc.setFail(nil)

		ds := b.waitStates(t, w, 4, store.DeliveryDelivered)
		h := history()
		require.GreaterOrEqual(t, len(h), 3)
		require.Equal(t, []string{"open", "half-open", "closed"}, []string{h[0].to, h[1].to, h[2].to})
		opened, halfOpen := h[0].at, h[1].at
		require.GreaterOrEqual(t, halfOpen.Sub(lastFailure), 300*time.Millisecond, "the breaker stays open for BreakerOpen")
		for _, r := range rc.requests() {
			require.False(t, r.At.After(opened) && r.At.Before(halfOpen), "a request reached the endpoint while its breaker was open")
		}
		require.Len(t, rc.requests(), 3+4)
		attempts := 0
		for _, d := range ds {
			attempts += d.Attempts
		}
		// Each attempt due while the breaker was open counted, unsent:
		// the deliveries kept to their retry schedule.
		require.Greater(t, attempts, 3+4, "attempts due while the breaker was open counted")
	})
}

// An outbox id is taken before its transaction commits, so a row can
// commit after a row with a higher id was fanned out. It is still fanned
// out, once.
func TestFanOutRowCommittedLate(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[1]) // PostgreSQL: SQLite commits in id order
	w := b.subscribe(t, "http://127.0.0.1:1/")
	conn, err := pgx.Connect(b.ctx, b.url)
	require.NoError(t, err)
	defer conn.Close(b.ctx)
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = b.st.JobInsertManyTx(b.ctx, tx, &store.JobInsertManyParams{Now: time.Now(), Jobs: []*store.JobInsertParams{{
		ID: uuid.Must(uuid.NewV7()), Type: "late", Queue: "late", Payload: json.RawMessage(`{}`), State: job.StateQueued, MaxAttempts: 1,
	}}})
	require.NoError(t, err)
	b.insertJobs(t, 1) // commits first, with the higher id

	n, err := b.svc.FanOut(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	early := b.eventIDs(t)
	require.Len(t, early, 1)

	require.NoError(t, tx.Commit(b.ctx))
	n, err = b.svc.FanOut(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the late row is found")
	all := b.eventIDs(t)
	require.Len(t, all, 2)
	lateID, _, err := events.ParseEventID(all[0])
	require.NoError(t, err)
	earlyID, _, err := events.ParseEventID(early[0])
	require.NoError(t, err)
	require.Less(t, lateID, earlyID, "the late row has the lower id")

	var got []string
	for _, d := range b.deliveries(t, w) {
		got = append(got, d.EventID)
	}
	require.ElementsMatch(t, all, got)
}

// Two processes share the database: only the leader fans out and sends,
// so each event is delivered once; when the leader stops, the other takes
// over within a leadership term.
func TestLeaderOnlyAndFailover(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		other, err := New(testConfig(b.st))
		require.NoError(t, err)
		rc := newReceiver(t, nil)
		w := b.subscribe(t, rc.srv.URL)
		b.start(t)
		require.NoError(t, other.Start(b.ctx))
		t.Cleanup(other.Stop)

		waitFor(t, "a leader", func() bool { return b.svc.Leading() || other.Leading() })
		b.insertJobs(t, 3)
		b.waitStates(t, w, 3, store.DeliveryDelivered)
		require.Len(t, rc.requests(), 3, "one request per event")
		// A leader that misses a renewal leads on until its next attempt
		// shows it lost the term: a moment of two is harmless (fan-out and
		// claims are idempotent), and settles to one.
		waitFor(t, "exactly one leader", func() bool { return b.svc.Leading() != other.Leading() })

		b.svc.Stop()
		other.Stop()
		// Whichever led is stopped; a new process takes over once the term
		// it left behind runs out.
		third, err := New(testConfig(b.st))
		require.NoError(t, err)
		require.NoError(t, third.Start(b.ctx))
		t.Cleanup(third.Stop)
		b.insertJobs(t, 2)
		b.waitStates(t, w, 5, store.DeliveryDelivered)
		require.Len(t, rc.requests(), 5)
		waitFor(t, "the new leader", third.Leading)
	})
}

// A subscription deleted while a batch of its deliveries is being sent
// gets no request after the one in flight.
func TestDeleteStopsTheBatchInFlight(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		inFlight, deleted := make(chan struct{}), make(chan struct{})
		var once sync.Once
		rc := newReceiver(t, func(n int, _ *http.Request) int {
			if n == 1 {
				once.Do(func() { close(inFlight) })
				<-deleted
			}
			return http.StatusOK
		})
		w := b.subscribe(t, rc.srv.URL+"/hook")
		b.insertJobs(t, 5) // five deliveries, claimed as one batch
		b.start(t)
		<-inFlight
		require.NoError(t, b.svc.Delete(b.ctx, w.ID))
		close(deleted)
		require.Never(t, func() bool { return len(rc.requests()) > 1 }, time.Second, 10*time.Millisecond,
			"a request was sent for a deleted subscription")
	})
}

// A leader that dies while it sends a batch leaves its claims behind: the
// next leader takes them over at the start of its term and sends them at
// once, instead of after the dead claim's lease ((PerWebhookBatch+1) ×
// Timeout, an hour here), which later events of the subscription would
// not have waited for.
func TestNewLeaderTakesOverADeadLeadersClaims(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		rc := newReceiver(t, nil)
		w := b.subscribe(t, rc.srv.URL)
		b.insertJobs(t, 3)
		n, err := b.svc.FanOut(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		now := time.Now()
		claimed, err := b.st.WebhookDeliveryClaim(b.ctx, &store.WebhookDeliveryClaimParams{
			Now: now, Max: 10, PerWebhook: 10, LeaseUntil: now.Add(time.Hour), NodeID: "dead-leader",
		})
		require.NoError(t, err)
		require.Len(t, claimed, 3)

		b.start(t)
		for _, d := range b.waitStates(t, w, 3, store.DeliveryDelivered) {
			require.Equal(t, 2, d.Attempts, "the dead claim's attempt counts: it may have been sent")
		}
		require.Len(t, rc.requests(), 3)
	})
}
