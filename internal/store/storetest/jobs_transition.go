package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// transitionParams asks to move row from → to at later with the arguments a
// caller would give for that edge.
func transitionParams(row *job.Row, from, to job.State) *store.JobTransitionParams {
	p := &store.JobTransitionParams{ID: row.ID, From: from, To: to, Attempt: row.Attempt, Now: later}
	switch to {
	case job.StateRunning:
		p.Owner = "node-t"
		p.LeaseExpiresAt = later.Add(2 * time.Minute)
	case job.StateRetry:
		p.RunAt = later.Add(10 * time.Minute)
	}
	if from == job.StateRunning {
		switch to {
		case job.StateSuccess:
			p.Outcome = job.OutcomeSuccess
			p.Result = json.RawMessage(`{"done":1}`)
		case job.StateCanceled:
			p.Outcome = job.OutcomeCanceled
			p.Error = "canceled"
		default:
			p.Outcome = job.OutcomeError
			p.Error = "failed"
		}
	}
	return p
}

func testTransition(t *testing.T, open opener) {
	t.Run("Table", func(t *testing.T) {
		t.Parallel()
		for _, from := range job.States {
			for _, to := range job.States {
				t.Run(fmt.Sprintf("%s_to_%s", from, to), func(t *testing.T) {
					t.Parallel()
					b := setup(t, open)
					before := b.jobIn(t, from)
					mark := b.outboxMark(t)
					p := transitionParams(before, from, to)
					got, err := b.s.JobTransition(b.ctx, p)

					if !job.CanTransition(from, to) {
						requireInvalidTransition(t, err, from, to)
						requireUnchanged(t, before, b.get(t, before.ID))
						b.requireNoOutbox(t, mark)
						return
					}

					require.NoError(t, err)
					require.NotNil(t, got)
					stored := b.get(t, before.ID)
					for _, row := range []*job.Row{got, stored} {
						require.Equal(t, to, row.State)
						requireTime(t, later, row.UpdatedAt)
						require.Greater(t, row.Version, before.Version)
						switch {
						case to == job.StateRunning:
							require.Equal(t, before.Attempt+1, row.Attempt, "a new lease is a new attempt")
							require.Equal(t, p.Owner, row.LeaseOwner)
							requireTime(t, p.LeaseExpiresAt, row.LeaseExpiresAt)
							requireTime(t, later, row.AttemptedAt)
						case to == job.StateQueued && (from == job.StateDead || from == job.StateCanceled):
							require.Equal(t, before.Attempt, row.Attempt, "attempt, the fencing token, never goes back")
							require.Equal(t, 0, row.AttemptsUsed(), "manual retry gives a fresh budget of attempts")
						default:
							require.Equal(t, before.Attempt, row.Attempt)
						}
						if to != job.StateRunning {
							requireNoLease(t, row)
						}
						switch to {
						case job.StateQueued:
							requireTime(t, later, row.RunAt, "zero RunAt means Now")
						case job.StateRetry:
							requireTime(t, p.RunAt, row.RunAt)
						}
						if to.Terminal() {
							requireTime(t, later, row.FinishedAt)
						} else {
							require.True(t, row.FinishedAt.IsZero(), "finished_at of a %s job: %v", to, row.FinishedAt)
						}
						if to == job.StateSuccess {
							require.JSONEq(t, string(p.Result), string(row.Result))
						}
						if from == job.StateRunning && to != job.StateSuccess {
							require.Equal(t, p.Error, row.LastError)
						}
					}
					b.requireOneStateChanged(t, mark, tr(stored, from, to))

					if to == job.StateRunning {
						attempts, err := b.s.JobAttemptList(b.ctx, before.ID)
						require.NoError(t, err)
						require.Len(t, attempts, before.Attempt+1)
						requireAttempt(t, &job.Attempt{
							JobID: before.ID, Attempt: before.Attempt + 1, Node: p.Owner,
							StartedAt: later, Outcome: job.OutcomeRunning,
						}, attempts[len(attempts)-1])
					}
					if from == job.StateRunning {
						attempts, err := b.s.JobAttemptList(b.ctx, before.ID)
						require.NoError(t, err)
						require.Len(t, attempts, 1)
						requireAttempt(t, &job.Attempt{
							JobID: before.ID, Attempt: before.Attempt, Node: owner,
							StartedAt: setupAcquire, FinishedAt: later, Outcome: p.Outcome, Error: p.Error,
						}, attempts[0])
					}
				})
			}
		}
	})

	t.Run("FromMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateQueued)
		mark := b.outboxMark(t)
		// CREATED → QUEUED is allowed, but the job is QUEUED.
		_, err := b.s.JobTransition(b.ctx, transitionParams(row, job.StateCreated, job.StateQueued))
		requireInvalidTransition(t, err, job.StateQueued, job.StateQueued)
		// RUNNING → SUCCESS is allowed, but the job is not RUNNING.
		_, err = b.s.JobTransition(b.ctx, transitionParams(row, job.StateRunning, job.StateSuccess))
		requireInvalidTransition(t, err, job.StateQueued, job.StateSuccess)
		requireUnchanged(t, row, b.get(t, row.ID))
		b.requireNoOutbox(t, mark)
	})

	t.Run("StaleAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		mark := b.outboxMark(t)
		for _, attempt := range []int{row.Attempt - 1, row.Attempt + 1} {
			p := transitionParams(row, job.StateRunning, job.StateSuccess)
			p.Attempt = attempt
			_, err := b.s.JobTransition(b.ctx, p)
			var ite *job.InvalidTransitionError
			require.ErrorAs(t, err, &ite, "attempt %d", attempt)
		}
		requireUnchanged(t, row, b.get(t, row.ID))
		b.requireNoOutbox(t, mark)
	})

	t.Run("SuccessAttemptHasNoError", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateRunning)
		// A message given with a success is not the attempt's error: a
		// successful attempt has none, on every backend.
		p := transitionParams(row, job.StateRunning, job.StateSuccess)
		p.Error = "a message given with the success"
		_, err := b.s.JobTransition(b.ctx, p)
		require.NoError(t, err)
		attempts, err := b.s.JobAttemptList(b.ctx, row.ID)
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		require.Equal(t, job.OutcomeSuccess, attempts[0].Outcome)
		require.Empty(t, attempts[0].Error, "the error of a successful attempt")
	})

	t.Run("UnknownJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		_, err := b.s.JobTransition(b.ctx, &store.JobTransitionParams{
			ID: newID(), From: job.StateQueued, To: job.StateCanceled, Now: later,
		})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("DisallowedBeforeLookup", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		// Nothing is read when the table refuses the edge, so an unknown job
		// still gets the transition error.
		_, err := b.s.JobTransition(b.ctx, &store.JobTransitionParams{
			ID: newID(), From: job.StateSuccess, To: job.StateQueued, Now: later,
		})
		requireInvalidTransition(t, err, job.StateSuccess, job.StateQueued)
	})

	t.Run("ReleasedJobIsAcquired", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateCreated)
		_, err := b.s.JobTransition(b.ctx, transitionParams(row, job.StateCreated, job.StateQueued))
		require.NoError(t, err)
		rows := b.acquire(t, row.Queue, 10, later.Add(time.Second))
		require.Len(t, rows, 1)
		require.Equal(t, row.ID, rows[0].ID)
		require.Equal(t, 1, rows[0].Attempt)
	})
}
