package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// runningAfterFailure makes a job whose first attempt failed with
// finishParams' "temporary failure" and whose second attempt runs, acquired
// at later.
func (b *bundle) runningAfterFailure(t *testing.T) *job.Row {
	t.Helper()
	row := b.jobIn(t, job.StateRetry)
	require.Equal(t, "temporary failure", row.LastError)
	_, err := b.s.JobTransition(b.ctx, &store.JobTransitionParams{
		ID: row.ID, From: job.StateRetry, To: job.StateQueued, Now: later,
	})
	require.NoError(t, err)
	rows := b.acquire(t, row.Queue, 1, later)
	require.Len(t, rows, 1)
	require.Equal(t, 2, rows[0].Attempt)
	require.Equal(t, "temporary failure", rows[0].LastError)
	return rows[0]
}

// endAttempt ends row's running attempt in state with error msg and no
// result, through JobFinishMany or JobTransition (via), at later+1m.
func (b *bundle) endAttempt(t *testing.T, via string, row *job.Row, state job.State, msg string) *job.Row {
	t.Helper()
	now := later.Add(time.Minute)
	switch via {
	case "Finish":
		ok := b.finish(t, now, &store.JobFinishParams{
			ID: row.ID, Attempt: row.Attempt, State: state, Error: msg, RunAt: now,
		})
		require.Equal(t, []bool{true}, ok)
	case "Transition":
		_, err := b.s.JobTransition(b.ctx, &store.JobTransitionParams{
			ID: row.ID, From: job.StateRunning, To: state, Attempt: row.Attempt, Error: msg, Now: now,
		})
		require.NoError(t, err)
	default:
		t.Fatalf("unknown way %q", via)
	}
	got := b.get(t, row.ID)
	require.Equal(t, state, got.State)
	return got
}

// testLastError: what last_error, result and the attempt's outcome become
// when a change carries an empty error, no result or no outcome — the
// same on every backend, by job.SetsLastError and job.OutcomeOf.
func testLastError(t *testing.T, open opener) {
	for _, via := range []string{"Finish", "Transition"} {
		for _, state := range []job.State{job.StateRetry, job.StateDead, job.StateCanceled} {
			t.Run(fmt.Sprintf("%s/EmptyErrorTo%sClears", via, state), func(t *testing.T) {
				t.Parallel()
				b := setup(t, open)
				row := b.runningAfterFailure(t)
				got := b.endAttempt(t, via, row, state, "")
				// The latest failure had no message: the first
				// attempt's must not pass for it.
				require.Empty(t, got.LastError)
				attempts, err := b.s.JobAttemptList(b.ctx, row.ID)
				require.NoError(t, err)
				require.Len(t, attempts, 2)
				require.Equal(t, "temporary failure", attempts[0].Error)
				require.Empty(t, attempts[1].Error)
				require.Equal(t, job.OutcomeOf(state, ""), attempts[1].Outcome)
			})
		}
		t.Run(via+"/ErrorReplaces", func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			row := b.runningAfterFailure(t)
			got := b.endAttempt(t, via, row, job.StateDead, "second failure")
			require.Equal(t, "second failure", got.LastError)
		})
		t.Run(via+"/SuccessWithNilResultKeepsLastError", func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			row := b.runningAfterFailure(t)
			got := b.endAttempt(t, via, row, job.StateSuccess, "")
			require.Nil(t, got.Result, "no result given")
			require.Equal(t, "temporary failure", got.LastError, "the last failure stays readable")
			attempts, err := b.s.JobAttemptList(b.ctx, row.ID)
			require.NoError(t, err)
			require.Len(t, attempts, 2)
			require.Equal(t, job.OutcomeSuccess, attempts[1].Outcome)
			require.Empty(t, attempts[1].Error)
		})
	}

	// A change that ends no attempt keeps the last attempt's error unless
	// it gives one of its own.
	for _, msg := range []string{"", "given up by hand"} {
		t.Run(fmt.Sprintf("RetryToDead/Error%q", msg), func(t *testing.T) {
			t.Parallel()
			b := setup(t, open)
			row := b.jobIn(t, job.StateRetry)
			got, err := b.s.JobTransition(b.ctx, &store.JobTransitionParams{
				ID: row.ID, From: job.StateRetry, To: job.StateDead, Error: msg, Now: later,
			})
			require.NoError(t, err)
			want := msg
			if msg == "" {
				want = "temporary failure"
			}
			require.Equal(t, want, got.LastError)
			require.Equal(t, want, b.get(t, row.ID).LastError)
		})
	}
}
