package engine

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/testdb"
)

// countingService records whether it runs and how often it was started.
type countingService struct {
	mu      sync.Mutex
	running bool
	starts  int
}

func (s *countingService) Start(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = true
	s.starts++
	return nil
}

func (s *countingService) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = false
}

func (s *countingService) state() (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, s.starts
}

// TestMaintenanceRunsOnTheLeaderOnly: Config.Maintenance services (the
// outbox relay) run on the elected leader alone, and move with leadership.
func TestMaintenanceRunsOnTheLeaderOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	ctx := t.Context()
	svcA, svcB := &countingService{}, &countingService{}
	cfgA := b.config(nil)
	cfgA.NodeID, cfgA.Maintenance = "node-a", []Service{svcA}
	cfgB := b.config(nil)
	cfgB.NodeID, cfgB.Maintenance = "node-b", []Service{svcB}
	a, err := New(b.store, cfgA, nil)
	require.NoError(t, err)
	nb, err := New(b.store, cfgB, nil)
	require.NoError(t, err)

	require.NoError(t, a.Start(ctx))
	waitFor(t, "node a runs the service as leader", func() bool { running, _ := svcA.state(); return running })
	require.NoError(t, nb.Start(ctx))
	defer nb.Stop(ctx)
	running, _ := svcB.state()
	require.False(t, running, "not while node a leads")

	a.Stop(ctx) // resigns
	var starts int
	running, starts = svcA.state()
	require.False(t, running, "stopped with its engine")
	require.Equal(t, 1, starts)
	waitFor(t, "node b takes over the service", func() bool { running, _ := svcB.state(); return running })
}
