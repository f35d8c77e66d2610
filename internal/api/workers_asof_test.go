package api

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestWorkerCacheAsOfOldestRead: what workerID knows is as old as the
// oldest read it kept. Into an empty cache, a read of one contributor
// that began at t0 but ended after one that began later (t1) must leave
// asOf at t0: with asOf at t1, the slow read's answer (active, as of t0)
// is trusted until t1 + workerStateTTL, longer than workerStateTTL past
// the read — a ban made elsewhere between t0 and t1 is missed that much
// longer than documented.
func TestWorkerCacheAsOfOldestRead(t *testing.T) {
	t.Parallel()
	s := &Server{}
	gen := s.workers.gen
	t0 := time.Now().Add(-time.Second)
	t1 := t0.Add(900 * time.Millisecond)
	s.rememberWorker(uuid.New(), false, gen, t1) // the fast read, begun later, ends first
	s.rememberWorker(uuid.New(), false, gen, t0) // the slow read, begun earlier
	s.workers.mu.Lock()
	asOf := s.workers.asOf
	s.workers.mu.Unlock()
	require.False(t, asOf.After(t0), "asOf %s is after the oldest kept read's start %s", asOf, t0)
}
