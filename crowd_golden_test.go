package docket

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// unitListCounter is the client's store counting its UnitList calls.
type unitListCounter struct {
	store.Store
	calls atomic.Int64
}

func (s *unitListCounter) UnitList(ctx context.Context, p *store.UnitListParams) ([]*crowd.Unit, error) {
	s.calls.Add(1)
	return s.Store.UnitList(ctx, p)
}

// TestPoolHasGoldenReadsOnce: the takes of a hot pool that ask at once
// whether it has test questions read it once — before the first answer
// (the others wait for it) and when an answer of "none" has lapsed (the
// others keep it meanwhile) — and a golden unit added through the client
// counts at once, without a read. Each take read it before: 50 reads here.
func TestPoolHasGoldenReadsOnce(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newCrowdFixture(t, backend)
			counter := &unitListCounter{Store: f.c.store}
			f.c.store = counter
			ask := func() {
				t.Helper()
				var (
					wg  sync.WaitGroup
					yes atomic.Int64
					bad = make(chan error, 50)
				)
				for range 50 {
					wg.Go(func() {
						has, err := f.c.poolHasGolden(ctx, f.pool.ID)
						if err != nil {
							bad <- err
						}
						if has {
							yes.Add(1)
						}
					})
				}
				wg.Wait()
				close(bad)
				for err := range bad {
					require.NoError(t, err)
				}
				require.Zero(t, yes.Load(), "no golden unit yet")
			}
			ask()
			require.Equal(t, int64(1), counter.calls.Load(), "first answer")
			ask()
			require.Equal(t, int64(1), counter.calls.Load(), "within goldenRecheck")

			f.c.golden.mu.Lock()
			f.c.golden.m[f.pool.ID] = &refreshEntry[bool]{at: time.Now().Add(-2 * goldenRecheck)}
			f.c.golden.mu.Unlock()
			ask()
			require.Equal(t, int64(2), counter.calls.Load(), "the lapsed answer")

			_, err := f.c.GoldenAdd(ctx, f.pool.ID, []GoldenUnit{{Input: json.RawMessage(`{"left": "a"}`), Answer: json.RawMessage(`{"same": "yes"}`)}})
			require.NoError(t, err)
			has, err := f.c.poolHasGolden(ctx, f.pool.ID)
			require.NoError(t, err)
			require.True(t, has)
			require.Equal(t, int64(2), counter.calls.Load(), "a golden unit added here")
		})
	}
}
