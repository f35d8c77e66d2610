package webhook

import (
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// scheduleMax is the longest a delivery that keeps failing takes from its
// first attempt to DEAD: the sum of the backoff ceilings after attempts 1
// to MaxAttempts-1 (each delay is at most its ceiling).
func scheduleMax(cfg Config) time.Duration {
	var total time.Duration
	for n := 1; n < cfg.MaxAttempts; n++ {
		c := cfg.BackoffMax
		if shift := n - 1; shift < 40 && cfg.BackoffBase<<shift < cfg.BackoffMax {
			c = cfg.BackoffBase << shift
		}
		total += c
	}
	return total
}

// Many deliveries wait behind a dead receiver's open breaker: each still
// keeps to the retry schedule and is DEAD on time, with its MaxAttempts
// attempts counted, though only a handful of requests reach the receiver.
// (Before, one delivery was tried per open period: 100 deliveries of 6
// attempts would have taken 100 × 6 × 200 ms = 2 minutes.) Then the
// receiver recovers while another backlog waits: the first delivery goes
// out within a breaker period and a backoff, and all of it arrives.
func TestBreakerBacklogKeepsSchedule(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		const backlog = 100
		var cfg Config
		b := setup(t, backend, func(c *Config) {
			c.BreakerFailures, c.BreakerOpen = 3, 200*time.Millisecond
			c.BackoffBase, c.BackoffMax = 20*time.Millisecond, 80*time.Millisecond
			c.MaxAttempts = 6
			cfg = *c
		})
		var down atomic.Bool
		down.Store(true)
		rc := newReceiver(t, func(int, *http.Request) int {
			if down.Load() {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		})
		w := b.subscribe(t, rc.srv.URL+"/hook")
		b.start(t)
		b.insertJobs(t, backlog)

		ds := b.waitAll(t, w, backlog, store.DeliveryDead)
		// The schedule, plus a poll and a request per attempt, and room for
		// SQLite under the race detector on a loaded machine (24 s measured
		// for 300; 0.7 s without it). One attempt per open period would
		// take 2 minutes.
		limit := scheduleMax(cfg) + time.Duration(cfg.MaxAttempts)*50*time.Millisecond + 30*time.Second
		skipped, slowest := 0, time.Duration(0)
		for _, d := range ds {
			slowest = max(slowest, d.FinishedAt.Sub(d.CreatedAt))
			require.Equal(t, cfg.MaxAttempts, d.Attempts, "every due attempt counts, sent or not")
			require.LessOrEqual(t, d.FinishedAt.Sub(d.CreatedAt), limit, "DEAD on the schedule's time")
			if d.LastError == skipMessage {
				skipped++
				require.Zero(t, d.LastStatusCode)
			}
		}
		require.Greater(t, skipped, backlog/2, "most were never sent: the breaker was open")
		sent := len(rc.requests())
		require.Less(t, sent, backlog/2, "the receiver was spared: %d requests", sent)
		t.Logf("%d deliveries DEAD after at most %v (schedule %v), %d requests", backlog, slowest, scheduleMax(cfg), sent)

		// A second backlog waits behind the open breaker; the receiver
		// comes back. Every delivery goes out: the breaker's next trial
		// closes it, and the rest follow as they come due.
		b.svc.Stop()
		b2 := setup(t, backend, func(c *Config) {
			c.BreakerFailures, c.BreakerOpen = 3, 200*time.Millisecond
			c.BackoffBase, c.BackoffMax = 20*time.Millisecond, 80*time.Millisecond
			c.MaxAttempts = 1000
		})
		w2 := b2.subscribe(t, rc.srv.URL+"/again")
		b2.start(t)
		b2.insertJobs(t, backlog)
		waitFor(t, "deliveries skipped behind the open breaker", func() bool {
			for _, d := range b2.deliveries(t, w2) {
				if d.LastError == skipMessage {
					return true
				}
			}
			return false
		})
		recovered := time.Now()
		down.Store(false)
		ds = b2.waitAll(t, w2, backlog, store.DeliveryDelivered)
		first, last := ds[0].FinishedAt, ds[0].FinishedAt
		for _, d := range ds {
			first, last = minTime(first, d.FinishedAt), maxTime(last, d.FinishedAt)
		}
		require.LessOrEqual(t, first.Sub(recovered), cfg.BreakerOpen+cfg.BackoffMax+2*time.Second,
			"the first delivery went out within a breaker period and a backoff of the recovery")
		t.Logf("backlog of %d: first delivered %v after the recovery, last %v", backlog, first.Sub(recovered), last.Sub(recovered))
		got := map[string]bool{}
		for _, r := range rc.requests() {
			if r.Path == "/again" && r.At.After(recovered) {
				got[r.Header.Get(HeaderEventID)] = true
			}
		}
		require.Len(t, got, backlog, "every event of the backlog arrived after the recovery")
	})
}

// waitAll is waitStates for a large backlog: it polls less often (a list
// of hundreds of deliveries every few milliseconds slowed the service it
// waits on, under the race detector), and waits longer.
func (b *bundle) waitAll(t *testing.T, w *store.Webhook, n int, state store.WebhookDeliveryState) []*store.WebhookDelivery {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ds, err := b.svc.Deliveries(b.ctx, w.ID, state, 0)
		require.NoError(t, err)
		if len(ds) == n {
			return ds
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d deliveries %s: %d are", n, state, len(ds))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// docs/events.md gives how long the default schedule takes to DEAD: the
// sum of the ceilings, and half of it (each delay is uniform in
// [ceiling/2, ceiling]).
func TestDocumentedSchedule(t *testing.T) {
	t.Parallel()
	longest := scheduleMax(Config{}.WithDefaults())
	require.Equal(t, 5*time.Hour+25*time.Minute+15*time.Second, longest)
	doc, err := os.ReadFile("../../docs/events.md")
	require.NoError(t, err)
	require.Contains(t, strings.Join(strings.Fields(string(doc)), " "),
		"between 2 h 43 min and 5 h 25 min after its first attempt (about 4 h on average)")
	require.Equal(t, 2*time.Hour+43*time.Minute, (longest / 2).Round(time.Minute))
	require.Equal(t, 4*time.Hour, (longest * 3 / 4).Round(time.Hour))
}

// A receiver fails long enough to open its breaker, with a backlog
// behind it whose next attempts are half an hour away or more (the
// backoff), then recovers. Once an event due now has been sent as the
// breaker's trial and closed it, the backlog drains at once, in event
// order, each delivery in one more attempt than it had: without waiting
// for its retry time (the waitAll minute is far below the half hour).
// One event the receiver keeps refusing is tried once after the recovery
// and then keeps to its schedule.
func TestBreakerBacklogDrainsOnRecovery(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		const backlog = 30
		var cfg Config
		b := setup(t, backend, func(c *Config) {
			c.BreakerFailures, c.BreakerOpen = 3, 200*time.Millisecond
			c.BackoffBase, c.BackoffMax = time.Hour, time.Hour
			c.MaxAttempts = 15
			cfg = *c
		})
		var down atomic.Bool
		down.Store(true)
		var refused atomic.Value // the event id the receiver always refuses
		refused.Store("")
		rc := newReceiver(t, func(_ int, r *http.Request) int {
			if down.Load() || r.Header.Get(HeaderEventID) == refused.Load() {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		})
		w := b.subscribe(t, rc.srv.URL+"/hook")
		b.start(t)
		b.insertJobs(t, backlog)
		waitFor(t, "the backlog waiting behind the open breaker", func() bool {
			ds := b.deliveries(t, w)
			if len(ds) != backlog {
				return false
			}
			for _, d := range ds {
				if d.LastError == "" { // not attempted yet, or in flight
					return false
				}
			}
			return true
		})
		before := map[string]*store.WebhookDelivery{}
		order := map[string][2]int64{} // event id → (outbox id, event index)
		skipped := 0
		for _, d := range b.deliveries(t, w) {
			require.Equal(t, store.DeliveryPending, d.State)
			require.Equal(t, 1, d.Attempts)
			require.GreaterOrEqual(t, d.NextAttemptAt.Sub(d.UpdatedAt), cfg.BackoffBase/2, "due again after the backoff")
			before[d.EventID] = d
			order[d.EventID] = [2]int64{d.OutboxID, int64(d.EventIndex)}
			if d.LastError == skipMessage {
				skipped++
			}
		}
		// The breaker opened after BreakerFailures failures; a trial made
		// after an open period (on a slow machine, before the backlog was
		// all skipped) fails too.
		require.Greater(t, skipped, backlog/2, "most were held back by the breaker")
		// The oldest event is refused for good; the receiver is back.
		var oldest string
		for id := range order {
			if oldest == "" || order[id][1] < order[oldest][1] {
				oldest = id
			}
		}
		refused.Store(oldest)
		recovered := len(rc.requests())
		down.Store(false)
		// An event due now once the open period is over (one due before
		// would be held back too) is the breaker's trial.
		waitFor(t, "the breaker's open period to end", func() bool { return !b.svc.breakers.open(w.URL) })
		b.insertJobs(t, 1)
		// All but the refused one, and the trial.
		ds := b.waitAll(t, w, backlog-1+1, store.DeliveryDelivered)

		var sent []string
		for _, r := range rc.requests()[recovered:] {
			if id := r.Header.Get(HeaderEventID); before[id] != nil {
				sent = append(sent, id)
			}
		}
		require.Len(t, sent, backlog, "each waiting event sent once after the recovery")
		require.Equal(t, oldest, sent[0])
		for i := 1; i < len(sent); i++ {
			require.Less(t, order[sent[i-1]][1], order[sent[i]][1], "in event order")
		}
		for _, d := range ds {
			if before[d.EventID] == nil {
				require.Equal(t, 1, d.Attempts, "the trial")
				continue
			}
			require.Equal(t, 2, d.Attempts, "one more attempt than before the recovery: %s", d.EventID)
		}
		var kept *store.WebhookDelivery
		for _, d := range b.deliveries(t, w) {
			if d.EventID == oldest {
				kept = d
			}
		}
		require.NotNil(t, kept)
		require.Equal(t, store.DeliveryPending, kept.State)
		require.Equal(t, 2, kept.Attempts)
		require.Equal(t, http.StatusServiceUnavailable, kept.LastStatusCode)
		require.GreaterOrEqual(t, kept.NextAttemptAt.Sub(kept.LastAttemptAt), cfg.BackoffBase/2,
			"refused after the recovery: its own schedule again")
	})
}

// An endpoint recovers while two subscriptions to it each have a backlog
// held back by its breaker, and one endpoint's batch at a time may be
// sent (Concurrency 1). Deliverer rounds are run by hand, on a clock the
// test moves. A subscription's deliveries are brought forward one batch
// at a time: none while nothing can be claimed (another endpoint's batch
// in flight), and the next only once the previous one has been claimed.
// So when the breaker opens again, at most one batch per subscription
// was brought forward and is then charged an attempt not made; the rest
// of the backlog keeps its schedule. (Before, every round brought
// another batch of each subscription forward: 30 in 3 rounds with
// nothing claimed, and 5 more per round than the claim took.)
func TestBreakerBacklogOneBatchAtATime(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		const backlog = 40
		var clock atomic.Int64
		clock.Store(time.Now().UnixNano())
		now := func() time.Time { return time.Unix(0, clock.Load()) }
		tick := func() { clock.Add(int64(time.Second)) }
		var cfg Config
		b := setup(t, backend, func(c *Config) {
			c.Now = now
			c.Concurrency = 1
			c.BreakerFailures, c.BreakerOpen = 1, time.Hour
			c.BackoffBase, c.BackoffMax = time.Hour, time.Hour
			c.MaxAttempts = 15
			cfg = *c
		})
		t.Cleanup(b.svc.Stop) // never started: closes the client's connections
		var down atomic.Bool
		rc := newReceiver(t, func(int, *http.Request) int {
			if down.Load() {
				return http.StatusServiceUnavailable
			}
			return http.StatusNoContent
		})
		url := rc.srv.URL + "/hook"
		ws := []*store.Webhook{b.subscribe(t, url), b.subscribe(t, url)}
		b.insertJobs(t, backlog)
		n, err := b.svc.FanOut(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 2*backlog, n)
		// Every delivery's first attempt fell due behind the open breaker.
		delays := make([]time.Duration, cfg.MaxAttempts-1)
		for i := range delays {
			delays[i] = time.Hour
		}
		held := now()
		n, err = b.st.WebhookDeliverySkip(b.ctx, &store.WebhookDeliverySkipParams{
			WebhookIDs: []uuid.UUID{ws[0].ID, ws[1].ID}, Now: held, Error: skipMessage,
			MaxAttempts: cfg.MaxAttempts, Delays: delays,
		})
		require.NoError(t, err)
		require.Equal(t, 2*backlog, n)
		tick()
		// Then the breaker's trial succeeded: it closed again.
		b.svc.breakers.get(url)
		b.svc.breakers.recoveredMu.Lock()
		b.svc.breakers.recovered[url] = now()
		b.svc.breakers.recoveredMu.Unlock()
		tick()

		due := func(w *store.Webhook) int { // brought forward, not claimed
			n := 0
			for _, d := range b.deliveries(t, w) {
				if d.State == store.DeliveryPending && !d.NextAttemptAt.After(now()) {
					n++
				}
			}
			return n
		}
		d := &deliverer{s: b.svc, busy: map[uuid.UUID]bool{uuid.New(): true}}
		for range 3 {
			d.claim(b.ctx)
			tick()
		}
		for _, w := range ws {
			require.Zero(t, due(w), "nothing brought forward while another endpoint takes the only slot")
		}
		require.Contains(t, b.svc.breakers.recoveredURLs(), url, "the backlog is still to drain")
		require.Empty(t, rc.requests())

		// The slot is free: each round claims one batch (the claim takes
		// the oldest events, of both subscriptions).
		d.busy = map[uuid.UUID]bool{}
		for round := 1; round <= 4; round++ {
			d.claim(b.ctx)
			d.wg.Wait()
			tick()
			for i, w := range ws {
				require.LessOrEqual(t, due(w), PerWebhookBatch,
					"round %d, subscription %d: at most one batch brought forward and not claimed", round, i)
			}
		}
		delivered := map[uuid.UUID]int{}
		for _, w := range ws {
			for _, dl := range b.deliveries(t, w) {
				if dl.State == store.DeliveryDelivered {
					require.Equal(t, 2, dl.Attempts)
					delivered[w.ID]++
				}
			}
			require.Positive(t, delivered[w.ID], "the backlog drains")
		}

		// The endpoint fails again: the batch in flight opens the breaker,
		// and the next round finds it open.
		down.Store(true)
		d.claim(b.ctx)
		d.wg.Wait()
		require.True(t, b.svc.breakers.open(url))
		tick()
		d.claim(b.ctx)
		for i, w := range ws {
			charged, untouched := 0, 0
			for _, dl := range b.deliveries(t, w) {
				switch {
				case dl.State == store.DeliveryDelivered:
				case dl.Attempts == 2: // sent and refused, or not sent
					charged++
				default:
					require.Equal(t, 1, dl.Attempts)
					require.Equal(t, skipMessage, dl.LastError)
					requireSameTime(t, held.Add(time.Hour), dl.NextAttemptAt, "keeps its schedule")
					untouched++
				}
			}
			require.LessOrEqual(t, charged, PerWebhookBatch,
				"subscription %d: one more attempt counted for at most the batch brought forward", i)
			require.Equal(t, backlog, delivered[w.ID]+charged+untouched)
			t.Logf("subscription %d: %d delivered, %d charged an attempt, %d untouched", i, delivered[w.ID], charged, untouched)
		}
		require.NotContains(t, b.svc.breakers.recoveredURLs(), url, "the breaker opened: no more brought forward")
	})
}

// requireSameTime compares stored times to the microsecond.
func requireSameTime(t *testing.T, want, got time.Time, msg string) {
	t.Helper()
	require.Equal(t, want.Truncate(time.Microsecond).UnixMicro(), got.UnixMicro(), msg)
}
