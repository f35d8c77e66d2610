package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

// webhook inserts a subscription to every event type.
func (b *bundle) webhook(t *testing.T, url string) *store.Webhook {
	t.Helper()
	w, err := b.s.WebhookInsert(b.ctx, &store.WebhookInsertParams{
		ID: newID(), URL: url, EventTypes: []string{"*"}, Secret: "0123456789abcdef", Now: base,
	})
	require.NoError(t, err)
	return w
}

// deliveriesFor makes one delivery per (webhook, event index) of outbox
// row ev.
func deliveriesFor(ev *store.OutboxEvent, events int, hooks ...*store.Webhook) []*store.WebhookDeliveryInsertParams {
	var out []*store.WebhookDeliveryInsertParams
	for _, w := range hooks {
		for i := range events {
			out = append(out, &store.WebhookDeliveryInsertParams{
				ID: newID(), WebhookID: w.ID, EventID: fmt.Sprintf("%d-%d", ev.ID, i), EventType: ev.Type,
				OutboxID: ev.ID, EventIndex: i, Payload: json.RawMessage(fmt.Sprintf(`{"id":"%d-%d"}`, ev.ID, i)),
			})
		}
	}
	return out
}

// pendingOutbox lists every outbox row not fanned out yet.
func (b *bundle) pendingOutbox(t *testing.T) []*store.OutboxEvent {
	t.Helper()
	evs, err := b.s.WebhookOutboxListPending(b.ctx, &store.WebhookOutboxListPendingParams{Limit: 1000})
	require.NoError(t, err)
	return evs
}

// fanOut fans every pending outbox row out to hooks (events per row) at now.
func (b *bundle) fanOut(t *testing.T, now time.Time, events int, hooks ...*store.Webhook) int {
	t.Helper()
	p := &store.WebhookFanOutParams{Now: now}
	for _, ev := range b.pendingOutbox(t) {
		p.OutboxIDs = append(p.OutboxIDs, ev.ID)
		p.Deliveries = append(p.Deliveries, deliveriesFor(ev, events, hooks...)...)
	}
	n, err := b.s.WebhookFanOut(b.ctx, p)
	require.NoError(t, err)
	return n
}

func (b *bundle) deliveries(t *testing.T, w *store.Webhook, state store.WebhookDeliveryState) []*store.WebhookDelivery {
	t.Helper()
	ds, err := b.s.WebhookDeliveryList(b.ctx, &store.WebhookDeliveryListParams{WebhookID: w.ID, State: state})
	require.NoError(t, err)
	return ds
}

func (b *bundle) claim(t *testing.T, now time.Time, maxN, perWebhook int, exclude ...uuid.UUID) []*store.WebhookDelivery {
	t.Helper()
	ds, err := b.s.WebhookDeliveryClaim(b.ctx, &store.WebhookDeliveryClaimParams{
		Now: now, Max: maxN, PerWebhook: perWebhook, Exclude: exclude, LeaseUntil: now.Add(time.Minute),
	})
	require.NoError(t, err)
	return ds
}

func testWebhook(t *testing.T, open opener) {
	t.Run("InsertGetListDelete", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		w, err := b.s.WebhookInsert(b.ctx, &store.WebhookInsertParams{
			ID: newID(), URL: "http://127.0.0.1:9/hook", EventTypes: []string{"job.state_changed", "job.progress"},
			Secret: "0123456789abcdef", Now: base,
		})
		require.NoError(t, err)
		require.Equal(t, "http://127.0.0.1:9/hook", w.URL)
		require.Equal(t, []string{"job.state_changed", "job.progress"}, w.EventTypes)
		require.Equal(t, "0123456789abcdef", w.Secret)
		requireTime(t, base, w.CreatedAt)

		got, err := b.s.WebhookGet(b.ctx, w.ID)
		require.NoError(t, err)
		require.Equal(t, w, got)
		w2 := b.webhook(t, "http://localhost/b")
		list, err := b.s.WebhookList(b.ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, w.ID, list[0].ID)
		require.Equal(t, w2.ID, list[1].ID)

		require.NoError(t, b.s.WebhookDelete(b.ctx, w.ID))
		_, err = b.s.WebhookGet(b.ctx, w.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, b.s.WebhookDelete(b.ctx, w.ID), store.ErrNotFound)
		list, err = b.s.WebhookList(b.ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
	})

	t.Run("FanOutOnceAndMarks", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		w1, w2 := b.webhook(t, "http://127.0.0.1/1"), b.webhook(t, "http://127.0.0.1/2")
		b.insert(t, newJob(newQueue()), newJob(newQueue()))
		b.insert(t, newJob(newQueue()))
		pending := b.pendingOutbox(t)
		require.Len(t, pending, 2)
		require.Less(t, pending[0].ID, pending[1].ID)

		// Two dispatchers that read the same rows: the second inserts nothing.
		p1 := &store.WebhookFanOutParams{Now: at(time.Second), OutboxIDs: []int64{pending[0].ID, pending[1].ID}}
		p1.Deliveries = append(deliveriesFor(pending[0], 2, w1, w2), deliveriesFor(pending[1], 1, w1, w2)...)
		p2 := &store.WebhookFanOutParams{Now: at(time.Second), OutboxIDs: p1.OutboxIDs}
		p2.Deliveries = append(deliveriesFor(pending[0], 2, w1, w2), deliveriesFor(pending[1], 1, w1, w2)...)
		n, err := b.s.WebhookFanOut(b.ctx, p1)
		require.NoError(t, err)
		require.Equal(t, 6, n)
		n, err = b.s.WebhookFanOut(b.ctx, p2)
		require.NoError(t, err)
		require.Zero(t, n, "each (webhook, event) is inserted once")
		require.Empty(t, b.pendingOutbox(t), "fanned-out rows are marked")

		ds := b.deliveries(t, w1, "")
		require.Len(t, ds, 3)
		// Newest event first.
		require.Equal(t, []string{fmt.Sprintf("%d-0", pending[1].ID), fmt.Sprintf("%d-1", pending[0].ID), fmt.Sprintf("%d-0", pending[0].ID)},
			[]string{ds[0].EventID, ds[1].EventID, ds[2].EventID})
		d := ds[2]
		require.Equal(t, w1.ID, d.WebhookID)
		require.Equal(t, store.DeliveryPending, d.State)
		require.Zero(t, d.Attempts)
		require.JSONEq(t, fmt.Sprintf(`{"id":"%d-0"}`, pending[0].ID), string(d.Payload))
		require.Equal(t, pending[0].Type, d.EventType)
		requireTime(t, at(time.Second), d.NextAttemptAt)
		requireTime(t, at(time.Second), d.CreatedAt)
		require.True(t, d.LastAttemptAt.IsZero())
		require.True(t, d.FinishedAt.IsZero())

		// New rows only are pending; rows without subscribers are marked too.
		b.insert(t, newJob(newQueue()))
		require.Len(t, b.pendingOutbox(t), 1)
		require.Zero(t, b.fanOut(t, at(2*time.Second), 1))
		require.Empty(t, b.pendingOutbox(t))
	})

	t.Run("ConcurrentFanOut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		w := b.webhook(t, "http://127.0.0.1/")
		for range 5 {
			b.insert(t, newJob(newQueue()))
		}
		pending := b.pendingOutbox(t)
		var wg sync.WaitGroup
		counts := make([]int, 4)
		for i := range counts {
			wg.Go(func() {
				p := &store.WebhookFanOutParams{Now: base}
				for _, ev := range pending {
					p.OutboxIDs = append(p.OutboxIDs, ev.ID)
					p.Deliveries = append(p.Deliveries, deliveriesFor(ev, 1, w)...)
				}
				n, err := b.s.WebhookFanOut(b.ctx, p)
				if err != nil {
					t.Error(err)
				}
				counts[i] = n
			})
		}
		wg.Wait()
		require.Equal(t, 5, counts[0]+counts[1]+counts[2]+counts[3])
		require.Len(t, b.deliveries(t, w, ""), 5)
	})

	t.Run("FanOutSkipsDeletedWebhook", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		w, gone := b.webhook(t, "http://127.0.0.1/"), b.webhook(t, "http://127.0.0.1/gone")
		b.insert(t, newJob(newQueue()))
		pending := b.pendingOutbox(t)
		require.NoError(t, b.s.WebhookDelete(b.ctx, gone.ID))
		n, err := b.s.WebhookFanOut(b.ctx, &store.WebhookFanOutParams{
			Now: base, OutboxIDs: []int64{pending[0].ID}, Deliveries: deliveriesFor(pending[0], 1, w, gone),
		})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Empty(t, b.pendingOutbox(t))
	})

	t.Run("ClaimFinishRelease", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		w1, w2 := b.webhook(t, "http://127.0.0.1/1"), b.webhook(t, "http://127.0.0.1/2")
		b.insert(t, newJob(newQueue()))
		require.Equal(t, 6, b.fanOut(t, base, 3, w1, w2))

		require.Empty(t, b.claim(t, base.Add(-time.Second), 10, 10), "nothing is due before its time")
		got := b.claim(t, base, 10, 2, w2.ID)
		require.Len(t, got, 2, "at most PerWebhook of a webhook, none of an excluded one")
		for i, d := range got {
			require.Equal(t, w1.ID, d.WebhookID)
			require.Equal(t, i, d.EventIndex, "oldest event first")
			require.Equal(t, 1, d.Attempts)
			requireTime(t, base.Add(time.Minute), d.NextAttemptAt, "leased until")
			require.True(t, d.LastAttemptAt.IsZero(), "claimed is not attempted: the attempt may be given back")
		}
		rest := b.claim(t, base, 10, 10)
		require.Len(t, rest, 4, "claimed rows are not claimed again")
		require.Empty(t, b.claim(t, at(30*time.Second), 10, 10))

		// Delivered.
		ok, err := b.s.WebhookDeliveryFinish(b.ctx, &store.WebhookDeliveryFinishParams{
			ID: got[0].ID, Attempt: 2, State: store.DeliveryDelivered, StatusCode: 200, Now: at(time.Second),
		})
		require.NoError(t, err)
		require.False(t, ok, "fenced: wrong attempt")
		ok, err = b.s.WebhookDeliveryFinish(b.ctx, &store.WebhookDeliveryFinishParams{
			ID: got[0].ID, Attempt: 1, State: store.DeliveryDelivered, StatusCode: 204,
			AttemptedAt: at(500 * time.Millisecond), Now: at(time.Second),
		})
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = b.s.WebhookDeliveryFinish(b.ctx, &store.WebhookDeliveryFinishParams{
			ID: got[0].ID, Attempt: 1, State: store.DeliveryDead, Now: at(time.Second),
		})
		require.NoError(t, err)
		require.False(t, ok, "a finished delivery is not finished again")

		// Retry later.
		ok, err = b.s.WebhookDeliveryFinish(b.ctx, &store.WebhookDeliveryFinishParams{
			ID: got[1].ID, Attempt: 1, State: store.DeliveryPending, StatusCode: 503, Error: "HTTP 503",
			NextAttemptAt: at(10 * time.Second), Now: at(time.Second),
		})
		require.NoError(t, err)
		require.True(t, ok)
		// Released: the attempt is given back.
		ok, err = b.s.WebhookDeliveryRelease(b.ctx, &store.WebhookDeliveryReleaseParams{
			ID: rest[0].ID, Attempt: 1, NextAttemptAt: at(5 * time.Second), Now: at(time.Second),
		})
		require.NoError(t, err)
		require.True(t, ok)

		byID := map[uuid.UUID]*store.WebhookDelivery{}
		for _, d := range append(b.deliveries(t, w1, ""), b.deliveries(t, w2, "")...) {
			byID[d.ID] = d
		}
		d := byID[got[0].ID]
		require.Equal(t, store.DeliveryDelivered, d.State)
		require.Equal(t, 204, d.LastStatusCode)
		require.Empty(t, d.LastError)
		requireTime(t, at(time.Second), d.FinishedAt)
		requireTime(t, at(500*time.Millisecond), d.LastAttemptAt, "when the attempt was sent")
		d = byID[got[1].ID]
		require.Equal(t, store.DeliveryPending, d.State)
		require.Equal(t, 503, d.LastStatusCode)
		require.Equal(t, "HTTP 503", d.LastError)
		require.Equal(t, 1, d.Attempts)
		requireTime(t, at(10*time.Second), d.NextAttemptAt)
		require.True(t, d.FinishedAt.IsZero())
		requireTime(t, at(time.Second), d.LastAttemptAt, "AttemptedAt not given: Now")
		d = byID[rest[0].ID]
		require.Zero(t, d.Attempts)
		requireTime(t, at(5*time.Second), d.NextAttemptAt)
		// Claimed and given back (an open breaker): it showed attempts 0
		// with the claim's time as lastAttemptAt, an attempt never made.
		require.True(t, d.LastAttemptAt.IsZero(), "a released attempt was not made")

		again := b.claim(t, at(10*time.Second), 10, 10)
		require.Len(t, again, 2, "the retry and the released one are due again")
		for _, d := range again {
			if d.ID == got[1].ID {
				require.Equal(t, 2, d.Attempts)
			} else {
				require.Equal(t, rest[0].ID, d.ID)
				require.Equal(t, 1, d.Attempts)
			}
		}

		pending := b.deliveries(t, w1, store.DeliveryPending)
		require.Len(t, pending, 2)
		delivered := b.deliveries(t, w1, store.DeliveryDelivered)
		require.Len(t, delivered, 1)
	})

	// A new leader takes over the claims another node left unfinished
	// (it died sending them): due at once, their attempts still counted,
	// and the old claim fenced once they are claimed again. Its own
	// claims, and claims finished or released, are not touched.
	t.Run("Reclaim", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		w := b.webhook(t, "http://127.0.0.1/1")
		b.insert(t, newJob(newQueue()))
		require.Equal(t, 4, b.fanOut(t, base, 4, w))
		claimBy := func(node string, now time.Time, n int) []*store.WebhookDelivery {
			t.Helper()
			ds, err := b.s.WebhookDeliveryClaim(b.ctx, &store.WebhookDeliveryClaimParams{
				Now: now, Max: n, PerWebhook: n, LeaseUntil: now.Add(time.Hour), NodeID: node,
			})
			require.NoError(t, err)
			return ds
		}
		reclaim := func(node string, now time.Time) int {
			t.Helper()
			n, err := b.s.WebhookDeliveryReclaim(b.ctx, &store.WebhookDeliveryReclaimParams{NodeID: node, Now: now})
			require.NoError(t, err)
			return n
		}
		old := claimBy("dead", base, 4)
		require.Len(t, old, 4)
		// One finished, one released by the old holder: no claim left.
		ok, err := b.s.WebhookDeliveryFinish(b.ctx, &store.WebhookDeliveryFinishParams{
			ID: old[0].ID, Attempt: 1, State: store.DeliveryDelivered, StatusCode: 200, Now: at(time.Second),
		})
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = b.s.WebhookDeliveryRelease(b.ctx, &store.WebhookDeliveryReleaseParams{
			ID: old[1].ID, Attempt: 1, NextAttemptAt: at(time.Hour), Now: at(time.Second),
		})
		require.NoError(t, err)
		require.True(t, ok)

		require.Zero(t, reclaim("dead", at(2*time.Second)), "a node's own claims are its own")
		require.Equal(t, 2, reclaim("new", at(2*time.Second)), "the two claims left unfinished")
		require.Zero(t, reclaim("new", at(2*time.Second)), "taken over once")
		again := claimBy("new", at(2*time.Second), 10)
		require.Len(t, again, 2, "due at once, not after the old claim's lease")
		for i, d := range again {
			require.Equal(t, old[i+2].ID, d.ID, "in event order")
			require.Equal(t, 2, d.Attempts, "the old claim's attempt stays counted: it may have been sent")
		}
		ok, err = b.s.WebhookDeliveryFinish(b.ctx, &store.WebhookDeliveryFinishParams{
			ID: old[2].ID, Attempt: 1, State: store.DeliveryDelivered, StatusCode: 200, Now: at(3 * time.Second),
		})
		require.NoError(t, err)
		require.False(t, ok, "the old claim is fenced")
		require.Equal(t, 2, reclaim("third", at(3*time.Second)), "the next holder takes them over in turn")
	})

	// A delivery whose claim expired and that an open breaker then skipped
	// is no one's claim: a new holder's reclaim does not bring it forward,
	// so the breaker's backoff holds.
	t.Run("SkippedIsNotReclaimed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		w := b.webhook(t, "http://127.0.0.1/1")
		b.insert(t, newJob(newQueue()))
		require.Equal(t, 1, b.fanOut(t, base, 1, w))
		ds, err := b.s.WebhookDeliveryClaim(b.ctx, &store.WebhookDeliveryClaimParams{
			Now: base, Max: 1, PerWebhook: 1, LeaseUntil: at(time.Minute), NodeID: "dead",
		})
		require.NoError(t, err)
		require.Len(t, ds, 1)
		n, err := b.s.WebhookDeliverySkip(b.ctx, &store.WebhookDeliverySkipParams{
			WebhookIDs: []uuid.UUID{w.ID}, Now: at(time.Minute), Error: "breaker open", MaxAttempts: 5,
			Delays: []time.Duration{time.Hour, time.Hour, time.Hour, time.Hour}, Max: 10,
		})
		require.NoError(t, err)
		require.Equal(t, 1, n, "the expired claim is due again, and skipped")
		n, err = b.s.WebhookDeliveryReclaim(b.ctx, &store.WebhookDeliveryReclaimParams{NodeID: "new", Now: at(2 * time.Minute)})
		require.NoError(t, err)
		require.Zero(t, n, "the skip ended the old claim")
		d := b.deliveries(t, w, store.DeliveryPending)
		require.Len(t, d, 1)
		require.Equal(t, 2, d[0].Attempts)
		requireTime(t, at(time.Minute+time.Hour), d[0].NextAttemptAt, "the breaker's backoff is kept")
	})

	// An open circuit breaker: due deliveries are not sent, but each due
	// attempt counts, so a backlog follows the retry schedule to DEAD.
	t.Run("Skip", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		w1, w2 := b.webhook(t, "http://127.0.0.1/1"), b.webhook(t, "http://127.0.0.1/2")
		b.insert(t, newJob(newQueue()))
		require.Equal(t, 8, b.fanOut(t, base, 4, w1, w2))
		claimed := b.claim(t, base, 1, 1, w2.ID) // w1's first event, leased
		require.Len(t, claimed, 1)

		skip := func(now time.Time, maxN int) int {
			t.Helper()
			n, err := b.s.WebhookDeliverySkip(b.ctx, &store.WebhookDeliverySkipParams{
				WebhookIDs: []uuid.UUID{w1.ID}, Now: now, Error: "breaker open", MaxAttempts: 3,
				Delays: []time.Duration{10 * time.Second, 20 * time.Second}, Max: maxN,
			})
			require.NoError(t, err)
			return n
		}
		require.Zero(t, skip(base.Add(-time.Second), 0), "nothing is due before its time")
		require.Equal(t, 2, skip(base, 2), "at most Max")
		require.Equal(t, 1, skip(base, 0), "the claimed one is not due; w2 is not named")
		byIndex := func(w *store.Webhook) map[int]*store.WebhookDelivery {
			m := map[int]*store.WebhookDelivery{}
			for _, d := range b.deliveries(t, w, "") {
				m[d.EventIndex] = d
			}
			return m
		}
		ds := byIndex(w1)
		require.Equal(t, 1, ds[0].Attempts, "claimed, untouched")
		requireTime(t, base.Add(time.Minute), ds[0].NextAttemptAt)
		for i := 1; i < 4; i++ {
			d := ds[i]
			require.Equal(t, store.DeliveryPending, d.State)
			require.Equal(t, 1, d.Attempts)
			require.Equal(t, "breaker open", d.LastError)
			require.Zero(t, d.LastStatusCode)
			require.True(t, d.LastAttemptAt.IsZero(), "no request was sent")
			requireTime(t, at(10*time.Second), d.NextAttemptAt, "Delays[0] after the first attempt")
		}
		for _, d := range b.deliveries(t, w2, "") {
			require.Zero(t, d.Attempts, "w2 is not skipped")
		}

		require.Zero(t, skip(at(9*time.Second), 0))
		require.Equal(t, 3, skip(at(10*time.Second), 0))
		for i := 1; i < 4; i++ {
			require.Equal(t, 2, byIndex(w1)[i].Attempts)
			requireTime(t, at(30*time.Second), byIndex(w1)[i].NextAttemptAt, "Delays[1] after the second")
		}
		require.Equal(t, 3, skip(at(30*time.Second), 0))
		for i := 1; i < 4; i++ {
			d := byIndex(w1)[i]
			require.Equal(t, store.DeliveryDead, d.State, "the third of MaxAttempts 3")
			require.Equal(t, 3, d.Attempts)
			requireTime(t, at(30*time.Second), d.FinishedAt)
		}
		require.Zero(t, skip(at(50*time.Second), 0), "a DEAD delivery is not skipped; the claimed one is still leased")
		require.Len(t, b.deliveries(t, w1, store.DeliveryDead), 3)

		_, err := b.s.WebhookDeliverySkip(b.ctx, &store.WebhookDeliverySkipParams{
			WebhookIDs: []uuid.UUID{w1.ID}, Now: base, MaxAttempts: 3, Delays: []time.Duration{time.Second},
		})
		require.Error(t, err, "too few delays")
	})

	// An endpoint recovered: its deliveries waiting since before then are
	// brought forward, oldest event first, at most Max; one attempted
	// since and another webhook's are not. One batch at a time: none more
	// while some brought forward are not claimed yet; a delivery made
	// since the recovery is not of the backlog and does not hold it up.
	t.Run("Hasten", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		w1, w2 := b.webhook(t, "http://127.0.0.1/1"), b.webhook(t, "http://127.0.0.1/2")
		b.insert(t, newJob(newQueue()))
		require.Equal(t, 12, b.fanOut(t, base, 6, w1, w2))
		// w1: event 0 attempted before the recovery (at 1 s), event 1
		// after it (at 20 s), events 2..5 skipped behind the breaker.
		for i, sent := range []time.Time{at(time.Second), at(20 * time.Second)} {
			ds := b.claim(t, at(time.Duration(i)*time.Second), 1, 1, w2.ID)
			require.Len(t, ds, 1)
			require.Equal(t, i, ds[0].EventIndex)
			ok, err := b.s.WebhookDeliveryFinish(b.ctx, &store.WebhookDeliveryFinishParams{
				ID: ds[0].ID, Attempt: 1, State: store.DeliveryPending, StatusCode: 503, Error: "down",
				NextAttemptAt: at(time.Hour), AttemptedAt: sent, Now: sent,
			})
			require.NoError(t, err)
			require.True(t, ok)
		}
		n, err := b.s.WebhookDeliverySkip(b.ctx, &store.WebhookDeliverySkipParams{
			WebhookIDs: []uuid.UUID{w1.ID, w2.ID}, Now: at(2 * time.Second), Error: "breaker open", MaxAttempts: 5,
			Delays: []time.Duration{time.Hour, time.Hour, time.Hour, time.Hour},
		})
		require.NoError(t, err)
		require.Equal(t, 10, n, "w1's events 2..5 and all of w2's")

		hasten := func(now time.Time, maxN int) store.WebhookDeliveryHastenResult {
			t.Helper()
			r, err := b.s.WebhookDeliveryHasten(b.ctx, &store.WebhookDeliveryHastenParams{
				WebhookID: w1.ID, Before: at(10 * time.Second), Now: now, Max: maxN,
			})
			require.NoError(t, err)
			return *r
		}
		now := at(30 * time.Second)
		byIndex := func() map[int]*store.WebhookDelivery { // the backlog's
			m := map[int]*store.WebhookDelivery{}
			for _, d := range b.deliveries(t, w1, "") {
				if d.CreatedAt.Before(at(10 * time.Second)) {
					m[d.EventIndex] = d
				}
			}
			return m
		}
		// A claim in flight is not hastened (its lease is not due): the
		// caller's to ensure. These are sent before the next hasten.
		sent := func(ds []*store.WebhookDelivery) {
			t.Helper()
			for _, d := range ds {
				ok, err := b.s.WebhookDeliveryFinish(b.ctx, &store.WebhookDeliveryFinishParams{
					ID: d.ID, Attempt: d.Attempts, State: store.DeliveryDelivered, StatusCode: 200, Now: now,
				})
				require.NoError(t, err)
				require.True(t, ok)
			}
		}
		eventIndexes := func(ds []*store.WebhookDelivery) []int {
			got := []int{}
			for _, d := range ds {
				got = append(got, d.EventIndex)
			}
			return got
		}
		require.Equal(t, store.WebhookDeliveryHastenResult{Hastened: 3}, hasten(now, 3), "at most Max")
		ds := byIndex()
		for _, i := range []int{0, 2, 3} {
			requireTime(t, now, ds[i].NextAttemptAt, "oldest event first: "+fmt.Sprint(i))
		}
		for _, i := range []int{4, 5} {
			requireTime(t, at(2*time.Second).Add(time.Hour), ds[i].NextAttemptAt, "beyond Max: "+fmt.Sprint(i))
		}
		require.Equal(t, store.WebhookDeliveryHastenResult{Waiting: 3}, hasten(now.Add(time.Second), 0),
			"the batch brought forward is not claimed yet: none more")
		requireTime(t, at(2*time.Second).Add(time.Hour), byIndex()[4].NextAttemptAt, "still waiting its turn")

		// A new event, made after the recovery, due now.
		b.insert(t, newJob(newQueue()))
		require.Equal(t, 1, b.fanOut(t, at(20*time.Second), 1, w1))
		batch := b.claim(t, now, 3, 3, w2.ID)
		require.Equal(t, []int{0, 2, 3}, eventIndexes(batch), "the batch, claimed")
		sent(batch)
		require.Equal(t, store.WebhookDeliveryHastenResult{Hastened: 2}, hasten(now, 0),
			"events 4 and 5 (event 1 was attempted after Before); the new event due is not of the backlog")
		require.Equal(t, store.WebhookDeliveryHastenResult{Waiting: 2}, hasten(now, 0), "nothing more to bring forward")
		ds = byIndex()
		requireTime(t, at(time.Hour), ds[1].NextAttemptAt, "attempted since the recovery: its own schedule")
		require.Equal(t, "breaker open", ds[5].LastError, "the last error stays until the next attempt")
		require.Equal(t, 1, ds[5].Attempts)
		require.True(t, ds[5].LastAttemptAt.IsZero())
		require.Equal(t, store.DeliveryDelivered, ds[0].State)

		due := b.claim(t, now, 10, 10, w2.ID)
		require.Equal(t, []int{4, 5, 0}, eventIndexes(due), "due now, in event order: the backlog's, then the new event")
		sent(due)
		require.Equal(t, store.WebhookDeliveryHastenResult{}, hasten(now, 0), "drained")
		for _, d := range b.deliveries(t, w2, "") {
			requireTime(t, at(2*time.Second).Add(time.Hour), d.NextAttemptAt, "another webhook's are left alone")
		}
	})

	t.Run("RedeliverAndPrune", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		w, other := b.webhook(t, "http://127.0.0.1/"), b.webhook(t, "http://127.0.0.1/other")
		b.insert(t, newJob(newQueue()))
		b.fanOut(t, base, 2, w)
		ds := b.claim(t, base, 10, 10)
		require.Len(t, ds, 2)
		for i, st := range []store.WebhookDeliveryState{store.DeliveryDead, store.DeliveryDelivered} {
			ok, err := b.s.WebhookDeliveryFinish(b.ctx, &store.WebhookDeliveryFinishParams{
				ID: ds[i].ID, Attempt: 1, State: st, StatusCode: 500, Error: "boom", Now: at(time.Second),
			})
			require.NoError(t, err)
			require.True(t, ok)
		}

		_, err := b.s.WebhookDeliveryRedeliver(b.ctx, &store.WebhookDeliveryRedeliverParams{WebhookID: other.ID, ID: ds[0].ID, Now: at(time.Hour)})
		require.ErrorIs(t, err, store.ErrNotFound, "a delivery is found under its own webhook only")
		d, err := b.s.WebhookDeliveryRedeliver(b.ctx, &store.WebhookDeliveryRedeliverParams{WebhookID: w.ID, ID: ds[0].ID, Now: at(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, store.DeliveryPending, d.State)
		require.Zero(t, d.Attempts)
		requireTime(t, at(time.Hour), d.NextAttemptAt)
		require.True(t, d.FinishedAt.IsZero())
		require.Equal(t, "boom", d.LastError, "the last error stays until the next attempt")
		again, err := b.s.WebhookDeliveryRedeliver(b.ctx, &store.WebhookDeliveryRedeliverParams{WebhookID: w.ID, ID: ds[0].ID, Now: at(2 * time.Hour)})
		require.NoError(t, err)
		requireTime(t, at(time.Hour), again.NextAttemptAt, "a PENDING delivery is left as it is")

		n, err := b.s.WebhookDeliveryDeleteFinished(b.ctx, &store.WebhookDeliveryDeleteFinishedParams{FinishedBefore: at(time.Second), Max: 10})
		require.NoError(t, err)
		require.Zero(t, n)
		n, err = b.s.WebhookDeliveryDeleteFinished(b.ctx, &store.WebhookDeliveryDeleteFinishedParams{FinishedBefore: at(2 * time.Second), Max: 10})
		require.NoError(t, err)
		require.Equal(t, 1, n, "the delivered one; the redelivered one is PENDING")
		require.Len(t, b.deliveries(t, w, ""), 1)

		require.NoError(t, b.s.WebhookDelete(b.ctx, w.ID))
		require.Empty(t, b.deliveries(t, w, ""), "deliveries go with their webhook")
		_, err = b.s.WebhookDeliveryRedeliver(b.ctx, &store.WebhookDeliveryRedeliverParams{WebhookID: w.ID, ID: ds[0].ID, Now: at(time.Hour)})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
