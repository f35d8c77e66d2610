package webhook

import (
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
