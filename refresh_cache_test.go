package docket

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// refreshBundle is a refreshCache of a second on a clock the test moves,
// and a load that counts its calls, is given the old value and, when
// gate is set, waits for it.
type refreshBundle struct {
	rc    *refreshCache[string, int]
	clock atomic.Int64
	loads atomic.Int64
	olds  chan int
	gate  chan struct{} // nil: loads return at once
	next  int           // what the next load returns
	err   error         // what the next load fails with
	mu    sync.Mutex
}

// refreshTest runs fn in parallel in a synctest bubble (synctest.Wait:
// every goroutine of the test is blocked) with a fresh bundle.
func refreshTest(t *testing.T, fn func(t *testing.T, b *refreshBundle)) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &refreshBundle{olds: make(chan int, 100)}
		b.clock.Store(time.Unix(1000, 0).UnixNano())
		b.rc = newRefreshCache[string, int](time.Second, func() time.Time { return time.Unix(0, b.clock.Load()) })
		fn(t, b)
	})
}

func (b *refreshBundle) load(ctx context.Context, old int) (int, error) {
	b.loads.Add(1)
	b.olds <- old
	b.mu.Lock()
	gate, v, err := b.gate, b.next, b.err
	b.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return v, err
}

func (b *refreshBundle) will(v int, err error, gated bool) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next, b.err, b.gate = v, err, nil
	if gated {
		b.gate = make(chan struct{})
	}
	return b.gate
}

type refreshGot struct {
	v   int
	err error
}

// askAll has n callers get "k" at once and returns the channel of their
// answers (buffered: each answers once).
func (b *refreshBundle) askAll(ctx context.Context, n int) chan refreshGot {
	got := make(chan refreshGot, n)
	for range n {
		go func() {
			v, err := b.rc.get(ctx, "k", b.load)
			got <- refreshGot{v, err}
		}()
	}
	return got
}

func (b *refreshBundle) ask(t *testing.T) int {
	t.Helper()
	v, err := b.rc.get(context.Background(), "k", b.load)
	require.NoError(t, err)
	return v
}

// TestRefreshCacheFirstLoadOnce: callers that come while a key's first
// load is in flight wait for it (synctest.Wait: every one is blocked,
// and only one load began), then all get its value; within the ttl
// nothing is loaded again.
func TestRefreshCacheFirstLoadOnce(t *testing.T) {
	refreshTest(t, func(t *testing.T, b *refreshBundle) {
		gate := b.will(7, nil, true)
		got := b.askAll(context.Background(), 50)
		synctest.Wait()
		require.Equal(t, int64(1), b.loads.Load(), "one load for 50 callers")
		require.Empty(t, got, "the others wait for the first load")
		close(gate)
		for range 50 {
			g := <-got
			require.NoError(t, g.err)
			require.Equal(t, 7, g.v)
		}
		require.Equal(t, 0, <-b.olds, "the first load is given the zero value")

		b.will(8, nil, false)
		b.clock.Add(int64(time.Second - 1))
		require.Equal(t, 7, b.ask(t), "within the ttl")
		require.Equal(t, int64(1), b.loads.Load())
	})
}

// TestRefreshCacheReload: a lapsed value is loaded again by one caller,
// given the old value, while the others keep the old one; a clock that
// went back counts as lapsed.
func TestRefreshCacheReload(t *testing.T) {
	refreshTest(t, func(t *testing.T, b *refreshBundle) {
		b.will(1, nil, false)
		require.Equal(t, 1, b.ask(t))
		<-b.olds

		b.clock.Add(int64(time.Second))
		gate := b.will(2, nil, true)
		reloader := b.askAll(context.Background(), 1)
		synctest.Wait()
		require.Equal(t, int64(2), b.loads.Load())
		require.Equal(t, 1, <-b.olds, "the reload is given the old value")
		for range 20 {
			require.Equal(t, 1, b.ask(t), "the others keep the old value meanwhile")
		}
		require.Equal(t, int64(2), b.loads.Load(), "one reload at a time")
		close(gate)
		require.Equal(t, refreshGot{v: 2}, <-reloader)
		require.Equal(t, 2, b.ask(t))

		b.will(3, nil, false)
		b.clock.Add(-int64(time.Millisecond))
		require.Equal(t, 3, b.ask(t), "a clock that went back")
		require.Equal(t, int64(3), b.loads.Load())
	})
}

// TestRefreshCacheFirstLoadFails: the callers that waited for a failed
// first load fail with its error without loading in turn, and the next
// caller loads again.
func TestRefreshCacheFirstLoadFails(t *testing.T) {
	refreshTest(t, func(t *testing.T, b *refreshBundle) {
		boom := errors.New("boom")
		gate := b.will(0, boom, true)
		got := b.askAll(context.Background(), 20)
		synctest.Wait()
		close(gate)
		for range 20 {
			require.ErrorIs(t, (<-got).err, boom)
		}
		require.Equal(t, int64(1), b.loads.Load(), "the waiters share the error")

		b.will(5, nil, false)
		require.Equal(t, 5, b.ask(t), "nothing kept of the failed load")
		require.Equal(t, int64(2), b.loads.Load())
	})
}

// TestRefreshCacheLoaderCancelled: a first load that ended because its
// caller's context did fails that caller only; one of the waiters loads
// again and they all get its value.
func TestRefreshCacheLoaderCancelled(t *testing.T) {
	refreshTest(t, func(t *testing.T, b *refreshBundle) {
		b.will(9, nil, true)
		ctx, cancel := context.WithCancel(context.Background())
		loader := b.askAll(ctx, 1)
		synctest.Wait()
		waiters := b.askAll(context.Background(), 10)
		synctest.Wait()
		require.Equal(t, int64(1), b.loads.Load())

		gate := b.will(9, nil, true)
		cancel()
		require.ErrorIs(t, (<-loader).err, context.Canceled)
		synctest.Wait()
		require.Equal(t, int64(2), b.loads.Load(), "one waiter loads again")
		close(gate)
		for range 10 {
			require.Equal(t, refreshGot{v: 9}, <-waiters)
		}
	})
}

// TestRefreshCacheReloadFails: a failed reload fails its caller, the
// others keep the old value meanwhile, and the next caller loads again.
func TestRefreshCacheReloadFails(t *testing.T) {
	refreshTest(t, func(t *testing.T, b *refreshBundle) {
		b.will(1, nil, false)
		require.Equal(t, 1, b.ask(t))

		b.clock.Add(int64(time.Second))
		boom := errors.New("boom")
		gate := b.will(0, boom, true)
		reloader := b.askAll(context.Background(), 1)
		synctest.Wait()
		require.Equal(t, 1, b.ask(t), "the old value meanwhile")
		close(gate)
		require.ErrorIs(t, (<-reloader).err, boom)

		b.will(2, nil, false)
		require.Equal(t, 2, b.ask(t), "the next caller loads again")
		require.Equal(t, int64(3), b.loads.Load())
	})
}

// TestRefreshCacheSetForget: set stores a value without a load; forget
// has the next caller load; a load in flight across either keeps its
// result to itself.
func TestRefreshCacheSetForget(t *testing.T) {
	refreshTest(t, func(t *testing.T, b *refreshBundle) {
		b.rc.set("k", 4)
		require.Equal(t, 4, b.ask(t))
		require.Zero(t, b.loads.Load())

		b.rc.forget("k")
		gate := b.will(5, nil, true)
		loader := b.askAll(context.Background(), 1)
		synctest.Wait()
		b.rc.set("k", 6)
		close(gate)
		require.Equal(t, refreshGot{v: 5}, <-loader, "the loader gets what it loaded")
		require.Equal(t, 6, b.ask(t), "the value set meanwhile stays")

		b.rc.forget("k")
		b.will(7, nil, false)
		require.Equal(t, 7, b.ask(t))
		require.Equal(t, int64(2), b.loads.Load())
	})
}
