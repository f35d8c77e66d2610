package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/docket-run/docket/internal/leader"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

// A Start that fails part way leaves no goroutine running. With the
// database closed the node cannot register; by then the completer and the
// lease heartbeat (subscribed to the store's wakeups) run, and must be
// stopped before Start returns its error. Not parallel: goleak compares
// with the goroutines that ran before the engine was made.
func TestFailedStartLeavesNothingRunning(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			st := teststore.Open(t, backend.URL(t))
			require.NoError(t, st.Close()) // closed again at cleanup: a no-op
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

			cfg := Config{
				NodeID: "node-closed", Queues: map[string]int{"q": 2}, LeaderTTL: 150 * time.Millisecond,
				Leaderships: map[string][]service.Service{leader.Events: {
					&service.Loop{Name: "relay", Interval: time.Hour, Fn: func(context.Context) {}},
				}},
			}
			e, err := New(st, cfg, map[string]*Handler{"q": {}})
			require.NoError(t, err)
			err = e.Start(t.Context())
			require.ErrorContains(t, err, "register node node-closed")
			require.False(t, e.completer.life.Running())
			require.False(t, e.heartbeat.life.Running())
			e.Stop(t.Context()) // nothing started: nothing to stop
		})
	}
}

// An engine stops once: a second Stop, also at the same time as the first,
// returns when the first is done, and a stopped engine does not start
// again (its completer dropped late completions for good).
func TestEngineStopTwiceAndNoRestart(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		e, err := New(b.store, b.config(map[string]int{"q": 1}), map[string]*Handler{"q": {}})
		require.NoError(t, err)
		e.Stop(t.Context()) // before Start
		require.NoError(t, e.Start(t.Context()))
		require.NoError(t, e.Start(t.Context()))
		stopped := make(chan bool, 2)
		for range 2 {
			go func() {
				e.Stop(t.Context())
				stopped <- e.completer.life.Running() || e.heartbeat.life.Running()
			}()
		}
		for range 2 {
			require.False(t, <-stopped, "Stop returned while the engine's services ran")
		}
		require.ErrorContains(t, e.Start(t.Context()), "stopped engines do not start again")
	})
}

// The node registry registers once per Start, also when Starts race, and
// the first heartbeat after it comes a heartbeat interval later, not at
// once.
func TestNodeRegistryRegistersOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		fs := &faultyStore{Store: b.store}
		cfg := b.config(nil)
		cfg.NodeHeartbeat = time.Hour
		e, err := New(fs, cfg, nil)
		require.NoError(t, err)
		n := newNodeRegistry(e)
		errs := make(chan error, 4)
		for range cap(errs) {
			go func() { errs <- n.Start(t.Context()) }()
		}
		for range cap(errs) {
			require.NoError(t, <-errs)
		}
		n.Stop() // waits for the registry's goroutines
		require.EqualValues(t, 1, fs.nodeBeats.Load(), "NodeHeartbeat calls for one Start")
		nodes, err := b.store.NodeList(t.Context())
		require.NoError(t, err)
		require.Empty(t, nodes, "Stop deregisters")
	})
}
