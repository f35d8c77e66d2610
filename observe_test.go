package docket_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// finishLog records JobFinishedEvents.
type finishLog struct {
	mu     sync.Mutex
	events []docket.JobFinishedEvent
}

func (l *finishLog) add(e docket.JobFinishedEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *finishLog) of(id uuid.UUID) []docket.JobFinishedEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []docket.JobFinishedEvent
	for _, e := range l.events {
		if e.JobID == id {
			out = append(out, e)
		}
	}
	return out
}

func observedClient(t *testing.T, backend testdb.Backend, log *finishLog, now func() time.Time) *docket.Client {
	t.Helper()
	client, err := docket.NewClient(context.Background(), docket.Config{
		DatabaseURL: backend.URL(t), AutoMigrate: true, OnJobFinished: log.add, Now: now,
		RetryBackoffBase: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func startWorker(t *testing.T, w *docket.Worker) {
	t.Helper()
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		w.Stop(ctx)
	})
}

func TestOnJobFinishedWorker(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		log := &finishLog{}
		client := observedClient(t, backend, log, nil)
		cfg := fastConfig()
		cfg.Queues = map[string]int{"observed": 2}
		w := docket.NewWorker(client, cfg)
		docket.AddHandler(w, func(ctx context.Context, job *docket.Job[flakyArgs]) error {
			if job.Attempt <= job.Args.FailTimes {
				return errors.New("not yet")
			}
			return nil
		})
		startWorker(t, w)

		res, err := client.Insert(ctx, flakyArgs{FailTimes: 1}, &docket.InsertOpts{Queue: "observed"})
		require.NoError(t, err)
		eventually(t, 20*time.Second, "two attempt ends", func() bool { return len(log.of(res.Job.ID)) == 2 })
		evs := log.of(res.Job.ID)
		require.Equal(t, docket.JobStateRetry, evs[0].State)
		require.Equal(t, docket.OutcomeError, evs[0].Outcome)
		require.True(t, evs[0].Failed())
		require.Equal(t, "not yet", evs[0].Error)
		require.Equal(t, docket.JobStateSuccess, evs[1].State)
		require.False(t, evs[1].Failed())
		for i, e := range evs {
			require.Equal(t, i+1, e.Attempt)
			require.Equal(t, "observed", e.Queue)
			require.Equal(t, "test.flaky", e.JobType)
			require.False(t, e.DueAt.IsZero())
			require.False(t, e.StartedAt.Before(e.DueAt.Add(-time.Millisecond)), "started before due")
			require.False(t, e.FinishedAt.Before(e.StartedAt))
			require.GreaterOrEqual(t, e.QueueLatency(), time.Duration(0))
		}
	})
}

func TestOnJobFinishedLeases(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		log := &finishLog{}
		clock := &manualClock{now: time.Now()}
		client := observedClient(t, backend, log, clock.Now)
		ok, err := client.Insert(ctx, docket.RawArgs{Type: "remote.ok"}, nil)
		require.NoError(t, err)
		bad, err := client.Insert(ctx, docket.RawArgs{Type: "remote.bad"}, nil)
		require.NoError(t, err)
		lost, err := client.Insert(ctx, docket.RawArgs{Type: "remote.lost"}, nil)
		require.NoError(t, err)

		lease := func(queue string) *docket.Lease {
			ls, err := client.Lease(ctx, docket.LeaseParams{Queues: []string{queue}, Max: 1, Duration: 5 * time.Second, WorkerID: "remote"})
			require.NoError(t, err)
			require.Len(t, ls, 1)
			return ls[0]
		}
		okLease, badLease, lostLease := lease("remote.ok"), lease("remote.bad"), lease("remote.lost")
		clock.Advance(2 * time.Second)

		require.NoError(t, client.LeaseComplete(ctx, okLease.ID, nil))
		evs := log.of(ok.Job.ID)
		require.Len(t, evs, 1)
		require.Equal(t, docket.JobStateSuccess, evs[0].State)
		require.Equal(t, "remote.ok", evs[0].Queue)
		require.Equal(t, 2*time.Second, evs[0].RunDuration().Round(time.Millisecond))
		// A fenced completion is not observed.
		require.ErrorIs(t, client.LeaseComplete(ctx, okLease.ID, nil), docket.ErrLeaseLost)
		require.Len(t, log.of(ok.Job.ID), 1)

		state, err := client.LeaseFail(ctx, badLease.ID, "boom", false)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateDead, state)
		evs = log.of(bad.Job.ID)
		require.Len(t, evs, 1)
		require.Equal(t, docket.JobStateDead, evs[0].State)
		require.True(t, evs[0].Failed())

		// The holder of the third lease dies: the leader's rescuer ends the
		// attempt, and that end is observed too.
		clock.Advance(10 * time.Second)
		cfg := fastConfig()
		cfg.RescueInterval = 20 * time.Millisecond
		startWorker(t, docket.NewWorker(client, cfg))
		eventually(t, 20*time.Second, "the rescue to be observed", func() bool { return len(log.of(lost.Job.ID)) == 1 })
		e := log.of(lost.Job.ID)[0]
		require.Equal(t, docket.JobStateRetry, e.State)
		require.Equal(t, docket.OutcomeExpired, e.Outcome)
		require.Equal(t, lostLease.Job.Attempt, e.Attempt)
		require.True(t, e.Failed())
	})
}
