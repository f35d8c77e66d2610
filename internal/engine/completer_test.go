package engine

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// TestFullBatchIsWrittenAtOnce: CompleteBatch completions are written as
// soon as they are pending, without waiting out CompleteInterval (an
// hour here): the completer is woken by the one that fills the batch.
func TestFullBatchIsWrittenAtOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		const batch, n = 10, 30
		b.insert(t, "full", n)
		cfg := b.config(map[string]int{"full": batch})
		cfg.CompleteBatch = batch
		cfg.CompleteInterval = time.Hour
		cfg.FetchBatch = batch
		// The attempts of a batch end 5 ms apart: the completer sees the
		// first alone and waits for the rest.
		var started atomic.Int64
		e, err := New(b.store, cfg, map[string]*Handler{
			"full": {Work: func(context.Context, *job.Row) (json.RawMessage, error) {
				time.Sleep(time.Duration(started.Add(1)%batch) * 5 * time.Millisecond)
				return nil, nil
			}},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		defer e.Stop(ctx)
		b.waitSucceeded(t, n)
	})
}

// TestCompletionAfterStopIsDropped: a completion handed in after the
// completer stopped is not written and lets its execution go (the running
// set empties, its slot is free); one handed in before the completer
// started waits for it and is written.
func TestCompletionAfterStopIsDropped(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx := context.Background()
	e, err := New(b.store, b.config(map[string]int{"q": 1}), map[string]*Handler{})
	require.NoError(t, err)
	c := e.completer
	running := func(id uuid.UUID) *execution {
		row := &job.Row{ID: id, Type: "q", Queue: "q", Attempt: 1}
		ex := &execution{row: row, ref: job.Ref{ID: id, Attempt: 1}}
		e.mu.Lock()
		e.running[ex.ref] = ex
		e.mu.Unlock()
		return ex
	}
	held := func() int {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.running)
	}
	fin := func(ex *execution) *store.JobFinishParams {
		return &store.JobFinishParams{ID: ex.ref.ID, Attempt: 1, State: job.StateSuccess, Outcome: job.OutcomeSuccess, FinishedAt: b.clock.Now()}
	}

	// Before Start: it waits, and Start's run writes it (the job is not
	// RUNNING, so the write is fenced, and the execution goes).
	early := running(uuid.Must(uuid.NewV7()))
	c.add(early, fin(early))
	require.Equal(t, 1, held())
	require.NoError(t, c.Start(ctx))
	waitFor(t, "the early completion to be taken", func() bool { return held() == 0 })
	c.Stop()

	late := running(uuid.Must(uuid.NewV7()))
	c.add(late, fin(late))
	require.Equal(t, 0, held(), "a completion after Stop lets its execution go")
	c.mu.Lock()
	require.Empty(t, c.pending, "a completion after Stop is not queued")
	c.mu.Unlock()

	// A new run takes completions again.
	require.NoError(t, c.Start(ctx))
	again := running(uuid.Must(uuid.NewV7()))
	c.add(again, fin(again))
	waitFor(t, "a completion after a new Start to be taken", func() bool { return held() == 0 })
	c.Stop()
}

// TestStopWhileCompletionsArrive: Stop ends the completer although
// completions keep arriving (each flush finding more pending would
// otherwise keep it writing); everything handed in is then written or
// dropped, and every execution let go.
func TestStopWhileCompletionsArrive(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx := context.Background()
	cfg := b.config(map[string]int{"q": 1})
	cfg.CompleteBatch = 8
	cfg.CompleteInterval = time.Millisecond
	e, err := New(b.store, cfg, map[string]*Handler{})
	require.NoError(t, err)
	c := e.completer
	require.NoError(t, c.Start(ctx))
	var stop atomic.Bool
	adding := make(chan struct{})
	go func() {
		defer close(adding)
		for !stop.Load() {
			id := uuid.Must(uuid.NewV7())
			ex := &execution{row: &job.Row{ID: id, Type: "q", Queue: "q", Attempt: 1}, ref: job.Ref{ID: id, Attempt: 1}}
			e.mu.Lock()
			e.running[ex.ref] = ex
			e.mu.Unlock()
			c.add(ex, &store.JobFinishParams{ID: id, Attempt: 1, State: job.StateSuccess, Outcome: job.OutcomeSuccess, FinishedAt: b.clock.Now()})
		}
	}()
	waitFor(t, "completions to be written", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pending) > 0
	})
	stopped := make(chan struct{})
	go func() { c.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return while completions kept arriving")
	}
	stop.Store(true)
	<-adding
	e.mu.Lock()
	held := len(e.running)
	e.mu.Unlock()
	require.Zero(t, held, "every execution handed in is let go")
}
