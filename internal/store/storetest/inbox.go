package storetest

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

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// consumer is the inbox consumer name of the tests.
const consumer = "qc"

// handle runs InboxHandle of (consumer, eventID) at base with fn.
func (b *bundle) handle(eventID string, fn func(ctx context.Context, tx store.Tx) error) (bool, error) {
	return b.handleAs(consumer, eventID, base, fn)
}

func (b *bundle) handleAs(name, eventID string, now time.Time, fn func(ctx context.Context, tx store.Tx) error) (bool, error) {
	return b.s.InboxHandle(b.ctx, &store.InboxHandleParams{Consumer: name, EventID: eventID, Now: now}, fn)
}

// enqueue is a consumer effect: insert one job (of the returned id) in tx.
func enqueue(queue string) (uuid.UUID, func(ctx context.Context, tx store.Tx) error) {
	p := newJob(queue)
	return p.ID, func(ctx context.Context, tx store.Tx) error {
		res, err := tx.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{p}, Now: base})
		if err != nil {
			return err
		}
		if len(res) != 1 || res[0].Job.ID != p.ID {
			return fmt.Errorf("insert in tx returned %v", res)
		}
		return nil
	}
}

// jobsIn lists every job of queue.
func (b *bundle) jobsIn(t *testing.T, queue string) []*job.Row {
	t.Helper()
	rows, err := b.s.JobList(b.ctx, &store.JobListParams{Queues: []string{queue}})
	require.NoError(t, err)
	return rows
}

// requireNoJob asserts id does not exist.
func (b *bundle) requireNoJob(t *testing.T, id uuid.UUID) {
	t.Helper()
	_, err := b.s.JobGet(b.ctx, id)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func (b *bundle) deadLetters(t *testing.T, name string) []*store.DeadLetter {
	t.Helper()
	ds, err := b.s.DeadLetterList(b.ctx, &store.DeadLetterListParams{Consumer: name})
	require.NoError(t, err)
	return ds
}

// recordDead records a failure of eventID for consumer at now.
func (b *bundle) recordDead(t *testing.T, name, eventID string, deliveries int, lastError string, now time.Time) bool {
	t.Helper()
	ok, err := b.s.DeadLetterRecord(b.ctx, &store.DeadLetterRecordParams{
		Consumer: name, EventID: eventID, EventType: "job.state_changed",
		Envelope:   json.RawMessage(`{"id":"` + eventID + `","type":"job.state_changed","data":{"n":1}}`),
		Deliveries: deliveries, LastError: lastError, Now: now,
	})
	require.NoError(t, err)
	return ok
}

func testInboxHandle(t *testing.T, open opener) {
	t.Run("EffectAndInboxCommitTogether", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		mark := b.outboxMark(t)
		id, fn := enqueue(q)
		handled, err := b.handle("1-0", fn)
		require.NoError(t, err)
		require.True(t, handled)
		row := b.get(t, id)
		require.Equal(t, job.StateQueued, row.State)
		// The effect writes its outbox row as the Store method does.
		b.requireOneStateChanged(t, mark, tr(row, "", job.StateQueued))
	})

	t.Run("DuplicateSkipsFn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		_, fn := enqueue(q)
		handled, err := b.handle("1-0", fn)
		require.NoError(t, err)
		require.True(t, handled)
		mark := b.outboxMark(t)
		handled, err = b.handle("1-0", func(context.Context, store.Tx) error {
			t.Error("fn ran for a duplicate")
			return nil
		})
		require.NoError(t, err)
		require.False(t, handled)
		require.Len(t, b.jobsIn(t, q), 1)
		b.requireNoOutbox(t, mark)
	})

	t.Run("ConsumersAreIndependent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		for _, name := range []string{"qc", "aggregate"} {
			_, fn := enqueue(q)
			handled, err := b.handleAs(name, "7-3", base, fn)
			require.NoError(t, err)
			require.True(t, handled, name)
		}
		require.Len(t, b.jobsIn(t, q), 2)
	})

	t.Run("FnErrorRollsEverythingBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		mark := b.outboxMark(t)
		boom := errors.New("boom")
		id, insert := enqueue(q)
		handled, err := b.handle("1-0", func(ctx context.Context, tx store.Tx) error {
			if err := insert(ctx, tx); err != nil {
				return err
			}
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.False(t, handled)
		b.requireNoJob(t, id)
		b.requireNoOutbox(t, mark)

		// The inbox row went too: a redelivery runs fn again.
		id, insert = enqueue(q)
		handled, err = b.handle("1-0", insert)
		require.NoError(t, err)
		require.True(t, handled)
		b.get(t, id)
	})

	t.Run("TxReadsAndTransitionsInTheTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		created := b.jobIn(t, job.StateCreated)
		done := b.jobIn(t, job.StateSuccess)
		q := newQueue()
		id, insert := enqueue(q)
		mark := b.outboxMark(t)
		handled, err := b.handle("2-0", func(ctx context.Context, tx store.Tx) error {
			if err := insert(ctx, tx); err != nil {
				return err
			}
			got, err := tx.JobGet(ctx, id) // its own uncommitted write
			if err != nil {
				return err
			}
			if got.State != job.StateQueued {
				return fmt.Errorf("read %s in tx", got.State)
			}
			if _, err := tx.JobGet(ctx, newID()); !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("get of a missing job: %v", err)
			}
			// A refused transition leaves the transaction usable.
			_, err = tx.JobTransition(ctx, &store.JobTransitionParams{ID: done.ID, From: job.StateCreated, To: job.StateQueued, Now: later})
			var ite *job.InvalidTransitionError
			if !errors.As(err, &ite) || ite.From != job.StateSuccess {
				return fmt.Errorf("transition of a SUCCESS job from CREATED: %v", err)
			}
			row, err := tx.JobTransition(ctx, &store.JobTransitionParams{ID: created.ID, From: job.StateCreated, To: job.StateQueued, Now: later})
			if err != nil {
				return err
			}
			if row.State != job.StateQueued {
				return fmt.Errorf("transitioned to %s", row.State)
			}
			return nil
		})
		require.NoError(t, err)
		require.True(t, handled)
		require.Equal(t, job.StateQueued, b.get(t, created.ID).State)
		requireUnchanged(t, done, b.get(t, done.ID))
		evs := b.outboxSince(t, mark)
		require.Len(t, evs, 2, describeEvents(evs))
		require.Equal(t, []job.Transition{tr(b.get(t, created.ID), job.StateCreated, job.StateQueued)}, decodeStateChanged(t, evs[1]))
	})

	t.Run("TxIsDeadAfterFn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		var kept store.Tx
		_, err := b.handle("1-0", func(_ context.Context, tx store.Tx) error {
			kept = tx
			return nil
		})
		require.NoError(t, err)
		_, err = kept.JobGet(b.ctx, newID())
		require.Error(t, err)
		require.NotErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("WakesWorkersAfterCommit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		ch, cancel := b.s.Subscribe(store.TopicJobAvailable)
		defer cancel()
		q := newQueue()
		n := 0
		awaitWakeup(t, ch, q, func() {
			n++
			_, fn := enqueue(q)
			handled, err := b.handle(fmt.Sprintf("%d-0", n), fn)
			require.NoError(t, err)
			require.True(t, handled)
		})
	})

	t.Run("ConcurrentHandlersOfOneEvent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		const n = 8
		var (
			wg      sync.WaitGroup
			handled atomic.Int32
			errs    = make(chan error, n)
		)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, fn := enqueue(q)
				ok, err := b.handle("9-1", fn)
				if err != nil {
					errs <- err
				}
				if ok {
					handled.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int32(1), handled.Load())
		require.Len(t, b.jobsIn(t, q), 1)
	})

	t.Run("DeleteHandled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		for i, now := range []time.Time{base, at(time.Minute), at(time.Hour)} {
			handled, err := b.handleAs(consumer, fmt.Sprintf("%d-0", i+1), now, func(context.Context, store.Tx) error { return nil })
			require.NoError(t, err)
			require.True(t, handled)
		}
		n, err := b.s.InboxDeleteHandled(b.ctx, &store.InboxDeleteHandledParams{HandledBefore: at(30 * time.Minute), Max: 1})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = b.s.InboxDeleteHandled(b.ctx, &store.InboxDeleteHandledParams{HandledBefore: at(30 * time.Minute)})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		for i, want := range []bool{true, true, false} {
			handled, err := b.handle(fmt.Sprintf("%d-0", i+1), func(context.Context, store.Tx) error { return nil })
			require.NoError(t, err)
			require.Equal(t, want, handled, "event %d", i+1)
		}
	})
}

func testDeadLetter(t *testing.T, open opener) {
	t.Run("RecordListAndCountFailures", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		require.Empty(t, b.deadLetters(t, ""))
		require.True(t, b.recordDead(t, "qc", "1-0", 5, "first", base))
		require.True(t, b.recordDead(t, "aggregate", "1-0", 3, "other", at(time.Second)))
		require.True(t, b.recordDead(t, "qc", "1-0", 1, "second", at(time.Minute)))

		ds := b.deadLetters(t, "qc")
		require.Len(t, ds, 1)
		d := ds[0]
		require.Equal(t, "qc", d.Consumer)
		require.Equal(t, "1-0", d.EventID)
		require.Equal(t, "job.state_changed", d.EventType)
		require.JSONEq(t, `{"id":"1-0","type":"job.state_changed","data":{"n":1}}`, string(d.Envelope))
		require.Equal(t, 6, d.Deliveries)
		require.Equal(t, "second", d.LastError)
		requireTime(t, base, d.CreatedAt)
		requireTime(t, at(time.Minute), d.UpdatedAt)
		require.True(t, d.RetryRequestedAt.IsZero())

		all := b.deadLetters(t, "")
		require.Len(t, all, 2)
		require.Equal(t, []string{"qc", "aggregate"}, []string{all[0].Consumer, all[1].Consumer}, "oldest first")
		limited, err := b.s.DeadLetterList(b.ctx, &store.DeadLetterListParams{Limit: 1})
		require.NoError(t, err)
		require.Len(t, limited, 1)
	})

	t.Run("ListPagesAfterKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		// Ties on created_at are broken by consumer, then event id.
		b.recordDead(t, "qc", "2-0", 1, "x", at(time.Second))
		b.recordDead(t, "qc", "1-0", 1, "x", at(time.Second))
		b.recordDead(t, "agg", "1-0", 1, "x", at(time.Second))
		b.recordDead(t, "qc", "3-0", 1, "x", base)
		b.recordDead(t, "agg", "2-0", 1, "x", at(time.Minute))
		// A new failure of the oldest does not move it.
		b.recordDead(t, "qc", "3-0", 1, "y", at(time.Hour))
		keyOf := func(d *store.DeadLetter) string { return d.Consumer + "/" + d.EventID }
		page := func(consumer string, limit int) []string {
			var keys []string
			var after *store.DeadLetterKey
			for range 10 {
				ds, err := b.s.DeadLetterList(b.ctx, &store.DeadLetterListParams{Consumer: consumer, Limit: limit, After: after})
				require.NoError(t, err)
				if len(ds) == 0 {
					return keys
				}
				for _, d := range ds {
					keys = append(keys, keyOf(d))
				}
				last := ds[len(ds)-1]
				after = &store.DeadLetterKey{CreatedAt: last.CreatedAt, Consumer: last.Consumer, EventID: last.EventID}
			}
			t.Fatalf("listing did not end: %v", keys)
			return nil
		}
		want := []string{"qc/3-0", "agg/1-0", "qc/1-0", "qc/2-0", "agg/2-0"}
		require.Equal(t, want, page("", 0))
		require.Equal(t, want, page("", 2))
		require.Equal(t, want, page("", 1))
		require.Equal(t, []string{"qc/3-0", "qc/1-0", "qc/2-0"}, page("qc", 2))
	})

	t.Run("RetryRequestIsClaimedOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		b.recordDead(t, consumer, "1-0", 5, "boom", base)
		b.recordDead(t, consumer, "2-0", 5, "boom", base)

		_, err := b.s.DeadLetterRequestRetry(b.ctx, &store.DeadLetterRequestRetryParams{Consumer: consumer, EventID: "3-0", Now: later})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.DeadLetterRequestRetry(b.ctx, &store.DeadLetterRequestRetryParams{Consumer: "other", EventID: "1-0", Now: later})
		require.ErrorIs(t, err, store.ErrNotFound)

		d, err := b.s.DeadLetterRequestRetry(b.ctx, &store.DeadLetterRequestRetryParams{Consumer: consumer, EventID: "1-0", Now: later})
		require.NoError(t, err)
		requireTime(t, later, d.RetryRequestedAt)
		d, err = b.s.DeadLetterRequestRetry(b.ctx, &store.DeadLetterRequestRetryParams{Consumer: consumer, EventID: "1-0", Now: later.Add(time.Minute)})
		require.NoError(t, err)
		requireTime(t, later, d.RetryRequestedAt, "the first request stands")

		none, err := b.s.DeadLetterClaimRetries(b.ctx, &store.DeadLetterClaimRetriesParams{Consumer: "other", Max: 10})
		require.NoError(t, err)
		require.Empty(t, none)
		claimed, err := b.s.DeadLetterClaimRetries(b.ctx, &store.DeadLetterClaimRetriesParams{Consumer: consumer, Max: 10})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, "1-0", claimed[0].EventID)
		requireTime(t, later, claimed[0].RetryRequestedAt)
		require.NotEmpty(t, claimed[0].Envelope)
		again, err := b.s.DeadLetterClaimRetries(b.ctx, &store.DeadLetterClaimRetriesParams{Consumer: consumer, Max: 10})
		require.NoError(t, err)
		require.Empty(t, again)
		require.Len(t, b.deadLetters(t, consumer), 2, "claiming keeps the dead letter")
	})

	t.Run("NewFailureClearsRetryRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		b.recordDead(t, consumer, "1-0", 5, "boom", base)
		_, err := b.s.DeadLetterRequestRetry(b.ctx, &store.DeadLetterRequestRetryParams{Consumer: consumer, EventID: "1-0", Now: later})
		require.NoError(t, err)
		b.recordDead(t, consumer, "1-0", 1, "still broken", later)
		d := b.deadLetters(t, consumer)[0]
		require.True(t, d.RetryRequestedAt.IsZero())
		require.Equal(t, 6, d.Deliveries)
		require.Equal(t, "still broken", d.LastError)
	})

	t.Run("HandlingRemovesTheDeadLetter", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		b.recordDead(t, consumer, "1-0", 5, "boom", base)
		b.recordDead(t, "other", "1-0", 5, "boom", base)

		_, err := b.handle("1-0", func(context.Context, store.Tx) error { return errors.New("again") })
		require.Error(t, err)
		require.Len(t, b.deadLetters(t, consumer), 1, "a failed handling keeps it")

		handled, err := b.handle("1-0", func(context.Context, store.Tx) error { return nil })
		require.NoError(t, err)
		require.True(t, handled)
		require.Empty(t, b.deadLetters(t, consumer))
		require.Len(t, b.deadLetters(t, "other"), 1, "another consumer's stays")
	})

	t.Run("NotRecordedWhenHandled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		handled, err := b.handle("1-0", func(context.Context, store.Tx) error { return nil })
		require.NoError(t, err)
		require.True(t, handled)
		require.False(t, b.recordDead(t, consumer, "1-0", 5, "late failure of another delivery", base))
		require.Empty(t, b.deadLetters(t, consumer))
	})
}
