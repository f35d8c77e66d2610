package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

func testHeartbeatProgress(t *testing.T, open opener) {
	t.Run("HeartbeatExtends", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		a := b.jobIn(t, job.StateRunning) // lease until setupAcquire+lease
		c := b.jobIn(t, job.StateRunning)
		now := at(30 * time.Second)
		refs := []job.Ref{{ID: c.ID, Attempt: c.Attempt}, {ID: a.ID, Attempt: a.Attempt}}
		hb, err := b.s.JobHeartbeat(b.ctx, &store.JobHeartbeatParams{Jobs: refs, LeaseDuration: 2 * time.Minute, Now: now})
		require.NoError(t, err)
		require.Len(t, hb, 2)
		for i, r := range hb {
			require.Equal(t, refs[i], r.Ref, "results aligned with params")
			require.True(t, r.Extended)
			require.False(t, r.CancelRequested)
			requireTime(t, now.Add(2*time.Minute), r.LeaseExpiresAt)
			row := b.get(t, r.Ref.ID)
			require.Equal(t, job.StateRunning, row.State)
			requireTime(t, now.Add(2*time.Minute), row.LeaseExpiresAt)
			require.Equal(t, owner, row.LeaseOwner)
			require.Equal(t, 1, row.Attempt)
		}

		// The extended lease is no longer expired where the old one was.
		expired, err := b.s.JobListExpired(b.ctx, &store.JobListExpiredParams{Now: at(2 * time.Minute), Max: 10})
		require.NoError(t, err)
		require.Empty(t, expired)
	})

	t.Run("HeartbeatNeverShortens", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		refs := []job.Ref{{ID: row.ID, Attempt: row.Attempt}}
		heartbeat := func(now time.Time, d time.Duration) time.Time {
			t.Helper()
			hb, err := b.s.JobHeartbeat(b.ctx, &store.JobHeartbeatParams{Jobs: refs, LeaseDuration: d, Now: now})
			require.NoError(t, err)
			require.Len(t, hb, 1)
			require.True(t, hb[0].Extended)
			got := b.get(t, row.ID)
			requireTime(t, got.LeaseExpiresAt, hb[0].LeaseExpiresAt, "the reported expiry is the stored one")
			return got.LeaseExpiresAt
		}
		long := at(10 * time.Second).Add(10 * time.Minute)
		requireTime(t, long, heartbeat(at(10*time.Second), 10*time.Minute))
		// A shorter renewal keeps the longer lease.
		requireTime(t, long, heartbeat(at(20*time.Second), 30*time.Second))
		expired, err := b.s.JobListExpired(b.ctx, &store.JobListExpiredParams{Now: at(5 * time.Minute), Max: 10})
		require.NoError(t, err)
		require.Empty(t, expired)
		// A renewal reaching past it extends it.
		requireTime(t, at(9*time.Minute).Add(2*time.Minute), heartbeat(at(9*time.Minute), 2*time.Minute))
	})

	t.Run("HeartbeatFenced", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		running := b.jobIn(t, job.StateRunning)
		done := b.jobIn(t, job.StateSuccess)
		unknown := job.Ref{ID: newID(), Attempt: 1}
		refs := []job.Ref{
			{ID: running.ID, Attempt: running.Attempt + 1},
			{ID: done.ID, Attempt: done.Attempt},
			unknown,
			{ID: running.ID, Attempt: running.Attempt},
		}
		hb, err := b.s.JobHeartbeat(b.ctx, &store.JobHeartbeatParams{Jobs: refs, LeaseDuration: time.Hour, Now: at(30 * time.Second)})
		require.NoError(t, err)
		require.Len(t, hb, len(refs))
		for i, r := range hb {
			require.Equal(t, refs[i], r.Ref)
		}
		require.False(t, hb[0].Extended, "stale attempt")
		require.False(t, hb[1].Extended, "finished job")
		require.False(t, hb[2].Extended, "unknown job")
		require.True(t, hb[3].Extended, "current attempt")
		requireUnchanged(t, done, b.get(t, done.ID))
	})

	t.Run("HeartbeatStaleLeavesLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		running := b.jobIn(t, job.StateRunning)
		hb, err := b.s.JobHeartbeat(b.ctx, &store.JobHeartbeatParams{
			Jobs: []job.Ref{{ID: running.ID, Attempt: running.Attempt + 1}}, LeaseDuration: time.Hour, Now: at(30 * time.Second),
		})
		require.NoError(t, err)
		require.Len(t, hb, 1)
		require.False(t, hb[0].Extended)
		requireTime(t, running.LeaseExpiresAt, b.get(t, running.ID).LeaseExpiresAt)
	})

	t.Run("Progress", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		ref := job.Ref{ID: row.ID, Attempt: row.Attempt}
		require.NoError(t, b.s.JobProgress(b.ctx, &store.JobProgressParams{Ref: ref, Progress: new(25.0), Message: "a quarter", Now: at(10 * time.Second)}))
		got := b.get(t, row.ID)
		require.InDelta(t, 25.0, got.Progress, 1e-9)
		require.Equal(t, "a quarter", got.ProgressMsg)
		require.Equal(t, job.StateRunning, got.State)

		require.NoError(t, b.s.JobProgress(b.ctx, &store.JobProgressParams{Ref: ref, Progress: new(99.5), Now: at(20 * time.Second)}))
		got = b.get(t, row.ID)
		require.InDelta(t, 99.5, got.Progress, 1e-9)
	})

	// A message without a progress (a remote worker's heartbeat) keeps the
	// stored progress and replaces the message; its event carries both.
	t.Run("ProgressMessageAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		ref := job.Ref{ID: row.ID, Attempt: row.Attempt}
		require.NoError(t, b.s.JobProgress(b.ctx, &store.JobProgressParams{Ref: ref, Progress: new(25.0), Message: "a quarter", Now: at(10 * time.Second)}))
		before := b.get(t, row.ID)
		mark := b.outboxMark(t)
		require.NoError(t, b.s.JobProgress(b.ctx, &store.JobProgressParams{Ref: ref, Message: "still resizing", Now: at(20 * time.Second)}))
		got := b.get(t, row.ID)
		require.InDelta(t, 25.0, got.Progress, 1e-9, "the progress is kept")
		require.Equal(t, "still resizing", got.ProgressMsg)
		require.Equal(t, job.StateRunning, got.State)
		require.Equal(t, before.Version+1, got.Version)
		requireTime(t, at(20*time.Second), got.UpdatedAt)
		evs := b.outboxSince(t, mark)
		require.Len(t, evs, 1, describeEvents(evs))
		require.Equal(t, job.EventProgress, evs[0].Type)
		var data job.ProgressData
		require.NoError(t, json.Unmarshal(evs[0].Data, &data))
		require.Equal(t, job.ProgressData{JobID: row.ID, Attempt: row.Attempt, Progress: 25, Message: "still resizing"}, data)

		// On an attempt that never reported, the progress stays 0.
		fresh := b.jobIn(t, job.StateRunning)
		mark = b.outboxMark(t)
		require.NoError(t, b.s.JobProgress(b.ctx, &store.JobProgressParams{
			Ref: job.Ref{ID: fresh.ID, Attempt: fresh.Attempt}, Message: "starting", Now: at(20 * time.Second),
		}))
		got = b.get(t, fresh.ID)
		require.Zero(t, got.Progress)
		require.Equal(t, "starting", got.ProgressMsg)
		evs = b.outboxSince(t, mark)
		require.Len(t, evs, 1, describeEvents(evs))
		require.NoError(t, json.Unmarshal(evs[0].Data, &data))
		require.Equal(t, job.ProgressData{JobID: fresh.ID, Attempt: fresh.Attempt, Progress: 0, Message: "starting"}, data)
	})

	// A progress message is free text from a remote worker: a NUL or bytes
	// that are not UTF-8 are kept as U+FFFD on every backend, in the row
	// and in the event.
	t.Run("ProgressMessageNotUTF8", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		mark := b.outboxMark(t)
		ref := job.Ref{ID: row.ID, Attempt: row.Attempt}
		require.NoError(t, b.s.JobProgress(b.ctx, &store.JobProgressParams{Ref: ref, Progress: new(5.0), Message: "half\x00way\xff", Now: at(10 * time.Second)}))
		require.Equal(t, "half\uFFFDway\uFFFD", b.get(t, row.ID).ProgressMsg)
		evs := b.outboxSince(t, mark)
		require.Len(t, evs, 1)
		var data job.ProgressData
		require.NoError(t, json.Unmarshal(evs[0].Data, &data))
		require.Equal(t, "half\uFFFDway\uFFFD", data.Message)
	})

	t.Run("ProgressLeaseLost", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		running := b.jobIn(t, job.StateRunning)
		done := b.jobIn(t, job.StateSuccess)
		mark := b.outboxMark(t)
		err := b.s.JobProgress(b.ctx, &store.JobProgressParams{
			Ref: job.Ref{ID: running.ID, Attempt: running.Attempt + 1}, Progress: new(50.0), Message: "x", Now: at(10 * time.Second),
		})
		require.ErrorIs(t, err, store.ErrLeaseLost)
		err = b.s.JobProgress(b.ctx, &store.JobProgressParams{
			Ref: job.Ref{ID: done.ID, Attempt: done.Attempt}, Progress: new(50.0), Message: "x", Now: at(10 * time.Second),
		})
		require.ErrorIs(t, err, store.ErrLeaseLost)
		// A message alone is fenced the same way.
		err = b.s.JobProgress(b.ctx, &store.JobProgressParams{
			Ref: job.Ref{ID: running.ID, Attempt: running.Attempt + 1}, Message: "x", Now: at(10 * time.Second),
		})
		require.ErrorIs(t, err, store.ErrLeaseLost)
		got := b.get(t, running.ID)
		require.Zero(t, got.Progress)
		require.Empty(t, got.ProgressMsg)
		requireUnchanged(t, running, got)
		requireUnchanged(t, done, b.get(t, done.ID))
		b.requireNoOutbox(t, mark)
	})
}
