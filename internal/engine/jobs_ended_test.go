package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// OnJobsEnded receives, after their commit, the jobs that ended (SUCCESS,
// DEAD); and the services of Config.Services and
// Config.Maintenance run with the engine.
func TestOnJobsEnded(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		ok := b.insert(t, "ok", 3)
		dead := b.insert(t, "dead", 2)
		var (
			mu    sync.Mutex
			ended = map[uuid.UUID]job.State{}
		)
		cfg := b.config(map[string]int{"ok": 2, "dead": 2})
		cfg.OnJobsEnded = func(rows []*job.Row) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range rows {
				// Committed before the call: the store says it ended.
				got, err := b.store.JobGet(ctx, r.ID)
				require.NoError(t, err)
				ended[r.ID] = got.State
			}
		}
		e, err := New(b.store, cfg, map[string]*Handler{
			"ok": {Work: func(context.Context, *job.Row) (json.RawMessage, error) { return nil, nil }},
			"dead": {Work: func(context.Context, *job.Row) (json.RawMessage, error) {
				return nil, &FatalError{Err: errors.New("no")}
			}},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		defer e.Stop(ctx)
		waitFor(t, "every job to end", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(ended) == 5
		})
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ok {
			require.Equal(t, job.StateSuccess, ended[id])
		}
		for _, id := range dead {
			require.Equal(t, job.StateDead, ended[id])
		}
	})
}

// A rescue the store ends otherwise than asked — a RETRY of a job whose
// cancel was requested ends CANCELED — is handed to OnJobsEnded by the
// state the store wrote, not the one the rescuer asked for.
func TestOnJobsEndedAfterRescueOfCanceledJob(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		ctx := context.Background()
		id := b.insert(t, "rescue", 1)[0]
		got, err := b.store.JobAcquire(ctx, &store.JobAcquireParams{
			Queue: "rescue", Max: 1, Owner: "ghost", LeaseDuration: 3 * time.Second, Now: b.clock.Now(),
		})
		require.NoError(t, err)
		require.Len(t, got, 1)
		_, err = b.store.JobCancel(ctx, &store.JobCancelParams{ID: id, Now: b.clock.Now()})
		require.NoError(t, err)

		var (
			mu    sync.Mutex
			ended = map[uuid.UUID]bool{}
		)
		cfg := b.config(map[string]int{"rescue": 1})
		cfg.OnJobsEnded = func(rows []*job.Row) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range rows {
				ended[r.ID] = true
			}
		}
		e, err := New(b.store, cfg, map[string]*Handler{
			"rescue": {Work: func(context.Context, *job.Row) (json.RawMessage, error) { return nil, nil }},
		})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		defer e.Stop(ctx)
		b.clock.Advance(4 * time.Second) // past the ghost's lease
		waitFor(t, "the rescued job to be handed over", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return ended[id]
		})
		row, err := b.store.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, job.StateCanceled, row.State)
	})
}
