package docket

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/aggregate"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// poolModelCounter is the client's store counting its PoolModelList
// calls.
type poolModelCounter struct {
	store.Store
	calls atomic.Int64
}

func (s *poolModelCounter) PoolModelList(ctx context.Context, poolID uuid.UUID) ([]*store.PoolModel, error) {
	s.calls.Add(1)
	return s.Store.PoolModelList(ctx, poolID)
}

// TestPoolModelsReadOnce: the judgments of a hot pool that need its
// worker-quality models at once read them once — before the first answer
// (the others wait for it) and when they lapse (the others keep the old
// ones meanwhile) — and a model whose estimate did not change is not
// decoded again; a new estimate is. Every judgment in flight read and
// decoded them before: 50 reads here each time.
func TestPoolModelsReadOnce(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newTaskFixture(t, backend, overlapTemplate("ds", 3, 3, 0))
			ct, err := f.c.CompiledTask(ctx, f.pool.Task, f.pool.TaskVersion)
			require.NoError(t, err)
			put := func(judgments int, worker string) {
				t.Helper()
				res, err := aggregate.Categorical(aggregate.MethodDS, []aggregate.Judgment{
					{Item: "u1", Worker: worker, Label: "yes"}, {Item: "u2", Worker: worker, Label: "no"},
				}, aggregate.Options{Classes: []string{"yes", "no"}})
				require.NoError(t, err)
				b, err := json.Marshal(res.Model)
				require.NoError(t, err)
				_, err = f.c.store.PoolModelPut(ctx, &store.PoolModelPutParams{PoolID: f.pool.ID, Field: "same", Model: b,
					Judgments: judgments, Now: f.c.cfg.Now()})
				require.NoError(t, err)
			}
			put(30, "w1")
			counter := &poolModelCounter{Store: f.c.store}
			f.c.store = counter
			// ask has 50 callers at once ask for the models; all get the
			// same (the old ones may go to some while one rereads, when
			// same is false) and it returns one.
			ask := func(same bool) *aggregate.Model {
				t.Helper()
				var (
					wg  sync.WaitGroup
					mu  sync.Mutex
					got = map[*aggregate.Model]bool{}
					bad = make(chan error, 50)
				)
				for range 50 {
					wg.Go(func() {
						ms, err := f.c.poolModels(ctx, f.pool, ct)
						if err != nil {
							bad <- err
							return
						}
						mu.Lock()
						got[ms["same"]] = true
						mu.Unlock()
					})
				}
				wg.Wait()
				close(bad)
				for err := range bad {
					require.NoError(t, err)
				}
				if same {
					require.Len(t, got, 1, "every caller got the same decoded model")
				}
				for m := range got {
					require.NotNil(t, m)
					return m
				}
				return nil
			}
			first := ask(true)
			require.Equal(t, int64(1), counter.calls.Load(), "first answer")
			require.Contains(t, first.Workers, "w1")
			require.Same(t, first, ask(true), "within poolModelTTL")
			require.Equal(t, int64(1), counter.calls.Load(), "within poolModelTTL")

			f.now.Add(int64(2 * poolModelTTL))
			require.Same(t, first, ask(true), "one rereads the same estimate, not decoded again")
			require.Equal(t, int64(2), counter.calls.Load(), "the lapsed models")
			again, err := f.c.poolModels(ctx, f.pool, ct)
			require.NoError(t, err)
			require.Same(t, first, again["same"], "the same estimate is not decoded again")

			put(40, "w2")
			f.now.Add(int64(2 * poolModelTTL))
			ask(false) // one rereads; the others may keep the old models meanwhile
			require.Equal(t, int64(3), counter.calls.Load())
			next, err := f.c.poolModels(ctx, f.pool, ct)
			require.NoError(t, err)
			require.NotSame(t, first, next["same"], "a new estimate is decoded")
			require.Contains(t, next["same"].Workers, "w2")

			put(50, "w3")
			f.c.forgetPoolModels(f.pool.ID)
			forgotten, err := f.c.poolModels(ctx, f.pool, ct)
			require.NoError(t, err)
			require.Equal(t, int64(4), counter.calls.Load(), "forgotten: read at once")
			require.Contains(t, forgotten["same"].Workers, "w3")
		})
	}
}
