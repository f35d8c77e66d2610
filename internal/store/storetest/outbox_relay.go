package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// outboxRows inserts n jobs one call each (one outbox row each) and returns
// the rows' ids in order and the jobs.
func (b *bundle) outboxRows(t *testing.T, n int) ([]int64, []*job.Row) {
	t.Helper()
	mark := b.outboxMark(t)
	var rows []*job.Row
	for range n {
		rows = append(rows, b.insertOne(t, newJob(newQueue())))
	}
	evs := b.outboxSince(t, mark)
	require.Len(t, evs, n)
	ids := make([]int64, n)
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	return ids, rows
}

func (b *bundle) unpublishedIDs(t *testing.T, limit int) []int64 {
	t.Helper()
	evs, err := b.s.OutboxListUnpublished(b.ctx, &store.OutboxListUnpublishedParams{Limit: limit})
	require.NoError(t, err)
	out := []int64{}
	for _, ev := range evs {
		out = append(out, ev.ID)
	}
	return out
}

func (b *bundle) markPublished(t *testing.T, now time.Time, ids ...int64) int {
	t.Helper()
	n, err := b.s.OutboxMarkPublished(b.ctx, &store.OutboxMarkPublishedParams{IDs: ids, Now: now})
	require.NoError(t, err)
	return n
}

// history reads the whole published history after seq in windows of
// window, returning row ids in publish order.
func (b *bundle) history(t *testing.T, p store.OutboxListPublishedParams) []int64 {
	t.Helper()
	out := []int64{}
	for range 1000 {
		rows, through, err := b.s.OutboxListPublished(b.ctx, &p)
		require.NoError(t, err)
		require.GreaterOrEqual(t, through, p.AfterSeq)
		for _, r := range rows {
			require.Greater(t, r.Seq, p.AfterSeq, "rows in publish order")
			require.LessOrEqual(t, r.Seq, through)
			p.AfterSeq = r.Seq
			out = append(out, r.ID)
		}
		if through == p.AfterSeq && len(rows) == 0 {
			return out
		}
		p.AfterSeq = through
	}
	t.Fatal("history did not end")
	return nil
}

func testOutboxRelay(t *testing.T, open opener) {
	t.Run("UnpublishedInIDOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		ids, _ := b.outboxRows(t, 5)
		require.Equal(t, ids, b.unpublishedIDs(t, 0))
		require.Equal(t, ids[:2], b.unpublishedIDs(t, 2))

		require.Equal(t, 2, b.markPublished(t, at(time.Minute), ids[1], ids[3]))
		require.Equal(t, []int64{ids[0], ids[2], ids[4]}, b.unpublishedIDs(t, 0))
	})

	t.Run("CountUnpublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		count := func() int {
			t.Helper()
			n, err := b.s.OutboxCountUnpublished(b.ctx)
			require.NoError(t, err)
			return n
		}
		require.Zero(t, count())
		ids, _ := b.outboxRows(t, 5)
		require.Equal(t, 5, count())
		require.Equal(t, 2, b.markPublished(t, at(time.Minute), ids[1], ids[3]))
		require.Equal(t, 3, count())
		require.Equal(t, 3, b.markPublished(t, at(2*time.Minute), ids[0], ids[2], ids[4]))
		require.Zero(t, count())
	})

	t.Run("PublishedWithoutWebhooksIsFannedOut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		ids, _ := b.outboxRows(t, 3)
		pendingIDs := func() []int64 {
			t.Helper()
			out := []int64{}
			for _, ev := range b.pendingOutbox(t) {
				out = append(out, ev.ID)
			}
			return out
		}
		require.Equal(t, ids, pendingIDs())
		// No subscription: publishing marks the rows fanned out as well.
		require.Equal(t, 2, b.markPublished(t, at(time.Minute), ids[0], ids[1]))
		require.Equal(t, []int64{ids[2]}, pendingIDs())

		// With one, published rows stay pending for the dispatcher, the
		// row written before the subscription too.
		w := b.webhook(t, "http://127.0.0.1/hook")
		more, _ := b.outboxRows(t, 1)
		require.Equal(t, 2, b.markPublished(t, at(2*time.Minute), ids[2], more[0]))
		require.Equal(t, []int64{ids[2], more[0]}, pendingIDs())
		require.Equal(t, 2, b.fanOut(t, at(3*time.Minute), 1, w))
		require.Empty(t, pendingIDs())
		ds := b.deliveries(t, w, "")
		require.Len(t, ds, 2)

		// A row fanned out before it is published keeps its mark.
		require.NoError(t, b.s.WebhookDelete(b.ctx, w.ID))
		last, _ := b.outboxRows(t, 1)
		require.Zero(t, b.fanOut(t, at(4*time.Minute), 1))
		require.Equal(t, 1, b.markPublished(t, at(5*time.Minute), last[0]))
		require.Empty(t, pendingIDs())
	})

	t.Run("NumberedInPublishOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		last, err := b.s.OutboxLastSeq(b.ctx)
		require.NoError(t, err)
		require.Zero(t, last)
		ids, _ := b.outboxRows(t, 4)
		// A row that committed late (lower id) is published after others.
		require.Equal(t, 2, b.markPublished(t, at(time.Minute), ids[2], ids[0]))
		require.Equal(t, 2, b.markPublished(t, at(2*time.Minute), ids[1], ids[3]))
		require.Equal(t, []int64{ids[2], ids[0], ids[1], ids[3]}, b.history(t, store.OutboxListPublishedParams{}))

		first, err := b.s.OutboxGetPublished(b.ctx, ids[2])
		require.NoError(t, err)
		second, err := b.s.OutboxGetPublished(b.ctx, ids[0])
		require.NoError(t, err)
		require.Less(t, first.Seq, second.Seq)
		require.Equal(t, "job.state_changed", first.Type)
		requireTime(t, at(time.Minute), first.PublishedAt)
		requireTime(t, base, first.CreatedAt)
		require.NotEmpty(t, first.Data)
		last, err = b.s.OutboxLastSeq(b.ctx)
		require.NoError(t, err)
		fourth, err := b.s.OutboxGetPublished(b.ctx, ids[3])
		require.NoError(t, err)
		require.Equal(t, fourth.Seq, last)

		// Marking again changes nothing: the numbers stay.
		require.Zero(t, b.markPublished(t, at(3*time.Minute), ids[0], ids[2]))
		again, err := b.s.OutboxGetPublished(b.ctx, ids[2])
		require.NoError(t, err)
		require.Equal(t, first.Seq, again.Seq)
		requireTime(t, at(time.Minute), again.PublishedAt)
		require.Empty(t, b.unpublishedIDs(t, 0))
	})

	t.Run("GetUnpublishedIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		ids, _ := b.outboxRows(t, 1)
		_, err := b.s.OutboxGetPublished(b.ctx, ids[0])
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.OutboxGetPublished(b.ctx, ids[0]+100)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("HistoryWindowLimitAndFilters", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		ids, jobs := b.outboxRows(t, 6)
		// The fourth job reports progress: a job.progress row.
		running := b.acquire(t, jobs[3].Queue, 1, at(time.Second))
		require.Len(t, running, 1)
		require.NoError(t, b.s.JobProgress(b.ctx, &store.JobProgressParams{
			Ref: job.Ref{ID: running[0].ID, Attempt: 1}, Progress: new(50.0), Message: "half", Now: at(2 * time.Second),
		}))
		all := b.outboxSince(t, 0)
		require.Len(t, all, 8)
		require.Equal(t, job.EventProgress, all[7].Type)
		unpublished := b.unpublishedIDs(t, 0)
		require.Len(t, unpublished, 8)
		require.Equal(t, 8, b.markPublished(t, at(time.Minute), unpublished...))

		every := b.history(t, store.OutboxListPublishedParams{})
		require.Equal(t, unpublished, every)
		require.Equal(t, every, b.history(t, store.OutboxListPublishedParams{Window: 3}), "windows")
		require.Equal(t, every, b.history(t, store.OutboxListPublishedParams{Window: 1, Limit: 2}), "window 1")
		require.Equal(t, every, b.history(t, store.OutboxListPublishedParams{Limit: 3}), "limit")

		rows, through, err := b.s.OutboxListPublished(b.ctx, &store.OutboxListPublishedParams{Limit: 3})
		require.NoError(t, err)
		require.Len(t, rows, 3)
		require.Equal(t, rows[2].Seq, through, "a full page is complete up to its last row")

		require.Equal(t, []int64{all[7].ID}, b.history(t, store.OutboxListPublishedParams{Types: []string{job.EventProgress}}))
		require.Equal(t, every, b.history(t, store.OutboxListPublishedParams{Types: []string{job.EventProgress, job.EventStateChanged}}))
		require.Equal(t, []int64{ids[3], all[6].ID, all[7].ID},
			b.history(t, store.OutboxListPublishedParams{Contains: jobs[3].ID.String()}), "rows about one job")
		require.Equal(t, []int64{all[7].ID},
			b.history(t, store.OutboxListPublishedParams{Contains: jobs[3].ID.String(), Types: []string{job.EventProgress}, Window: 2}))

		// Past the end: nothing, complete up to where it was.
		last, err := b.s.OutboxLastSeq(b.ctx)
		require.NoError(t, err)
		rows, through, err = b.s.OutboxListPublished(b.ctx, &store.OutboxListPublishedParams{AfterSeq: last})
		require.NoError(t, err)
		require.Empty(t, rows)
		require.Equal(t, last, through)
	})

	t.Run("HistoryStopsAtTheLastPublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		ids, _ := b.outboxRows(t, 3)
		b.markPublished(t, at(time.Minute), ids[0])
		rows, through, err := b.s.OutboxListPublished(b.ctx, &store.OutboxListPublishedParams{Contains: "no such text"})
		require.NoError(t, err)
		require.Empty(t, rows)
		first, err := b.s.OutboxGetPublished(b.ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, first.Seq, through, "complete only up to the last number given")
		b.markPublished(t, at(2*time.Minute), ids[2], ids[1])
		require.Equal(t, []int64{ids[2], ids[1]}, b.history(t, store.OutboxListPublishedParams{AfterSeq: through}))
	})

	t.Run("DeletePublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		ids, _ := b.outboxRows(t, 5)
		// A subscription, so that publishing leaves the rows to the
		// webhook dispatcher (PublishedWithoutWebhooksIsFannedOut).
		b.webhook(t, "http://127.0.0.1/hook")
		b.markPublished(t, at(time.Minute), ids[0], ids[1])
		b.markPublished(t, at(time.Hour), ids[2])
		// ids[3] and ids[4] stay unpublished: never deleted.
		// A row is kept until its webhook deliveries are made too.
		n, err := b.s.OutboxDeletePublished(b.ctx, &store.OutboxDeletePublishedParams{PublishedBefore: at(2 * time.Hour)})
		require.NoError(t, err)
		require.Zero(t, n, "not fanned out to webhooks")
		_, err = b.s.WebhookFanOut(b.ctx, &store.WebhookFanOutParams{OutboxIDs: ids, Now: at(time.Minute)})
		require.NoError(t, err)
		n, err = b.s.OutboxDeletePublished(b.ctx, &store.OutboxDeletePublishedParams{PublishedBefore: at(2 * time.Hour), Max: 1})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, []int64{ids[1], ids[2]}, b.history(t, store.OutboxListPublishedParams{}))
		n, err = b.s.OutboxDeletePublished(b.ctx, &store.OutboxDeletePublishedParams{PublishedBefore: at(30 * time.Minute)})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		// The newest published row stays, past retention too: numbers go on
		// after it, so a reader waiting past it misses nothing.
		n, err = b.s.OutboxDeletePublished(b.ctx, &store.OutboxDeletePublishedParams{PublishedBefore: at(48 * time.Hour)})
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, []int64{ids[2]}, b.history(t, store.OutboxListPublishedParams{}))
		require.Equal(t, ids[3:], b.unpublishedIDs(t, 0))
		_, err = b.s.OutboxGetPublished(b.ctx, ids[0])
		require.ErrorIs(t, err, store.ErrNotFound)
		newest, err := b.s.OutboxGetPublished(b.ctx, ids[2])
		require.NoError(t, err)
		b.markPublished(t, at(49*time.Hour), ids[3])
		require.Equal(t, []int64{ids[3]}, b.history(t, store.OutboxListPublishedParams{AfterSeq: newest.Seq}))
	})

	t.Run("DeleteOld", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		mark := b.outboxMark(t)
		// Six rows, one insert each: ids[0..4] written at base, ids[5] an
		// hour later.
		for i := range 6 {
			now := base
			if i == 5 {
				now = at(time.Hour)
			}
			b.insertAt(t, now, newJob(newQueue()))
		}
		evs := b.outboxSince(t, mark)
		require.Len(t, evs, 6)
		ids := make([]int64, len(evs))
		for i, ev := range evs {
			ids[i] = ev.ID
		}
		// A subscription, so that publishing leaves the rows to the
		// webhook dispatcher.
		b.webhook(t, "http://127.0.0.1/hook")
		b.markPublished(t, at(time.Minute), ids[0], ids[1])
		b.markPublished(t, at(2*time.Minute), ids[4])
		_, err := b.s.WebhookFanOut(b.ctx, &store.WebhookFanOutParams{OutboxIDs: []int64{ids[0], ids[2]}, Now: at(time.Minute)})
		require.NoError(t, err)
		// ids[0]: published and fanned out, the relay's to prune: kept.
		// ids[1]: published, not fanned out: deleted.
		// ids[2]: fanned out, not published: deleted.
		// ids[3]: neither: deleted.
		// ids[4]: the newest published row (not fanned out): kept, numbers
		// go on after it.
		// ids[5]: young: kept.
		before := at(30 * time.Minute)
		n, err := b.s.OutboxDeleteOld(b.ctx, &store.OutboxDeleteOldParams{CreatedBefore: before, Max: 1})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = b.s.OutboxDeleteOld(b.ctx, &store.OutboxDeleteOldParams{CreatedBefore: before, Max: 10})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, err = b.s.OutboxDeleteOld(b.ctx, &store.OutboxDeleteOldParams{CreatedBefore: before})
		require.NoError(t, err)
		require.Zero(t, n)
		left := []int64{}
		for _, ev := range b.outboxSince(t, mark) {
			left = append(left, ev.ID)
		}
		require.Equal(t, []int64{ids[0], ids[4], ids[5]}, left)
		require.Equal(t, []int64{ids[5]}, b.unpublishedIDs(t, 0))
		newest, err := b.s.OutboxGetPublished(b.ctx, ids[4])
		require.NoError(t, err)
		b.markPublished(t, at(2*time.Hour), ids[5])
		require.Equal(t, []int64{ids[5]}, b.history(t, store.OutboxListPublishedParams{AfterSeq: newest.Seq}))
		// Published, fanned out and past the age: still only the relay's
		// to prune (after DOCKET_EVENT_RETENTION), so the history is not
		// cut by the age.
		_, err = b.s.WebhookFanOut(b.ctx, &store.WebhookFanOutParams{OutboxIDs: []int64{ids[4], ids[5]}, Now: at(2 * time.Hour)})
		require.NoError(t, err)
		n, err = b.s.OutboxDeleteOld(b.ctx, &store.OutboxDeleteOldParams{CreatedBefore: at(48 * time.Hour)})
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("MarkWakesSubscribers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		ids, _ := b.outboxRows(t, 1)
		ch, cancel := b.s.Subscribe(store.TopicOutboxPublished)
		defer cancel()
		marked := false
		awaitWakeup(t, ch, "", func() {
			if !marked {
				b.markPublished(t, at(time.Minute), ids...)
				marked = true
			}
		})
	})
}
