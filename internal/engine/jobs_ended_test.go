package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
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
