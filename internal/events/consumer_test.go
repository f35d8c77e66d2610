package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/events"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

// drainDeadline bounds every wait of these tests.
const drainDeadline = 30 * time.Second

// consumerBundle is a migrated store, an embedded NATS server with the
// event stream, and the queue the test consumers enqueue follow-ups in.
type consumerBundle struct {
	ctx   context.Context
	store store.Store
	js    jetstream.JetStream
	queue string
}

func setupConsumer(t *testing.T, backend testdb.Backend) *consumerBundle {
	t.Helper()
	ctx := context.Background()
	st := openStore(t, backend)

	srv, err := server.NewServer(&server.Options{
		ServerName: "test", DontListen: true, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
	})
	require.NoError(t, err)
	srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "embedded NATS server did not start")
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	require.NoError(t, err)
	t.Cleanup(func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: events.StreamName, Subjects: []string{events.NATSSubject(">")},
		Storage: jetstream.FileStorage, Duplicates: 5 * time.Minute,
	})
	require.NoError(t, err)
	return &consumerBundle{ctx: ctx, store: st, js: js, queue: "followup_" + uuid.NewString()[:8]}
}

func openStore(t *testing.T, backend testdb.Backend) store.Store {
	t.Helper()
	return teststore.Open(t, backend.URL(t))
}

// event makes the n-th job.state_changed envelope of a test.
func event(n int, subject string) events.Envelope {
	return events.Envelope{
		ID: events.EventID(int64(n), 0), Type: job.EventStateChanged, OccurredAt: time.Now().UTC(),
		Subject: subject, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)),
	}
}

// publish publishes ev with Nats-Msg-Id msgID (the event id, or another
// one to force a second copy past JetStream's duplicate window).
func (b *consumerBundle) publish(t *testing.T, ev events.Envelope, msgID string) {
	t.Helper()
	data, err := json.Marshal(ev)
	require.NoError(t, err)
	_, err = b.js.PublishMsg(b.ctx, &nats.Msg{Subject: events.NATSSubject(ev.Type), Data: data}, jetstream.WithMsgID(msgID))
	require.NoError(t, err)
}

// enqueueFollowUp is the effect of the test consumers: one job per event,
// in the same transaction as the inbox row.
func (b *consumerBundle) enqueueFollowUp(ctx context.Context, tx store.Tx, ev events.Envelope) error {
	payload, err := json.Marshal(map[string]string{"eventId": ev.ID})
	if err != nil {
		return err
	}
	_, err = tx.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{{
		ID: uuid.Must(uuid.NewV7()), Type: "followup", Queue: b.queue, Payload: payload,
		State: job.StateQueued, MaxAttempts: 1,
	}}, Now: time.Now()})
	return err
}

// followUps counts the follow-up jobs by event id.
func (b *consumerBundle) followUps(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.store.JobList(b.ctx, &store.JobListParams{Queues: []string{b.queue}})
	require.NoError(t, err)
	out := map[string]int{}
	for _, r := range rows {
		var p struct {
			EventID string `json:"eventId"`
		}
		require.NoError(t, json.Unmarshal(r.Payload, &p))
		out[p.EventID]++
	}
	return out
}

// start makes and starts a consumer with fast test timings, stopped at
// cleanup.
func (b *consumerBundle) start(t *testing.T, cfg events.ConsumerConfig) *events.Consumer {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "followups"
	}
	if cfg.Handler == nil {
		cfg.Handler = b.enqueueFollowUp
	}
	cfg.NakBackoffBase, cfg.NakBackoffMax = time.Millisecond, 10*time.Millisecond
	cfg.RetryPollInterval = 10 * time.Millisecond
	c, err := events.NewConsumer(b.store, b.js, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(b.ctx))
	t.Cleanup(c.Stop)
	return c
}

// awaitDrained waits until the durable consumer name has nothing left to
// deliver and nothing awaiting an ack.
func (b *consumerBundle) awaitDrained(t *testing.T, name string) {
	t.Helper()
	var last *jetstream.ConsumerInfo
	require.Eventually(t, func() bool {
		cons, err := b.js.Consumer(b.ctx, events.StreamName, name)
		if err != nil {
			return false
		}
		last, err = cons.Info(b.ctx)
		return err == nil && last.NumPending == 0 && last.NumAckPending == 0
	}, drainDeadline, 5*time.Millisecond, "consumer %s not drained: %+v", name, last)
}

// await polls cond until it holds.
func await(t *testing.T, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, cond, drainDeadline, 5*time.Millisecond, msgAndArgs...)
}

func forEachBackend(t *testing.T, fn func(t *testing.T, backend testdb.Backend)) {
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, backend)
		})
	}
}

// TestConsumerDuplicateDelivery: every event is in the stream twice (the
// second copy under another Nats-Msg-Id, as after a relay crash past the
// duplicate window), and one was handled already by a consumer that died
// between commit and ack; each event's effect exists once.
func TestConsumerDuplicateDelivery(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setupConsumer(t, backend)
		const n = 20
		// Event 1 was handled and committed by a consumer that crashed
		// before its ack: the inbox has it, JetStream will deliver it.
		handled, err := b.store.InboxHandle(b.ctx, &store.InboxHandleParams{Consumer: "followups", EventID: event(1, "").ID, Now: time.Now()},
			func(ctx context.Context, tx store.Tx) error { return b.enqueueFollowUp(ctx, tx, event(1, "")) })
		require.NoError(t, err)
		require.True(t, handled)
		for i := 1; i <= n; i++ {
			ev := event(i, "jobs/x")
			b.publish(t, ev, ev.ID)
			b.publish(t, ev, ev.ID) // dropped by JetStream's duplicate window
			b.publish(t, ev, ev.ID+"/again")
		}
		var calls atomic.Int32
		b.start(t, events.ConsumerConfig{Handler: func(ctx context.Context, tx store.Tx, ev events.Envelope) error {
			calls.Add(1)
			return b.enqueueFollowUp(ctx, tx, ev)
		}})
		b.awaitDrained(t, "followups")

		got := b.followUps(t)
		require.Len(t, got, n)
		for i := 1; i <= n; i++ {
			require.Equal(t, 1, got[events.EventID(int64(i), 0)], "follow-ups of event %d", i)
		}
		require.Equal(t, int32(n-1), calls.Load(), "the handler ran once per event not yet in the inbox")
	})
}

// TestConsumerPoisonEvent: an event whose handler always fails becomes a
// dead letter after MaxDeliveries, while the others keep flowing; a retry
// request after the handler is fixed handles it once and removes it.
func TestConsumerPoisonEvent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setupConsumer(t, backend)
		var (
			fixed         atomic.Bool
			poisonTries   atomic.Int32
			poison        = event(1, "jobs/poison")
			maxDeliveries = 3
		)
		handler := func(ctx context.Context, tx store.Tx, ev events.Envelope) error {
			if ev.Subject == "jobs/poison" && !fixed.Load() {
				poisonTries.Add(1)
				return errors.New("cannot score this judgment")
			}
			return b.enqueueFollowUp(ctx, tx, ev)
		}
		b.start(t, events.ConsumerConfig{Handler: handler, MaxDeliveries: maxDeliveries})
		b.publish(t, poison, poison.ID)
		for i := 2; i <= 11; i++ {
			ev := event(i, "jobs/ok")
			b.publish(t, ev, ev.ID)
		}
		b.awaitDrained(t, "followups")

		got := b.followUps(t)
		require.Len(t, got, 10, "the other events kept flowing")
		require.Zero(t, got[poison.ID])
		require.Equal(t, int32(maxDeliveries), poisonTries.Load())
		ds, err := b.store.DeadLetterList(b.ctx, &store.DeadLetterListParams{Consumer: "followups"})
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, poison.ID, ds[0].EventID)
		require.Equal(t, job.EventStateChanged, ds[0].EventType)
		require.Equal(t, maxDeliveries, ds[0].Deliveries)
		require.Equal(t, "cannot score this judgment", ds[0].LastError)
		var env events.Envelope
		require.NoError(t, json.Unmarshal(ds[0].Envelope, &env))
		require.Equal(t, poison.ID, env.ID)

		// A retry while still broken counts one more failure.
		_, err = b.store.DeadLetterRequestRetry(b.ctx, &store.DeadLetterRequestRetryParams{Consumer: "followups", EventID: poison.ID, Now: time.Now()})
		require.NoError(t, err)
		await(t, func() bool {
			ds, err := b.store.DeadLetterList(b.ctx, &store.DeadLetterListParams{Consumer: "followups"})
			return err == nil && len(ds) == 1 && ds[0].Deliveries == maxDeliveries+1 && ds[0].RetryRequestedAt.IsZero()
		}, "failed retry is counted")

		// Fixed: the retry handles it, once.
		fixed.Store(true)
		_, err = b.store.DeadLetterRequestRetry(b.ctx, &store.DeadLetterRequestRetryParams{Consumer: "followups", EventID: poison.ID, Now: time.Now()})
		require.NoError(t, err)
		await(t, func() bool { return b.followUps(t)[poison.ID] == 1 }, "retried dead letter handled")
		ds, err = b.store.DeadLetterList(b.ctx, &store.DeadLetterListParams{Consumer: "followups"})
		require.NoError(t, err)
		require.Empty(t, ds)
		require.Len(t, b.followUps(t), 11)
	})
}

// TestConsumerUndecodableMessage: a body that is not an envelope is a dead
// letter at once, under its Nats-Msg-Id.
func TestConsumerUndecodableMessage(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t, testdb.Backends()[0])
	b.start(t, events.ConsumerConfig{})
	_, err := b.js.PublishMsg(b.ctx, &nats.Msg{Subject: events.NATSSubject("job.progress"), Data: []byte("not json")}, jetstream.WithMsgID("garbage-1"))
	require.NoError(t, err)
	ok := event(2, "jobs/x")
	b.publish(t, ok, ok.ID)
	b.awaitDrained(t, "followups")
	require.Equal(t, map[string]int{ok.ID: 1}, b.followUps(t))
	ds, err := b.store.DeadLetterList(b.ctx, &store.DeadLetterListParams{})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "garbage-1", ds[0].EventID)
	require.Equal(t, 1, ds[0].Deliveries)
	require.JSONEq(t, `"not json"`, string(ds[0].Envelope))
	require.Contains(t, ds[0].LastError, "decode event envelope")
}

// TestConsumerConcurrentInstances: two instances of one durable consumer
// on one database share many events; each event's effect exists once.
func TestConsumerConcurrentInstances(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setupConsumer(t, backend)
		const n = 200
		var perInstance [2]atomic.Int32
		for i := range perInstance {
			b.start(t, events.ConsumerConfig{FetchBatch: 8, Handler: func(ctx context.Context, tx store.Tx, ev events.Envelope) error {
				perInstance[i].Add(1)
				return b.enqueueFollowUp(ctx, tx, ev)
			}})
		}
		for i := 1; i <= n; i++ {
			ev := event(i, "jobs/x")
			b.publish(t, ev, ev.ID)
			if i%4 == 0 { // and some copies, to make the instances race
				b.publish(t, ev, ev.ID+"/again")
			}
		}
		b.awaitDrained(t, "followups")
		got := b.followUps(t)
		require.Len(t, got, n)
		for id, k := range got {
			require.Equal(t, 1, k, "follow-ups of event %s", id)
		}
		t.Logf("handled per instance: %d, %d", perInstance[0].Load(), perInstance[1].Load())
	})
}

// TestConsumerTypesFilter: a consumer of some types sees only those.
func TestConsumerTypesFilter(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t, testdb.Backends()[0])
	b.start(t, events.ConsumerConfig{Types: []string{job.EventProgress}})
	a, p := event(1, "jobs/x"), event(2, "jobs/x")
	p.Type = job.EventProgress
	b.publish(t, a, a.ID)
	b.publish(t, p, p.ID)
	b.awaitDrained(t, "followups")
	require.Equal(t, map[string]int{p.ID: 1}, b.followUps(t))
}

// TestConsumerLifecycle: Start twice starts once, Stop is safe twice and
// before Start, and a stopped consumer resumes where it left off.
func TestConsumerLifecycle(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t, testdb.Backends()[0])
	never, err := events.NewConsumer(b.store, b.js, events.ConsumerConfig{Name: "never", Handler: b.enqueueFollowUp})
	require.NoError(t, err)
	never.Stop()

	c := b.start(t, events.ConsumerConfig{})
	require.NoError(t, c.Start(b.ctx))
	first := event(1, "jobs/x")
	b.publish(t, first, first.ID)
	await(t, func() bool { return len(b.followUps(t)) == 1 })
	c.Stop()
	c.Stop()

	second := event(2, "jobs/x")
	b.publish(t, second, second.ID)
	require.NoError(t, c.Start(b.ctx))
	b.awaitDrained(t, "followups")
	require.Equal(t, map[string]int{first.ID: 1, second.ID: 1}, b.followUps(t))
}

// TestConsumerStartFailsWithoutTheStream: a Start that fails (the stream
// is missing) leaves the consumer stopped, not half started: once the
// stream exists, Start runs it.
func TestConsumerStartFailsWithoutTheStream(t *testing.T) {
	t.Parallel()
	b := setupConsumer(t, testdb.Backends()[0])
	cfg, err := b.js.Stream(b.ctx, events.StreamName)
	require.NoError(t, err)
	require.NoError(t, b.js.DeleteStream(b.ctx, events.StreamName))
	c, err := events.NewConsumer(b.store, b.js, events.ConsumerConfig{
		Name: "followups", Handler: b.enqueueFollowUp, RetryPollInterval: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	require.ErrorContains(t, c.Start(b.ctx), "create durable consumer on "+events.StreamName)
	c.Stop() // nothing to stop

	_, err = b.js.CreateOrUpdateStream(b.ctx, cfg.CachedInfo().Config)
	require.NoError(t, err)
	require.NoError(t, c.Start(b.ctx))
	t.Cleanup(c.Stop)
	ev := event(1, "jobs/x")
	b.publish(t, ev, ev.ID)
	b.awaitDrained(t, "followups")
	require.Equal(t, map[string]int{ev.ID: 1}, b.followUps(t))
}

func TestConsumerConfigValidate(t *testing.T) {
	t.Parallel()
	h := func(context.Context, store.Tx, events.Envelope) error { return nil }
	for _, tc := range []struct {
		cfg  events.ConsumerConfig
		want string
	}{
		{events.ConsumerConfig{Handler: h}, "Name"},
		{events.ConsumerConfig{Name: "a.b", Handler: h}, "Name"},
		{events.ConsumerConfig{Name: "qc"}, "Handler is required"},
		{events.ConsumerConfig{Name: "qc", Handler: h, Types: []string{""}}, "empty event type"},
		{events.ConsumerConfig{Name: "qc", Handler: h, NakBackoffBase: time.Minute, NakBackoffMax: time.Second}, "NakBackoffMax"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		require.ErrorContains(t, err, tc.want, "%+v", tc.cfg)
	}
	cfg := events.ConsumerConfig{Name: "qc", Handler: h}.WithDefaults()
	require.NoError(t, cfg.Validate())
	require.Equal(t, events.MaxDeliveriesDefault, cfg.MaxDeliveries)
	require.Equal(t, events.AckWaitDefault, cfg.AckWait)
}

// Compile-time check: the JetStream client satisfies the consumer's
// interface.
var _ events.JetStream = jetstream.JetStream(nil)
