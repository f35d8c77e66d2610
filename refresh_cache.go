package docket

import (
	"context"
	"sync"
	"time"
)

// refreshCache holds a value per key that is loaded again at most once
// per ttl, by one caller at a time: the per-client caches of the pools'
// worker-quality models (crowd_estimate.go) and of whether a pool has
// golden units (crowd_quality.go), both read on every judgment or take of
// a hot pool.
//
//   - Before a key's first value, one caller loads it; the callers that
//     come meanwhile wait for it.
//   - When the value lapses, one caller loads it again; the others keep
//     the lapsed one meanwhile (at most ttl plus the load old).
//   - A failed first load fails the callers that waited for it with the
//     same error: each loading in turn would make a slow failure last
//     their number times over, and a store that failed the one would fail
//     the others. Unless the loader's own context ended: its cancellation
//     is not theirs, so one of them loads again.
//   - Nothing is kept of a failed load: a failed first load leaves no
//     entry, a failed reload leaves the lapsed value, and the next caller
//     loads again.
type refreshCache[K comparable, V any] struct {
	ttl time.Duration
	now func() time.Time
	mu  sync.Mutex
	m   map[K]*refreshEntry[V]
}

// refreshEntry is one key's value; only reloading changes once it is in
// the map (a load stores a new entry).
type refreshEntry[V any] struct {
	v  V
	at time.Time // when the load of v began
	// reloading: a caller loads the lapsed v again.
	reloading bool
	// first is open while the key's first load is in flight.
	first chan struct{}
	// err is the first load's error for its waiters (set before first is
	// closed); nil for a load that succeeded or whose loader's context
	// ended.
	err error
}

func newRefreshCache[K comparable, V any](ttl time.Duration, now func() time.Time) *refreshCache[K, V] {
	return &refreshCache[K, V]{ttl: ttl, now: now}
}

// get returns key's value, from the cache or by calling load with the
// lapsed value (the zero V before the first load). load must not call
// the cache.
func (rc *refreshCache[K, V]) get(ctx context.Context, key K, load func(ctx context.Context, old V) (V, error)) (V, error) {
	for {
		rc.mu.Lock()
		rc.m = bounded(rc.m)
		e := rc.m[key]
		now := rc.now()
		switch {
		case e != nil && e.first != nil:
			rc.mu.Unlock()
			select {
			case <-e.first:
			case <-ctx.Done():
				var zero V
				return zero, ctx.Err()
			}
			if e.err != nil {
				var zero V
				return zero, e.err
			}
			continue // loaded, set or forgotten meanwhile, or its loader gave up
		case e != nil && (e.reloading || now.Sub(e.at) < rc.ttl && !now.Before(e.at)):
			rc.mu.Unlock()
			return e.v, nil
		case e != nil:
			e.reloading = true // this caller loads; the others keep e.v meanwhile
		default:
			e = &refreshEntry[V]{first: make(chan struct{})}
			rc.m[key] = e
		}
		rc.mu.Unlock()
		return rc.load(ctx, key, e, now, load)
	}
}

// load runs the load of entry e of key, begun at now.
func (rc *refreshCache[K, V]) load(ctx context.Context, key K, e *refreshEntry[V], now time.Time, load func(context.Context, V) (V, error)) (v V, err error) {
	done := false
	defer func() {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		current := rc.m[key] == e // not set nor forgotten meanwhile
		switch {
		case done && current:
			rc.m[key] = &refreshEntry[V]{v: v, at: now}
		case current && e.first != nil:
			delete(rc.m, key)
		case current:
			e.reloading = false
		}
		if e.first != nil {
			if err != nil && ctx.Err() == nil {
				e.err = err
			}
			close(e.first) // also when load panicked: its waiters load again
		}
	}()
	v, err = load(ctx, e.v)
	done = err == nil
	return v, err
}

// set stores v as key's value, loaded now: a load in flight then keeps
// its result to itself.
func (rc *refreshCache[K, V]) set(key K, v V) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.m = bounded(rc.m)
	rc.m[key] = &refreshEntry[V]{v: v, at: rc.now()}
}

// forget drops key's value: the next caller loads it again, and a load
// in flight keeps its result to itself.
func (rc *refreshCache[K, V]) forget(key K) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.m, key)
}
