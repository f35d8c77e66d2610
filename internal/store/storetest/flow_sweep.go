package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// testStepSweep: StepJobEnds, StepRunsToAdvance and StepSignalsWaiting,
// what the workflow advancer and its sweeper read.
func testStepSweep(t *testing.T, open opener) {
	t.Run("JobEndsAndRunsToAdvance", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		quiet, ended := b.run(t), b.run(t)
		// quiet: a running job, a queued job, a pending instance.
		running := b.jobIn(t, job.StateRunning)
		queued := b.jobIn(t, job.StateQueued)
		// ended: one job per end, and one that ended but whose instance
		// already recorded it (SUCCEEDED).
		success, dead, canceled := b.jobIn(t, job.StateSuccess), b.jobIn(t, job.StateDead), b.jobIn(t, job.StateCanceled)
		recorded := b.jobIn(t, job.StateSuccess)
		ins := func(run uuid.UUID, step string, index int, jobID uuid.UUID) *store.StepInsertParams {
			p := &store.StepInsertParams{RunID: run, Step: step, Index: index, Kind: flow.KindJob, State: flow.StepPending}
			if jobID != uuid.Nil {
				p.State, p.JobID = flow.StepRunning, jobID
			}
			return p
		}
		b.insertSteps(t,
			ins(quiet.ID, "a", 0, running.ID), ins(quiet.ID, "b", 0, queued.ID), ins(quiet.ID, "c", 0, uuid.Nil),
			ins(ended.ID, "a", 0, success.ID), ins(ended.ID, "a", 1, dead.ID), ins(ended.ID, "b", 0, canceled.ID),
			ins(ended.ID, "c", 0, recorded.ID),
			&store.StepInsertParams{RunID: ended.ID, Step: "d", Kind: flow.KindSignal, State: flow.StepRunning},
		)
		_, err := b.s.StepTransition(b.ctx, &store.StepTransitionParams{RunID: ended.ID, Step: "c", Generation: 1,
			From: flow.StepRunning, To: flow.StepSucceeded, Output: json.RawMessage(`{"ok":true}`), Now: base})
		require.NoError(t, err)

		none, err := b.s.StepJobEnds(b.ctx, quiet.ID)
		require.NoError(t, err)
		require.Empty(t, none)
		ends, err := b.s.StepJobEnds(b.ctx, ended.ID)
		require.NoError(t, err)
		require.Len(t, ends, 3)
		require.JSONEq(t, `{"ok":true}`, string(ends[0].Result), "the job's result")
		ends[0].Result = nil
		require.Equal(t, store.StepJobEnd{RunID: ended.ID, Step: "a", Index: 0, Generation: 1, JobID: success.ID, JobState: job.StateSuccess}, *ends[0])
		require.Equal(t, store.StepJobEnd{RunID: ended.ID, Step: "a", Index: 1, Generation: 1, JobID: dead.ID, JobState: job.StateDead,
			Error: "fatal failure"}, *ends[1])
		require.Equal(t, store.StepJobEnd{RunID: ended.ID, Step: "b", Index: 0, Generation: 1, JobID: canceled.ID, JobState: job.StateCanceled,
			Error: "canceled by user"}, *ends[2])

		runs, err := b.s.StepRunsToAdvance(b.ctx, &store.StepRunsToAdvanceParams{Limit: 10})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{ended.ID}, runs, "one run, listed once")

		// RunLoadMany reads the same for many runs at once, in id order,
		// leaving out unknown ids; a run without steps has none.
		bare := b.run(t)
		ask := []uuid.UUID{ended.ID, uuid.Must(uuid.NewV7()), bare.ID, quiet.ID}
		loads, err := b.s.RunLoadMany(b.ctx, ask)
		require.NoError(t, err)
		want := []uuid.UUID{ended.ID, bare.ID, quiet.ID}
		slices.SortFunc(want, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
		require.Len(t, loads, 3)
		for i, l := range loads {
			require.Equal(t, want[i], l.Run.ID, "id order")
			run, err := b.s.RunGet(b.ctx, l.Run.ID)
			require.NoError(t, err)
			require.Equal(t, run, l.Run)
			steps, err := b.s.StepList(b.ctx, l.Run.ID)
			require.NoError(t, err)
			require.Equal(t, steps, l.Steps)
			ends, err := b.s.StepJobEnds(b.ctx, l.Run.ID)
			require.NoError(t, err)
			require.Equal(t, ends, l.JobEnds)
		}
		require.Len(t, loads[slices.IndexFunc(loads, func(l *store.RunLoad) bool { return l.Run.ID == ended.ID })].JobEnds, 3)
		require.Len(t, loads[slices.IndexFunc(loads, func(l *store.RunLoad) bool { return l.Run.ID == quiet.ID })].Steps, 3)
		none2, err := b.s.RunLoadMany(b.ctx, []uuid.UUID{uuid.Must(uuid.NewV7())})
		require.NoError(t, err)
		require.Empty(t, none2)

		// It locks the runs: a transaction locking one of them waits
		// until the loading transaction ends.
		locked := make(chan struct{})
		release := make(chan struct{})
		var releaseOnce sync.Once
		unlock := func() { releaseOnce.Do(func() { close(release) }) }
		defer unlock() // a failure below must not leave the transaction open
		done := make(chan error, 1)
		go func() {
			done <- b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
				if _, err := tx.RunLoadMany(ctx, []uuid.UUID{quiet.ID, ended.ID}); err != nil {
					return err
				}
				close(locked)
				<-release
				return nil
			})
		}()
		<-locked
		waited := make(chan error, 1)
		go func() {
			waited <- b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
				_, err := tx.RunLock(ctx, quiet.ID)
				return err
			})
		}()
		select {
		case err := <-waited:
			t.Fatalf("RunLock did not wait for RunLoadMany's lock (err %v)", err)
		case <-time.After(200 * time.Millisecond):
		}
		unlock()
		require.NoError(t, <-done)
		require.NoError(t, <-waited)

		// In a transaction too, reading its own writes: once every ended
		// instance is recorded, the run is no longer listed.
		require.NoError(t, b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			ends, err := tx.StepJobEnds(ctx, ended.ID)
			require.NoError(t, err)
			for _, e := range ends {
				_, err := tx.StepTransition(ctx, &store.StepTransitionParams{RunID: ended.ID, Step: e.Step, Index: e.Index,
					Generation: e.Generation, From: flow.StepRunning, To: flow.StepFailed, Now: base})
				require.NoError(t, err)
			}
			again, err := tx.StepJobEnds(ctx, ended.ID)
			require.NoError(t, err)
			require.Empty(t, again)
			return nil
		}))
		runs, err = b.s.StepRunsToAdvance(b.ctx, &store.StepRunsToAdvanceParams{})
		require.NoError(t, err)
		require.Empty(t, runs)
	})

	t.Run("StepTransitionMany", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		r1, r2 := b.run(t), b.run(t)
		a := b.reachStep(t, r1.ID, 0, flow.StepRunning)
		c := b.reachStep(t, r1.ID, 1, flow.StepRunning)
		d := b.reachStep(t, r2.ID, 0, flow.StepRunning)
		e := b.reachStep(t, r2.ID, 1, flow.StepPending)
		conf := 0.75
		now := at(time.Hour)
		change := func(s *flow.StepInstance, gen int, to flow.StepState) *store.StepTransitionParams {
			return &store.StepTransitionParams{RunID: s.RunID, Step: s.Step, Index: s.Index, Generation: gen, From: flow.StepRunning, To: to}
		}
		// A change to RUNNING (or PENDING) is refused before anything is
		// written.
		mark := b.outboxMark(t)
		bad := change(e, 1, flow.StepRunning)
		bad.From = flow.StepPending
		_, err := b.s.StepTransitionMany(b.ctx, &store.StepTransitionManyParams{Transitions: []*store.StepTransitionParams{change(a, 1, flow.StepSucceeded), bad}, Now: now})
		require.Error(t, err)
		b.requireNoOutbox(t, mark)

		ok := change(a, 1, flow.StepSucceeded)
		ok.Output, ok.Confidence = json.RawMessage(`{"n":1}`), &conf
		failed := change(d, 1, flow.StepFailed)
		failed.Error = "boom: «ünï» <&> \"q\" \\ \t"
		stale := change(c, 2, flow.StepSucceeded)     // wrong generation
		notRunning := change(e, 1, flow.StepCanceled) // e is PENDING
		got, err := b.s.StepTransitionMany(b.ctx, &store.StepTransitionManyParams{
			Transitions: []*store.StepTransitionParams{ok, stale, failed, notRunning}, Now: now})
		require.NoError(t, err)
		require.Len(t, got, 2, "the changes whose guard held")
		for _, st := range got {
			read, err := b.s.StepList(b.ctx, st.RunID)
			require.NoError(t, err)
			require.Contains(t, read, st, "returned as stored")
			requireTime(t, now, st.FinishedAt)
			requireTime(t, now, st.UpdatedAt)
			switch st.RunID {
			case r1.ID:
				require.Equal(t, flow.StepSucceeded, st.State)
				require.JSONEq(t, `{"n":1}`, string(st.Output))
				require.Equal(t, &conf, st.Confidence)
				require.Equal(t, a.JobID, st.JobID, "the job is kept")
			case r2.ID:
				require.Equal(t, flow.StepFailed, st.State)
				require.Equal(t, failed.Error, st.Error, "the error text as given")
				require.Nil(t, st.Output)
			}
		}
		b.requireOneStepChange(t, mark,
			flow.StepTransition{RunID: r1.ID, Step: "a", Index: 0, Generation: 1, From: flow.StepRunning, To: flow.StepSucceeded},
			flow.StepTransition{RunID: r2.ID, Step: "a", Index: 0, Generation: 1, From: flow.StepRunning, To: flow.StepFailed})
		steps, err := b.s.StepList(b.ctx, r1.ID)
		require.NoError(t, err)
		require.Equal(t, flow.StepRunning, steps[1].State, "the stale change was not made")

		// Nothing made: no outbox row. In a transaction too.
		mark = b.outboxMark(t)
		require.NoError(t, b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			got, err := tx.StepTransitionMany(ctx, &store.StepTransitionManyParams{Transitions: []*store.StepTransitionParams{stale}, Now: now})
			require.NoError(t, err)
			require.Empty(t, got)
			got, err = tx.StepTransitionMany(ctx, &store.StepTransitionManyParams{Transitions: []*store.StepTransitionParams{change(c, 1, flow.StepCanceled)}, Now: now})
			require.NoError(t, err)
			require.Len(t, got, 1)
			return nil
		}))
		b.requireOneStepChange(t, mark,
			flow.StepTransition{RunID: r1.ID, Step: "a", Index: 1, Generation: 1, From: flow.StepRunning, To: flow.StepCanceled})
	})

	t.Run("UnitEndsToAdvance", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		pool := b.pool(t, 1)
		quiet, finalized, canceled, recorded := b.run(t), b.run(t), b.run(t), b.run(t)
		units := map[uuid.UUID]*crowd.Unit{}
		for _, r := range []*flow.Run{quiet, finalized, canceled, recorded} {
			us, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: pool.ID, State: crowd.UnitJudgable, Now: base,
				Units: []*store.UnitInsertParams{{ID: newID(), RunID: r.ID, Input: json.RawMessage(`{}`)}}})
			require.NoError(t, err)
			units[r.ID] = us[0]
			b.insertSteps(t, &store.StepInsertParams{RunID: r.ID, Step: "label", Kind: flow.KindHuman, State: flow.StepRunning, UnitID: us[0].ID})
		}
		runs, err := b.s.StepRunsToAdvance(b.ctx, &store.StepRunsToAdvanceParams{})
		require.NoError(t, err)
		require.Empty(t, runs, "every unit is JUDGABLE")

		conf := 0.75
		for _, r := range []*flow.Run{finalized, recorded} {
			_, err := b.s.UnitFinalize(b.ctx, &store.UnitFinalizeParams{ID: units[r.ID].ID, Result: json.RawMessage(`{"same":"yes"}`), Confidence: &conf, Now: base})
			require.NoError(t, err)
		}
		_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: units[canceled.ID].ID, From: crowd.UnitJudgable, To: crowd.UnitCanceled, Now: base})
		require.NoError(t, err)
		_, err = b.s.StepTransition(b.ctx, &store.StepTransitionParams{RunID: recorded.ID, Step: "label", Generation: 1,
			From: flow.StepRunning, To: flow.StepSucceeded, Output: json.RawMessage(`{"same":"yes"}`), Confidence: &conf, Now: base})
		require.NoError(t, err)

		runs, err = b.s.StepRunsToAdvance(b.ctx, &store.StepRunsToAdvanceParams{Limit: 10})
		require.NoError(t, err)
		require.ElementsMatch(t, []uuid.UUID{finalized.ID, canceled.ID}, runs, "a RUNNING human step whose unit ended")

		// StepUnitEnds: the ended units of one run, with their result.
		for _, r := range []*flow.Run{quiet, recorded} {
			ends, err := b.s.StepUnitEnds(b.ctx, r.ID)
			require.NoError(t, err)
			require.Empty(t, ends)
		}
		ends, err := b.s.StepUnitEnds(b.ctx, finalized.ID)
		require.NoError(t, err)
		require.Len(t, ends, 1)
		require.JSONEq(t, `{"same":"yes"}`, string(ends[0].Result))
		ends[0].Result = nil
		require.Equal(t, store.StepUnitEnd{Step: "label", Generation: 1, UnitID: units[finalized.ID].ID, UnitState: crowd.UnitFinalized, Confidence: &conf}, *ends[0])
		require.NoError(t, b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			ends, err := tx.StepUnitEnds(ctx, canceled.ID)
			require.NoError(t, err)
			require.Equal(t, []*store.StepUnitEnd{{Step: "label", Generation: 1, UnitID: units[canceled.ID].ID, UnitState: crowd.UnitCanceled}}, ends)
			return nil
		}))
		runs, err = b.s.StepRunsToAdvance(b.ctx, &store.StepRunsToAdvanceParams{Limit: 1})
		require.NoError(t, err)
		require.Len(t, runs, 1, "the limit holds across both kinds")

		// Pages in id order: After skips what a page already gave.
		want := []uuid.UUID{finalized.ID, canceled.ID}
		slices.SortFunc(want, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
		require.Equal(t, want[:1], runs, "the first page holds the smallest id")
		runs, err = b.s.StepRunsToAdvance(b.ctx, &store.StepRunsToAdvanceParams{After: runs[0], Limit: 1})
		require.NoError(t, err)
		require.Equal(t, want[1:], runs, "the next page")
		runs, err = b.s.StepRunsToAdvance(b.ctx, &store.StepRunsToAdvanceParams{After: want[1], Limit: 1})
		require.NoError(t, err)
		require.Empty(t, runs, "past the last")
	})

	t.Run("RunCancelRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		for _, st := range []flow.RunState{flow.RunRunning, flow.RunPaused} {
			r := b.reachRun(t, st)
			require.False(t, r.CancelRequested)
			mark := b.outboxMark(t)
			got, err := b.s.RunCancelRequest(b.ctx, &store.RunCancelRequestParams{ID: r.ID, Now: at(time.Hour)})
			require.NoError(t, err)
			require.True(t, got.CancelRequested)
			require.Equal(t, st, got.State, "not a state change")
			requireTime(t, at(time.Hour), got.UpdatedAt)
			b.requireNoOutbox(t, mark)
			again, err := b.s.RunCancelRequest(b.ctx, &store.RunCancelRequestParams{ID: r.ID, Now: at(2 * time.Hour)})
			require.NoError(t, err)
			requireTime(t, at(time.Hour), again.UpdatedAt, "a repeated request changes nothing")
			read, err := b.s.RunGet(b.ctx, r.ID)
			require.NoError(t, err)
			require.True(t, read.CancelRequested)
			// The run then ends CANCELED as usual.
			done, err := b.s.RunTransition(b.ctx, &store.RunTransitionParams{ID: r.ID, From: st, To: flow.RunCanceled, Error: "canceled", Now: at(3 * time.Hour)})
			require.NoError(t, err)
			require.True(t, done.CancelRequested)
		}
		for _, st := range []flow.RunState{flow.RunSucceeded, flow.RunFailed, flow.RunCanceled} {
			r := b.reachRun(t, st)
			_, err := b.s.RunCancelRequest(b.ctx, &store.RunCancelRequestParams{ID: r.ID, Now: at(time.Hour)})
			requireFlowInvalidTransition(t, err, "run", st, flow.RunCanceled)
			read, err := b.s.RunGet(b.ctx, r.ID)
			require.NoError(t, err)
			require.False(t, read.CancelRequested, "refused: nothing changed")
		}
		_, err := b.s.RunCancelRequest(b.ctx, &store.RunCancelRequestParams{ID: newID(), Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)
		// In a transaction.
		r := b.run(t)
		require.NoError(t, b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			got, err := tx.RunCancelRequest(ctx, &store.RunCancelRequestParams{ID: r.ID, Now: base})
			if err != nil {
				return err
			}
			require.True(t, got.CancelRequested)
			return nil
		}))
	})

	// StepSignalsWaiting reads the waits by their timeout_at, set at
	// release by insert or by transition: due ones earliest first; ones
	// with a later timeout (however old), without one, or ended are not
	// read.
	t.Run("SignalsWaiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		r1, r2 := b.run(t), b.run(t)
		sig := func(run uuid.UUID, step string, timeout time.Duration, now time.Time) *store.StepInsertParams {
			p := &store.StepInsertParams{RunID: run, Step: step, Kind: flow.KindSignal, State: flow.StepRunning}
			if timeout > 0 {
				p.TimeoutAt = now.Add(timeout)
			}
			return p
		}
		// Older than every other, but due only in 10 hours.
		_, err := b.s.StepInsertMany(b.ctx, &store.StepInsertManyParams{Steps: []*store.StepInsertParams{
			sig(r2.ID, "patient", 11*time.Hour, at(-time.Hour))}, Now: at(-time.Hour)})
		require.NoError(t, err)
		_, err = b.s.StepInsertMany(b.ctx, &store.StepInsertManyParams{Steps: []*store.StepInsertParams{
			sig(r2.ID, "late", 2*time.Hour, at(time.Minute))}, Now: at(time.Minute)})
		require.NoError(t, err)
		_, err = b.s.StepInsertMany(b.ctx, &store.StepInsertManyParams{Steps: []*store.StepInsertParams{
			sig(r1.ID, "early", time.Hour, base), sig(r1.ID, "done", 30*time.Minute, base), sig(r1.ID, "forever", 0, base),
			stepParams(r1.ID, 0, true),
			{RunID: r1.ID, Step: "retried", Kind: flow.KindSignal, State: flow.StepPending},
		}, Now: base})
		require.NoError(t, err)
		_, err = b.s.StepTransition(b.ctx, &store.StepTransitionParams{RunID: r1.ID, Step: "done", Generation: 1,
			From: flow.StepRunning, To: flow.StepSucceeded, Now: base})
		require.NoError(t, err)
		// Released by a transition (a retried run): its timeout is set too.
		_, err = b.s.StepTransition(b.ctx, &store.StepTransitionParams{RunID: r1.ID, Step: "retried", Generation: 1,
			From: flow.StepPending, To: flow.StepRunning, TimeoutAt: at(150 * time.Minute), Now: at(30 * time.Minute)})
		require.NoError(t, err)

		got, err := b.s.StepSignalsWaiting(b.ctx, &store.StepSignalsWaitingParams{TimedOutBy: at(3 * time.Hour)})
		require.NoError(t, err)
		var names []string
		for _, w := range got {
			names = append(names, w.Step)
		}
		require.Equal(t, []string{"early", "late", "retried"}, names, "due ones, earliest timeout first")
		requireTime(t, base, got[0].StartedAt)
		requireTime(t, at(time.Hour), got[0].TimeoutAt)
		got[0].StartedAt, got[0].TimeoutAt = time.Time{}, time.Time{}
		require.Equal(t, store.SignalWait{RunID: r1.ID, Workflow: r1.Workflow, Version: 1, Step: "early", Generation: 1}, *got[0])
		requireTime(t, at(150*time.Minute), got[2].TimeoutAt)
		got, err = b.s.StepSignalsWaiting(b.ctx, &store.StepSignalsWaitingParams{TimedOutBy: at(time.Hour)})
		require.NoError(t, err)
		require.Len(t, got, 1, "a timeout at the instant counts")
		got, err = b.s.StepSignalsWaiting(b.ctx, &store.StepSignalsWaitingParams{TimedOutBy: at(59 * time.Minute)})
		require.NoError(t, err)
		require.Empty(t, got, "nothing due yet")
		got, err = b.s.StepSignalsWaiting(b.ctx, &store.StepSignalsWaitingParams{TimedOutBy: at(3 * time.Hour), Limit: 1})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, "early", got[0].Step)
	})
}
