package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

func testFinish(t *testing.T, open opener) {
	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		p := finishParams(row, job.StateSuccess)
		p.Result = json.RawMessage(`{"sent": 3, "ids": ["a", "b"]}`)
		require.Equal(t, []bool{true}, b.finish(t, later, p))
		got := b.get(t, row.ID)
		require.Equal(t, job.StateSuccess, got.State)
		require.JSONEq(t, string(p.Result), string(got.Result))
		requireTime(t, later, got.FinishedAt)
		requireTime(t, later, got.UpdatedAt)
		require.Equal(t, row.Attempt, got.Attempt)
		require.Greater(t, got.Version, row.Version)
		requireNoLease(t, got)
	})

	t.Run("Retry", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		p := finishParams(row, job.StateRetry)
		p.RunAt = later.Add(5 * time.Minute)
		p.Error = "connection refused"
		require.Equal(t, []bool{true}, b.finish(t, later, p))
		got := b.get(t, row.ID)
		require.Equal(t, job.StateRetry, got.State)
		requireTime(t, later.Add(5*time.Minute), got.RunAt)
		require.Equal(t, "connection refused", got.LastError)
		require.True(t, got.FinishedAt.IsZero(), "a RETRY job is not finished")
		require.Equal(t, row.Attempt, got.Attempt)
		requireNoLease(t, got)
	})

	t.Run("Dead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		p := finishParams(row, job.StateDead)
		p.Error = "bad payload"
		require.Equal(t, []bool{true}, b.finish(t, later, p))
		got := b.get(t, row.ID)
		require.Equal(t, job.StateDead, got.State)
		require.Equal(t, "bad payload", got.LastError)
		requireTime(t, later, got.FinishedAt)
		requireNoLease(t, got)
	})

	// An error is free text from a handler or a remote worker (a program's
	// stderr): a NUL or bytes that are not UTF-8 are kept as U+FFFD on
	// every backend (PostgreSQL's text cannot hold them), and the finish
	// of the batch they are in goes through.
	t.Run("ErrorNotUTF8", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		bad, good := b.jobIn(t, job.StateRunning), b.jobIn(t, job.StateRunning)
		p := finishParams(bad, job.StateDead)
		p.Error = "bad\x00thing\xff\xfe here"
		q := finishParams(good, job.StateRetry)
		q.RunAt, q.Error = later.Add(time.Minute), "plain"
		require.Equal(t, []bool{true, true}, b.finish(t, later, p, q))
		want := "bad\uFFFDthing\uFFFD\uFFFD here"
		got := b.get(t, bad.ID)
		require.Equal(t, job.StateDead, got.State)
		require.Equal(t, want, got.LastError)
		attempts, err := b.s.JobAttemptList(b.ctx, bad.ID)
		require.NoError(t, err)
		require.Equal(t, want, attempts[len(attempts)-1].Error)
		require.Equal(t, "plain", b.get(t, good.ID).LastError)
	})

	t.Run("Canceled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		require.Equal(t, []bool{true}, b.finish(t, later, finishParams(row, job.StateCanceled)))
		got := b.get(t, row.ID)
		require.Equal(t, job.StateCanceled, got.State)
		requireTime(t, later, got.FinishedAt)
		requireNoLease(t, got)
	})

	t.Run("FencedWrongAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		mark := b.outboxMark(t)
		for _, attempt := range []int{0, row.Attempt + 1} {
			p := finishParams(row, job.StateSuccess)
			p.Attempt = attempt
			require.Equal(t, []bool{false}, b.finish(t, later, p), "attempt %d", attempt)
		}
		requireUnchanged(t, row, b.get(t, row.ID))
		b.requireNoOutbox(t, mark)
		attempts, err := b.s.JobAttemptList(b.ctx, row.ID)
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		require.Equal(t, job.OutcomeRunning, attempts[0].Outcome)
	})

	t.Run("FencedNotRunning", func(t *testing.T) {
		t.Parallel()
		for _, state := range []job.State{job.StateCreated, job.StateQueued, job.StateRetry, job.StateSuccess, job.StateDead, job.StateCanceled} {
			t.Run(string(state), func(t *testing.T) {
				t.Parallel()
				b := setup(t, open)
				row := b.jobIn(t, state)
				mark := b.outboxMark(t)
				for _, to := range []job.State{job.StateSuccess, job.StateRetry, job.StateDead, job.StateCanceled} {
					p := finishParams(row, to)
					require.Equal(t, []bool{false}, b.finish(t, later, p), "%s → %s", state, to)
				}
				requireUnchanged(t, row, b.get(t, row.ID))
				b.requireNoOutbox(t, mark)
			})
		}
	})

	t.Run("MixedBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		a, c, d := b.jobIn(t, job.StateRunning), b.jobIn(t, job.StateRunning), b.jobIn(t, job.StateQueued)
		stale := b.jobIn(t, job.StateRunning)
		mark := b.outboxMark(t)
		staleP := finishParams(stale, job.StateSuccess)
		staleP.Attempt = 7
		unknown := &store.JobFinishParams{ID: newID(), Attempt: 1, State: job.StateSuccess, Outcome: job.OutcomeSuccess}
		ok := b.finish(t, later,
			finishParams(a, job.StateSuccess),
			staleP,
			finishParams(c, job.StateRetry),
			finishParams(d, job.StateSuccess),
			unknown)
		require.Equal(t, []bool{true, false, true, false, false}, ok)
		require.Equal(t, job.StateSuccess, b.get(t, a.ID).State)
		require.Equal(t, job.StateRetry, b.get(t, c.ID).State)
		requireUnchanged(t, d, b.get(t, d.ID))
		requireUnchanged(t, stale, b.get(t, stale.ID))
		b.requireOneStateChanged(t, mark,
			tr(a, job.StateRunning, job.StateSuccess),
			tr(c, job.StateRunning, job.StateRetry))
	})

	// The batch's one event names every job it ended with its own type,
	// queue, attempt and the state it ended in, however the writer groups
	// them: jobs that differ only in one of those, a RETRY that a cancel
	// request turns CANCELED next to a CANCELED, a fenced job left out.
	t.Run("EventOfManyKinds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q1, q2 := newQueue(), newQueue()
		kind := func(queue, typ string) *store.JobInsertParams {
			p := newJob(queue)
			p.Type = typ
			return p
		}
		// second is in its second attempt: acquired, retried, scheduled
		// and acquired again with the others.
		second := kind(q1, "email")
		b.insertOne(t, second)
		first := b.acquire(t, q1, 1, setupAcquire)
		require.Len(t, first, 1)
		retry := finishParams(first[0], job.StateRetry)
		retry.RunAt = setupFinish
		require.Equal(t, []bool{true}, b.finish(t, setupFinish, retry))
		_, err := b.s.JobSchedule(b.ctx, &store.JobScheduleParams{Now: at(3 * time.Second), Max: 10})
		require.NoError(t, err)
		ps := []*store.JobInsertParams{
			kind(q1, "email"), kind(q1, "email"), kind(q1, "email"), kind(q1, "email"), kind(q1, "email"),
			kind(q1, "sms"), kind(q2, "email"), kind(q2, "email"), kind(q1, "email"),
		}
		b.insert(t, ps...)
		require.Len(t, b.acquire(t, q1, 20, at(4*time.Second)), 8)
		require.Len(t, b.acquire(t, q2, 20, at(4*time.Second)), 2)
		rows := make([]*job.Row, 0, len(ps)+1)
		for _, p := range append(ps, second) {
			rows = append(rows, b.get(t, p.ID))
		}
		require.Equal(t, 2, rows[len(rows)-1].Attempt)
		canceling := rows[2]
		_, err = b.s.JobCancel(b.ctx, &store.JobCancelParams{ID: canceling.ID, Now: at(5 * time.Second)})
		require.NoError(t, err)
		fenced := finishParams(rows[8], job.StateSuccess)
		fenced.Attempt = 7
		mark := b.outboxMark(t)
		ended := b.finishEnded(t, later,
			finishParams(rows[0], job.StateSuccess), finishParams(rows[1], job.StateSuccess),
			finishParams(canceling, job.StateRetry), finishParams(rows[3], job.StateCanceled),
			finishParams(rows[4], job.StateDead), finishParams(rows[5], job.StateSuccess),
			finishParams(rows[6], job.StateSuccess), finishParams(rows[7], job.StateRetry),
			fenced, finishParams(rows[9], job.StateSuccess))
		want := []job.State{job.StateSuccess, job.StateSuccess, job.StateCanceled, job.StateCanceled,
			job.StateDead, job.StateSuccess, job.StateSuccess, job.StateRetry, "", job.StateSuccess}
		require.Equal(t, want, ended)
		var trs []job.Transition
		for i, to := range want {
			if to != "" {
				trs = append(trs, tr(rows[i], job.StateRunning, to))
			}
		}
		b.requireOneStateChanged(t, mark, trs...)
	})

	t.Run("SameJobTwiceInBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		mark := b.outboxMark(t)
		ok := b.finish(t, later, finishParams(row, job.StateSuccess), finishParams(row, job.StateDead))
		require.True(t, ok[0] != ok[1], "exactly one finish of one attempt applies, got %v", ok)
		want := job.StateSuccess
		if ok[1] {
			want = job.StateDead
		}
		require.Equal(t, want, b.get(t, row.ID).State)
		b.requireOneStateChanged(t, mark, tr(row, job.StateRunning, want))
	})

	t.Run("WrongAttemptThenRightInBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		wrong := finishParams(row, job.StateDead)
		wrong.Attempt = row.Attempt + 1
		ok := b.finish(t, later, wrong, finishParams(row, job.StateSuccess))
		require.Equal(t, []bool{false, true}, ok, "the fenced finish does not hide the one of the running attempt")
		require.Equal(t, job.StateSuccess, b.get(t, row.ID).State)
	})

	t.Run("ExpiredOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		q := newQueue()
		expired, renewed, boundary := newJob(q), newJob(q), newJob(q)
		b.insert(t, expired, renewed, boundary)
		rows := b.acquire(t, q, 2, at(time.Second)) // leases until base+61s
		require.Len(t, rows, 2)
		// boundary's lease ends exactly at the rescuer's Now: not expired.
		rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: q, Max: 1, Owner: owner, LeaseDuration: 2*time.Minute - time.Second, Now: at(time.Second)})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, boundary.ID, rows[0].ID)
		boundaryBefore := rows[0]
		hb, err := b.s.JobHeartbeat(b.ctx, &store.JobHeartbeatParams{
			Jobs: []job.Ref{{ID: renewed.ID, Attempt: 1}}, LeaseDuration: 10 * time.Minute, Now: at(30 * time.Second),
		})
		require.NoError(t, err)
		require.Len(t, hb, 1)
		require.True(t, hb[0].Extended)
		renewedBefore := b.get(t, renewed.ID)

		rescue := func(id job.Ref) *store.JobFinishParams {
			return &store.JobFinishParams{
				ID: id.ID, Attempt: id.Attempt, State: job.StateRetry, Outcome: job.OutcomeExpired,
				Error: "lease expired", RunAt: at(5 * time.Minute),
			}
		}
		ok, err := b.s.JobFinishMany(b.ctx, &store.JobFinishManyParams{
			Jobs: []*store.JobFinishParams{
				rescue(job.Ref{ID: expired.ID, Attempt: 1}),
				rescue(job.Ref{ID: renewed.ID, Attempt: 1}),
				rescue(job.Ref{ID: boundary.ID, Attempt: 1}),
			},
			Now:         at(2 * time.Minute),
			ExpiredOnly: true,
		})
		require.NoError(t, err)
		require.Equal(t, []job.State{job.StateRetry, "", ""}, ok)
		requireUnchanged(t, boundaryBefore, b.get(t, boundary.ID))
		got := b.get(t, expired.ID)
		require.Equal(t, job.StateRetry, got.State)
		require.Equal(t, "lease expired", got.LastError)
		requireUnchanged(t, renewedBefore, b.get(t, renewed.ID))

		attempts, err := b.s.JobAttemptList(b.ctx, expired.ID)
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		require.Equal(t, job.OutcomeExpired, attempts[0].Outcome)
	})

	t.Run("AttemptHistory", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := newJob(newQueue())
		b.insertOne(t, p)

		attempts, err := b.s.JobAttemptList(b.ctx, p.ID)
		require.NoError(t, err)
		require.Empty(t, attempts, "no attempt before the first acquire")

		// Attempt 1 on node-1 fails.
		t1 := at(time.Second)
		rows, err := b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: p.Queue, Max: 1, Owner: "node-1", LeaseDuration: lease, Now: t1})
		require.NoError(t, err)
		require.Len(t, rows, 1)

		attempts, err = b.s.JobAttemptList(b.ctx, p.ID)
		require.NoError(t, err)
		require.Len(t, attempts, 1, "the running attempt is listed")
		requireAttempt(t, &job.Attempt{JobID: p.ID, Attempt: 1, Node: "node-1", StartedAt: t1, Outcome: job.OutcomeRunning}, attempts[0])

		f1 := at(5 * time.Second)
		require.Equal(t, []bool{true}, b.finish(t, at(6*time.Second), &store.JobFinishParams{
			ID: p.ID, Attempt: 1, State: job.StateRetry, Outcome: job.OutcomeError,
			Error: "boom", RunAt: at(10 * time.Second), FinishedAt: f1,
		}))
		n, err := b.s.JobSchedule(b.ctx, &store.JobScheduleParams{Now: at(10 * time.Second), Max: 10})
		require.NoError(t, err)
		require.Equal(t, 1, n)

		// Attempt 2 on node-2 runs, then succeeds.
		t2 := at(11 * time.Second)
		rows, err = b.s.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: p.Queue, Max: 1, Owner: "node-2", LeaseDuration: lease, Now: t2})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, 2, rows[0].Attempt)

		attempts, err = b.s.JobAttemptList(b.ctx, p.ID)
		require.NoError(t, err)
		require.Len(t, attempts, 2)
		requireAttempt(t, &job.Attempt{JobID: p.ID, Attempt: 1, Node: "node-1", StartedAt: t1, FinishedAt: f1, Outcome: job.OutcomeError, Error: "boom"}, attempts[0])
		requireAttempt(t, &job.Attempt{JobID: p.ID, Attempt: 2, Node: "node-2", StartedAt: t2, Outcome: job.OutcomeRunning}, attempts[1])

		// The success is written later than it happened (a batched
		// completion): the attempt and the job keep when it happened.
		f2 := at(20 * time.Second)
		require.Equal(t, []bool{true}, b.finish(t, at(25*time.Second), &store.JobFinishParams{
			ID: p.ID, Attempt: 2, State: job.StateSuccess, Outcome: job.OutcomeSuccess, FinishedAt: f2,
		}))
		requireTime(t, f2, b.get(t, p.ID).FinishedAt, "the job's finished_at")
		attempts, err = b.s.JobAttemptList(b.ctx, p.ID)
		require.NoError(t, err)
		require.Len(t, attempts, 2)
		requireAttempt(t, &job.Attempt{JobID: p.ID, Attempt: 1, Node: "node-1", StartedAt: t1, FinishedAt: f1, Outcome: job.OutcomeError, Error: "boom"}, attempts[0])
		requireAttempt(t, &job.Attempt{JobID: p.ID, Attempt: 2, Node: "node-2", StartedAt: t2, FinishedAt: f2, Outcome: job.OutcomeSuccess}, attempts[1])
		require.Equal(t, 9*time.Second, attempts[1].Duration().Round(time.Millisecond))
	})

	// JobFinishMany on a Tx: what it wrote is read back in the same
	// transaction, fenced finishes are reported as on the Store, and
	// nothing of it survives a rollback.
	t.Run("InTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		fenced := finishParams(row, job.StateSuccess)
		fenced.Attempt = row.Attempt + 1
		boom := errors.New("boom")
		err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			ended, err := tx.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: []*store.JobFinishParams{fenced, finishParams(row, job.StateDead)}, Now: later})
			require.NoError(t, err)
			require.Equal(t, []job.State{"", job.StateDead}, ended)
			got, err := tx.JobGet(ctx, row.ID)
			require.NoError(t, err)
			require.Equal(t, job.StateDead, got.State, "read back in the transaction")
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.Equal(t, job.StateRunning, b.get(t, row.ID).State, "rolled back")

		require.NoError(t, b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			ended, err := tx.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: []*store.JobFinishParams{finishParams(row, job.StateSuccess)}, Now: later})
			require.NoError(t, err)
			require.Equal(t, []job.State{job.StateSuccess}, ended)
			return nil
		}))
		got := b.get(t, row.ID)
		require.Equal(t, job.StateSuccess, got.State)
		requireTime(t, later, got.FinishedAt)
		requireNoLease(t, got)
	})

	t.Run("AttemptListUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		_, err := b.s.JobAttemptList(b.ctx, newID())
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

func requireAttempt(t *testing.T, want, got *job.Attempt) {
	t.Helper()
	require.Equal(t, want.JobID, got.JobID)
	require.Equal(t, want.Attempt, got.Attempt)
	require.Equal(t, want.Node, got.Node, "attempt %d node", want.Attempt)
	requireTime(t, want.StartedAt, got.StartedAt, "attempt started_at")
	requireTime(t, want.FinishedAt, got.FinishedAt, "attempt finished_at")
	require.Equal(t, want.Outcome, got.Outcome, "attempt %d outcome", want.Attempt)
	require.Equal(t, want.Error, got.Error, "attempt %d error", want.Attempt)
}
