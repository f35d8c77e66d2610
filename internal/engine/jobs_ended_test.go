package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
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
		// The rescuer runs on the maintenance leader. An election attempt
		// gets a third of the TTL: the suite's 50 ms, under -race on a
		// loaded machine, lost the leadership again and again, and the
		// rescue never came within waitFor's 20 s.
		cfg.LeaderTTL = 3 * time.Second
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

// JobsEndedTx handles the jobs it matches in the transaction that ends
// them, at once under a light load (not CompleteInterval later), and they
// are not handed to OnJobsEnded; other jobs are. When Handle fails, its
// writes roll back with the ends, the ends are written alone, and every
// job goes to OnJobsEnded.
func TestJobsEndedTx(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		for _, fail := range []bool{false, true} {
			b := setup(t, backend)
			ctx := context.Background()
			step := b.insert(t, "step", 1)[0]
			plain := b.insert(t, "plain", 1)[0]
			var (
				mu      sync.Mutex
				handled []uuid.UUID
				ended   = map[uuid.UUID]bool{}
				marker  = uuid.Must(uuid.NewV7()) // a job Handle inserts
			)
			cfg := b.config(map[string]int{"step": 1, "plain": 1})
			// A batch waits this long unless it is written at once.
			const interval = 5 * time.Second
			cfg.CompleteInterval = interval
			cfg.OnJobsEnded = func(rows []*job.Row) {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range rows {
					ended[r.ID] = true
				}
			}
			cfg.JobsEndedTx = &JobsEndedHook{
				Match: func(r *job.Row) bool { return r.Type == "step" },
				Handle: func(ctx context.Context, tx store.Tx, rows []*job.Row) error {
					for _, r := range rows {
						got, err := tx.JobGet(ctx, r.ID)
						if err != nil {
							return err
						}
						if got.State != job.StateSuccess {
							return errors.New("the end is not written before Handle")
						}
					}
					if _, err := tx.JobInsertMany(ctx, &store.JobInsertManyParams{Now: b.clock.Now(), Jobs: []*store.JobInsertParams{{
						ID: marker, Type: "next", Queue: "next", Payload: json.RawMessage(`{}`), State: job.StateQueued, MaxAttempts: 1,
					}}}); err != nil {
						return err
					}
					mu.Lock()
					defer mu.Unlock()
					for _, r := range rows {
						handled = append(handled, r.ID)
					}
					if fail {
						return errors.New("boom")
					}
					return nil
				},
			}
			// The plain job's completion waits in the completer for the
			// interval, unless the step job's comes and takes it along.
			plainDone := make(chan struct{})
			var stepReturned atomic.Int64
			e, err := New(b.store, cfg, map[string]*Handler{
				"step": {Work: func(context.Context, *job.Row) (json.RawMessage, error) {
					<-plainDone
					stepReturned.Store(time.Now().UnixNano())
					return nil, nil
				}},
				"plain": {Work: func(context.Context, *job.Row) (json.RawMessage, error) {
					defer close(plainDone)
					return nil, nil
				}},
			})
			require.NoError(t, err)
			require.NoError(t, e.Start(ctx))
			waitFor(t, "the step job to end", func() bool {
				row, err := b.store.JobGet(ctx, step)
				require.NoError(t, err)
				return row.State == job.StateSuccess
			})
			require.Less(t, time.Since(time.Unix(0, stepReturned.Load())), interval*4/5, "the step job's end was written at once")
			// The ends are handed over right after the commit.
			waitFor(t, "the plain job to go to OnJobsEnded", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return ended[plain] && (!fail || ended[step])
			})
			marked, err := b.store.JobGet(ctx, marker)
			mu.Lock()
			if fail {
				require.ErrorIs(t, err, store.ErrNotFound, "Handle's write rolled back")
			} else {
				require.NoError(t, err, "Handle's write committed with the end")
				require.Equal(t, job.StateQueued, marked.State)
				require.Equal(t, []uuid.UUID{step}, handled)
				require.False(t, ended[step], "a handled job is not handed to OnJobsEnded")
			}
			mu.Unlock()
			e.Stop(ctx)
		}
	})
}
