package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

func testOutbox(t *testing.T, open opener) {
	t.Run("EmptyAtStart", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		b.requireNoOutbox(t, 0)
	})

	t.Run("InsertWritesOneRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		created := newJob(q)
		created.State = job.StateCreated
		ps := []*store.JobInsertParams{newJob(q), created, newJob(newQueue())}
		ps[2].Type = "sms"
		res := b.insert(t, ps...)
		ev := b.requireOneStateChanged(t, 0,
			tr(res[0].Job, "", job.StateQueued),
			tr(res[1].Job, "", job.StateCreated),
			tr(res[2].Job, "", job.StateQueued))
		requireTime(t, base, ev.CreatedAt, "outbox created_at is the call's Now")
	})

	t.Run("AcquireWritesOneRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		b.insert(t, newJob(q), newJob(q), newJob(q))
		mark := b.outboxMark(t)
		rows := b.acquire(t, q, 10, at(time.Second))
		require.Len(t, rows, 3)
		var want []job.Transition
		for _, r := range rows {
			require.Equal(t, 1, r.Attempt)
			want = append(want, tr(r, job.StateQueued, job.StateRunning))
		}
		ev := b.requireOneStateChanged(t, mark, want...)
		requireTime(t, at(time.Second), ev.CreatedAt)
	})

	t.Run("AcquireNothingWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		future := newJob(q)
		future.RunAt = at(time.Hour)
		b.insert(t, future)
		mark := b.outboxMark(t)
		require.Empty(t, b.acquire(t, newQueue(), 10, at(time.Second)), "empty queue")
		require.Empty(t, b.acquire(t, q, 10, at(time.Second)), "nothing due")
		b.requireNoOutbox(t, mark)
	})

	t.Run("FinishWritesOneRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		a, c, d := b.jobIn(t, job.StateRunning), b.jobIn(t, job.StateRunning), b.jobIn(t, job.StateRunning)
		mark := b.outboxMark(t)
		ok := b.finish(t, later,
			finishParams(a, job.StateSuccess),
			finishParams(c, job.StateRetry),
			finishParams(d, job.StateDead))
		require.Equal(t, []bool{true, true, true}, ok)
		ev := b.requireOneStateChanged(t, mark,
			tr(a, job.StateRunning, job.StateSuccess),
			tr(c, job.StateRunning, job.StateRetry),
			tr(d, job.StateRunning, job.StateDead))
		requireTime(t, later, ev.CreatedAt)
	})

	t.Run("FencedFinishWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		running := b.jobIn(t, job.StateRunning)
		queued := b.jobIn(t, job.StateQueued)
		mark := b.outboxMark(t)
		stale := finishParams(running, job.StateSuccess)
		stale.Attempt = running.Attempt + 1
		notRunning := finishParams(queued, job.StateSuccess)
		ok := b.finish(t, later, stale, notRunning)
		require.Equal(t, []bool{false, false}, ok)
		b.requireNoOutbox(t, mark)
	})

	t.Run("TransitionWritesOneRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateCreated)
		mark := b.outboxMark(t)
		got, err := b.s.JobTransition(b.ctx, &store.JobTransitionParams{
			ID: row.ID, From: job.StateCreated, To: job.StateQueued, Now: later,
		})
		require.NoError(t, err)
		b.requireOneStateChanged(t, mark, tr(got, job.StateCreated, job.StateQueued))
	})

	t.Run("ScheduleWritesOneRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		a, c := b.jobIn(t, job.StateRetry), b.jobIn(t, job.StateRetry)
		mark := b.outboxMark(t)
		n, err := b.s.JobSchedule(b.ctx, &store.JobScheduleParams{Now: later, Max: 100})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		b.requireOneStateChanged(t, mark,
			tr(a, job.StateRetry, job.StateQueued),
			tr(c, job.StateRetry, job.StateQueued))

		mark = b.outboxMark(t)
		n, err = b.s.JobSchedule(b.ctx, &store.JobScheduleParams{Now: later, Max: 100})
		require.NoError(t, err)
		require.Zero(t, n)
		b.requireNoOutbox(t, mark)
	})

	t.Run("Progress", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		mark := b.outboxMark(t)
		require.NoError(t, b.s.JobProgress(b.ctx, &store.JobProgressParams{
			Ref: job.Ref{ID: row.ID, Attempt: row.Attempt}, Progress: new(42.5), Message: "half way", Now: at(30 * time.Second),
		}))
		evs := b.outboxSince(t, mark)
		require.Len(t, evs, 1, describeEvents(evs))
		require.Equal(t, job.EventProgress, evs[0].Type)
		var d job.ProgressData
		require.NoError(t, json.Unmarshal(evs[0].Data, &d))
		require.Equal(t, job.ProgressData{JobID: row.ID, Attempt: row.Attempt, Progress: 42.5, Message: "half way"}, d)
		requireTime(t, at(30*time.Second), evs[0].CreatedAt)
	})

	t.Run("Paging", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		const n = 7
		for range n {
			b.insert(t, newJob(newQueue()))
		}
		all := b.outboxSince(t, 0)
		require.Len(t, all, n)
		for i := 1; i < n; i++ {
			require.Greater(t, all[i].ID, all[i-1].ID, "ids ascend")
		}

		var paged []int64
		after := int64(0)
		for {
			evs, err := b.s.OutboxList(b.ctx, &store.OutboxListParams{AfterID: after, Limit: 3})
			require.NoError(t, err)
			require.LessOrEqual(t, len(evs), 3)
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				require.Greater(t, ev.ID, after)
				paged = append(paged, ev.ID)
				after = ev.ID
			}
		}
		var want []int64
		for _, ev := range all {
			want = append(want, ev.ID)
		}
		require.Equal(t, want, paged)

		evs, err := b.s.OutboxList(b.ctx, &store.OutboxListParams{AfterID: all[n-3].ID, Limit: 100})
		require.NoError(t, err)
		require.Len(t, evs, 2)
		require.Equal(t, all[n-2].ID, evs[0].ID)
	})
}
