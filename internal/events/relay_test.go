package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/docket-run/docket/internal/events"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// workload makes jobs go through their states from several goroutines at
// once, through the store: inserts in batches, acquires, progress, and
// finishes with success, retry or death, so outbox rows describe many jobs
// each and commit in an interleaved order.
func workload(ctx context.Context, st store.Store, goroutines, jobsEach int) error {
	g, ctx := errgroup.WithContext(ctx)
	for w := range goroutines {
		g.Go(func() error {
			queue := fmt.Sprintf("q%d", w)
			var ps []*store.JobInsertParams
			for range jobsEach {
				ps = append(ps, &store.JobInsertParams{
					ID: uuid.Must(uuid.NewV7()), Type: "work", Queue: queue,
					Payload: json.RawMessage(`{}`), State: job.StateQueued, MaxAttempts: 3,
				})
			}
			// Two insert statements: half the jobs each.
			for _, part := range [][]*store.JobInsertParams{ps[:len(ps)/2], ps[len(ps)/2:]} {
				if _, err := st.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: part, Now: time.Now()}); err != nil {
					return err
				}
			}
			for range 3 { // attempts: each round takes what is queued
				rows, err := st.JobAcquire(ctx, &store.JobAcquireParams{
					Queue: queue, Max: jobsEach, Owner: "test", LeaseDuration: time.Minute, Now: time.Now(),
				})
				if err != nil {
					return err
				}
				var fins []*store.JobFinishParams
				for i, r := range rows {
					if i%3 == 0 {
						if err := st.JobProgress(ctx, &store.JobProgressParams{
							Ref: job.Ref{ID: r.ID, Attempt: r.Attempt}, Progress: new(50.0), Now: time.Now(),
						}); err != nil {
							return err
						}
					}
					fin := &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess}
					if i%2 == 1 && r.Attempt < 3 {
						// Retry at once: the next round acquires it again.
						fin.State, fin.Outcome, fin.Error, fin.RunAt = job.StateRetry, job.OutcomeError, "again", time.Now()
					}
					fins = append(fins, fin)
				}
				if len(fins) > 0 {
					if _, err := st.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: fins, Now: time.Now()}); err != nil {
						return err
					}
				}
				if _, err := st.JobSchedule(ctx, &store.JobScheduleParams{Now: time.Now().Add(time.Second), Max: 1000}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// expected is every event of the outbox, in outbox id order.
func expected(t testing.TB, st store.Store) []events.Envelope {
	t.Helper()
	var out []events.Envelope
	var after int64
	for {
		rows, err := st.OutboxList(t.Context(), &store.OutboxListParams{AfterID: after, Limit: 500})
		require.NoError(t, err)
		if len(rows) == 0 {
			return out
		}
		for _, row := range rows {
			evs, err := events.Expand(row)
			require.NoError(t, err)
			out = append(out, evs...)
			after = row.ID
		}
	}
}

// requireSameOncePerJobOrder checks that got holds each event of want
// exactly once, and each job's events in want's order (commit order).
func requireSameOncePerJobOrder(t testing.TB, want, got []events.Envelope) {
	t.Helper()
	seen := map[string]bool{}
	for _, ev := range got {
		require.False(t, seen[ev.ID], "event %s published twice", ev.ID)
		seen[ev.ID] = true
	}
	require.Len(t, got, len(want), "events in the stream:\n%s", describe(got))
	perJob := func(evs []events.Envelope) map[string][]string {
		m := map[string][]string{}
		for _, ev := range evs {
			m[ev.Subject] = append(m[ev.Subject], ev.ID)
		}
		return m
	}
	wantJobs, gotJobs := perJob(want), perJob(got)
	require.Len(t, gotJobs, len(wantJobs))
	for subject, ids := range wantJobs {
		require.Equal(t, ids, gotJobs[subject], "events of %s in commit order", subject)
	}
	for i := range want {
		require.True(t, seen[want[i].ID], "event %s (%s) never published", want[i].ID, want[i].Type)
	}
}

// unpublished counts rows not yet published.
func unpublished(t testing.TB, st store.Store) int {
	t.Helper()
	rows, err := st.OutboxListUnpublished(t.Context(), &store.OutboxListUnpublishedParams{})
	require.NoError(t, err)
	return len(rows)
}

func startRelay(t testing.TB, st store.Store, pub events.Publisher, cfg events.RelayConfig) *events.Relay {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	r := events.NewRelay(st, pub, cfg)
	require.NoError(t, r.Start(t.Context()))
	t.Cleanup(r.Stop)
	return r
}

func TestRelayPublishesEveryEventOnceInCommitOrder(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			st := relayStore(t, backend)
			n := startNATS(t)
			bus := openBus(t, n.URL())
			// Small batches (rows of more events than BatchEvents go alone): many
			// rounds while the work goes on.
			relay := startRelay(t, st, bus, events.RelayConfig{Batch: 7, BatchEvents: 5})
			require.NoError(t, workload(t.Context(), st, 4, 20))
			eventually(t, 30*time.Second, "every row published", func() bool { return unpublished(t, st) == 0 })
			relay.Stop()
			require.NoError(t, relay.Health())
			want := expected(t, st)
			require.Greater(t, len(want), 4*20*3, "the workload made events")
			requireSameOncePerJobOrder(t, want, streamEvents(t, n.URL()))
		})
	}
}

// crashAfterPublish publishes, then fails as a process dying before it
// marks the rows published would.
type crashAfterPublish struct {
	pub       events.Publisher
	published atomic.Int32
}

var errCrash = errors.New("crashed before marking")

func (c *crashAfterPublish) Publish(ctx context.Context, evs []events.Envelope) error {
	if err := c.pub.Publish(ctx, evs); err != nil {
		return err
	}
	c.published.Add(1)
	return errCrash
}

func TestRelayRepublishIsDroppedByMsgID(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			st := relayStore(t, backend)
			n := startNATS(t)
			bus := openBus(t, n.URL())
			require.NoError(t, workload(t.Context(), st, 2, 10))
			want := expected(t, st)

			crash := &crashAfterPublish{pub: bus}
			r := events.NewRelay(st, crash, events.RelayConfig{Batch: 1000})
			_, err := r.Round(t.Context())
			require.ErrorIs(t, err, errCrash)
			require.Equal(t, int32(1), crash.published.Load())
			require.Len(t, streamEvents(t, n.URL()), len(want), "published before the crash")
			require.NotZero(t, unpublished(t, st), "nothing marked")

			// The restarted relay publishes everything again.
			relay := startRelay(t, st, bus, events.RelayConfig{})
			eventually(t, 30*time.Second, "every row published", func() bool { return unpublished(t, st) == 0 })
			relay.Stop()
			requireSameOncePerJobOrder(t, want, streamEvents(t, n.URL()))
		})
	}
}

func TestRelayBusDownAndBack(t *testing.T) {
	t.Parallel()
	st := relayStore(t, testdb.Backends()[0])
	n := startNATS(t)
	bus := openBus(t, n.URL())
	relay := startRelay(t, st, bus, events.RelayConfig{
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		BreakerTrip: 2, BreakerOpen: 200 * time.Millisecond,
	})
	require.NoError(t, workload(t.Context(), st, 1, 5))
	eventually(t, 30*time.Second, "first rows published", func() bool { return unpublished(t, st) == 0 })

	n.Stop()
	eventually(t, 10*time.Second, "bus reported down", func() bool { return bus.Health() != nil })
	// Work goes on while the bus is down; its events wait in the outbox.
	require.NoError(t, workload(t.Context(), st, 2, 5))
	eventually(t, 10*time.Second, "relay reports the failure", func() bool { return relay.Health() != nil })
	require.NotZero(t, unpublished(t, st))

	n.Start()
	eventually(t, 30*time.Second, "every row published after the bus returned", func() bool { return unpublished(t, st) == 0 })
	eventually(t, 10*time.Second, "healthy again", func() bool { return relay.Health() == nil && bus.Health() == nil })
	relay.Stop()
	requireSameOncePerJobOrder(t, expected(t, st), streamEvents(t, n.URL()))
}

// blockingPublisher never publishes: it records that it was called and
// waits until its context ends.
type blockingPublisher struct {
	once   sync.Once
	called chan struct{}
}

func (b *blockingPublisher) Publish(ctx context.Context, _ []events.Envelope) error {
	b.once.Do(func() { close(b.called) })
	<-ctx.Done()
	return ctx.Err()
}

func TestRelayStopsWhilePublishing(t *testing.T) {
	t.Parallel()
	st := relayStore(t, testdb.Backends()[0])
	require.NoError(t, workload(t.Context(), st, 1, 2))
	pub := &blockingPublisher{called: make(chan struct{})}
	r := events.NewRelay(st, pub, events.RelayConfig{})
	require.NoError(t, r.Start(t.Context()))
	<-pub.called
	r.Stop()
	r.Stop()
	require.NotZero(t, unpublished(t, st))
	// Started again (a new term as leader), it goes on.
	require.NoError(t, r.Start(t.Context()))
	r.Stop()
}

func TestRelayPrunesPublishedRows(t *testing.T) {
	t.Parallel()
	st := relayStore(t, testdb.Backends()[0])
	n := startNATS(t)
	bus := openBus(t, n.URL())
	// A subscription, so that publishing leaves the rows to webhook
	// fan-out (with none the relay marks them fanned out as well).
	_, err := st.WebhookInsert(t.Context(), &store.WebhookInsertParams{
		ID: uuid.Must(uuid.NewV7()), URL: "http://127.0.0.1:9/hook", EventTypes: []string{"*"},
		Secret: "0123456789abcdef", Now: time.Now(),
	})
	require.NoError(t, err)
	require.NoError(t, workload(t.Context(), st, 1, 3))
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	r := events.NewRelay(st, bus, events.RelayConfig{Now: clock, Retention: time.Hour, PruneInterval: 10 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	require.NoError(t, r.Start(t.Context()))
	defer r.Stop()
	eventually(t, 30*time.Second, "published", func() bool { return unpublished(t, st) == 0 })
	total := len(expected(t, st))
	require.NotZero(t, total)
	rows, err := st.OutboxList(t.Context(), &store.OutboxListParams{})
	require.NoError(t, err)
	var ids []int64
	for _, row := range rows {
		ids = append(ids, row.ID)
	}
	// Rows are kept until webhook fan-out is done with them too.
	_, err = st.WebhookFanOut(t.Context(), &store.WebhookFanOutParams{OutboxIDs: ids[1:], Now: clock()})
	require.NoError(t, err)
	now.Add(int64(2 * time.Hour))
	// Everything fanned out but the newest row goes.
	eventually(t, 30*time.Second, "pruned", func() bool {
		rows, err := st.OutboxList(t.Context(), &store.OutboxListParams{})
		require.NoError(t, err)
		return len(rows) == 2
	})
	rows, err = st.OutboxList(t.Context(), &store.OutboxListParams{})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0], ids[len(ids)-1]}, []int64{rows[0].ID, rows[1].ID})
}

// markRecorder is a store whose OutboxMarkPublished records how many rows
// each round marked.
type markRecorder struct {
	store.Store
	mu    sync.Mutex
	sizes []int
}

func (m *markRecorder) OutboxMarkPublished(ctx context.Context, p *store.OutboxMarkPublishedParams) (int, error) {
	m.mu.Lock()
	m.sizes = append(m.sizes, len(p.IDs))
	m.mu.Unlock()
	return m.Store.OutboxMarkPublished(ctx, p)
}

func (m *markRecorder) rounds() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int(nil), m.sizes...)
}

// A backlog is worked in rounds that double from Batch to BatchMax, and
// every event is still published once, in commit order.
func TestRelayRoundsGrowWithABacklog(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			st := &markRecorder{Store: relayStore(t, backend)}
			n := startNATS(t)
			bus := openBus(t, n.URL())
			require.NoError(t, workload(t.Context(), st, 4, 20))
			backlog := unpublished(t, st)
			require.Greater(t, backlog, 4+8+16+32, "the workload made a backlog")
			startRelay(t, st, bus, events.RelayConfig{Batch: 4, BatchMax: 32, BatchEvents: 1 << 20})
			eventually(t, 30*time.Second, "every row published", func() bool { return unpublished(t, st) == 0 })
			got := st.rounds()
			require.GreaterOrEqual(t, len(got), 4, "rounds: %v", got)
			require.Equal(t, []int{4, 8, 16, 32}, got[:4], "rounds: %v", got)
			for _, size := range got {
				require.LessOrEqual(t, size, 32, "rounds: %v", got)
			}
			require.Less(t, len(got), (backlog+3)/4, "fewer rounds than Batch alone would take: %v", got)
			want := expected(t, st)
			requireSameOncePerJobOrder(t, want, streamEvents(t, n.URL()))
		})
	}
}

// failingOutbox is a relay store whose outbox reads fail.
type failingOutbox struct{ store.Store }

var errOutboxRead = errors.New("connection refused")

func (failingOutbox) OutboxListUnpublished(context.Context, *store.OutboxListUnpublishedParams) ([]*store.OutboxEvent, error) {
	return nil, errOutboxRead
}

// TestRelayDatabaseFailure: a round that fails on the database says so
// (ErrRelayDatabase), so that /healthz does not blame the bus, which is
// up; a failure of the bus is not one.
func TestRelayDatabaseFailure(t *testing.T) {
	t.Parallel()
	st := relayStore(t, testdb.Backends()[0])
	n := startNATS(t)
	bus := openBus(t, n.URL())
	relay := startRelay(t, failingOutbox{st}, bus, events.RelayConfig{BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	eventually(t, 10*time.Second, "relay reports the failure", func() bool { return relay.Health() != nil })
	err := relay.Health()
	require.ErrorIs(t, err, events.ErrRelayDatabase)
	require.ErrorIs(t, err, errOutboxRead)
	require.NoError(t, bus.Health(), "the bus is up")

	// The bus down is not a database failure.
	up := startRelay(t, st, bus, events.RelayConfig{BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	require.NoError(t, workload(t.Context(), st, 1, 1))
	n.Stop()
	require.NoError(t, workload(t.Context(), st, 2, 1))
	eventually(t, 10*time.Second, "relay reports the bus down", func() bool { return up.Health() != nil })
	require.NotErrorIs(t, up.Health(), events.ErrRelayDatabase)
}
