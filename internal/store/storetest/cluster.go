package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/store"
)

func testLeader(t *testing.T, open opener) {
	electIn := func(t *testing.T, b *bundle, name, node string, now time.Time) bool {
		t.Helper()
		ok, err := b.s.LeaderAttemptElect(b.ctx, &store.LeaderElectParams{Name: name, NodeID: node, TTL: 30 * time.Second, Now: now})
		require.NoError(t, err)
		return ok
	}
	elect := func(t *testing.T, b *bundle, node string, now time.Time) bool {
		t.Helper()
		return electIn(t, b, "default", node, now)
	}
	resign := func(t *testing.T, b *bundle, node string) {
		t.Helper()
		require.NoError(t, b.s.LeaderResign(b.ctx, &store.LeaderResignParams{Name: "default", NodeID: node}))
	}

	t.Run("LeadershipsAreIndependent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		require.True(t, electIn(t, b, "default", "n1", base))
		require.True(t, electIn(t, b, "events", "n2", base), "another leadership has its own term")
		require.False(t, electIn(t, b, "events", "n1", at(time.Second)))
		require.False(t, electIn(t, b, "default", "n2", at(time.Second)))
		require.NoError(t, b.s.LeaderResign(b.ctx, &store.LeaderResignParams{Name: "events", NodeID: "n1"}), "not its holder: a no-op")
		require.True(t, electIn(t, b, "events", "n2", at(2*time.Second)), "still n2's")
		require.NoError(t, b.s.LeaderResign(b.ctx, &store.LeaderResignParams{Name: "events", NodeID: "n2"}))
		require.True(t, electIn(t, b, "events", "n1", at(3*time.Second)), "free after its holder resigned")
		require.True(t, electIn(t, b, "default", "n1", at(3*time.Second)), "the other leadership kept its holder")
	})

	t.Run("ElectRenewExpire", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		require.True(t, elect(t, b, "n1", base), "first node is elected")
		require.False(t, elect(t, b, "n2", at(10*time.Second)), "term still valid")
		require.True(t, elect(t, b, "n1", at(20*time.Second)), "leader renews")
		// The renewal moved the term to base+50s.
		require.False(t, elect(t, b, "n2", at(40*time.Second)), "renewed term still valid")
		require.True(t, elect(t, b, "n2", at(51*time.Second)), "term expired")
		require.False(t, elect(t, b, "n1", at(52*time.Second)), "old leader lost it")
		require.True(t, elect(t, b, "n2", at(53*time.Second)))
	})

	t.Run("Resign", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		require.True(t, elect(t, b, "n1", base))
		resign(t, b, "n2") // not the leader: no effect
		require.False(t, elect(t, b, "n2", at(time.Second)))
		resign(t, b, "n1")
		require.True(t, elect(t, b, "n2", at(2*time.Second)), "resigning frees leadership at once")
		require.False(t, elect(t, b, "n1", at(3*time.Second)))
	})

	t.Run("ResignWithoutLeader", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		resign(t, b, "n1")
		require.True(t, elect(t, b, "n1", base))
	})
}

func testNode(t *testing.T, open opener) {
	nodes := func(t *testing.T, b *bundle) map[string]*store.Node {
		t.Helper()
		list, err := b.s.NodeList(b.ctx)
		require.NoError(t, err)
		m := map[string]*store.Node{}
		for _, n := range list {
			require.NotContains(t, m, n.ID, "node listed twice")
			m[n.ID] = n
		}
		return m
	}
	heartbeat := func(t *testing.T, b *bundle, id string, now time.Time) {
		t.Helper()
		require.NoError(t, b.s.NodeHeartbeat(b.ctx, &store.NodeHeartbeatParams{ID: id, Hostname: "host-" + id, PID: 4242, Now: now}))
	}

	t.Run("HeartbeatUpserts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		require.Empty(t, nodes(t, b))
		heartbeat(t, b, "n1", base)
		got := nodes(t, b)
		require.Len(t, got, 1)
		require.Equal(t, "host-n1", got["n1"].Hostname)
		require.Equal(t, 4242, got["n1"].PID)
		requireTime(t, base, got["n1"].StartedAt)
		requireTime(t, base, got["n1"].LastActive)

		heartbeat(t, b, "n1", at(time.Minute))
		heartbeat(t, b, "n2", at(2*time.Minute))
		got = nodes(t, b)
		require.Len(t, got, 2)
		requireTime(t, base, got["n1"].StartedAt, "started_at is kept")
		requireTime(t, at(time.Minute), got["n1"].LastActive)
		requireTime(t, at(2*time.Minute), got["n2"].StartedAt)
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		heartbeat(t, b, "n1", base)
		heartbeat(t, b, "n2", base)
		require.NoError(t, b.s.NodeDelete(b.ctx, "n1"))
		got := nodes(t, b)
		require.Len(t, got, 1)
		require.Contains(t, got, "n2")
	})

	t.Run("DeleteStale", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		heartbeat(t, b, "old", base)
		heartbeat(t, b, "fresh", base)
		heartbeat(t, b, "fresh", at(5*time.Minute))
		heartbeat(t, b, "new", at(6*time.Minute))
		n, err := b.s.NodeDeleteStale(b.ctx, &store.NodeDeleteStaleParams{LastActiveBefore: at(time.Minute)})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		got := nodes(t, b)
		require.Len(t, got, 2)
		require.Contains(t, got, "fresh")
		require.Contains(t, got, "new")
	})
}

// testAnalyzeGrown: AnalyzeGrown leaves tables alone until they grow
// past their statistics; on PostgreSQL, 2,000 jobs in a fresh table are
// (the postgres package's TestAnalyzeGrown shows what that does to a
// prepared statement's plan), on SQLite nothing ever is. Once analyzed,
// a table is not again until it doubles.
func testAnalyzeGrown(t *testing.T, open opener) {
	b := setup(t, open)
	tables, err := b.s.AnalyzeGrown(b.ctx)
	require.NoError(t, err)
	require.Empty(t, tables, "a fresh database")

	// Autovacuum (on in this database) may analyze the table between two
	// batches, and the table must then double again: batches go on until
	// AnalyzeGrown reports it (on PostgreSQL), at most 16 of them.
	q := newQueue()
	batch := func() {
		ps := make([]*store.JobInsertParams, 500)
		for i := range ps {
			ps[i] = newJob(q)
		}
		b.insert(t, ps...)
	}
	for range 4 {
		batch()
	}
	tables, err = b.s.AnalyzeGrown(b.ctx)
	require.NoError(t, err)
	if b.s.Backend() == "postgres" {
		for i := 0; !slices.Contains(tables, "docket_jobs"); i++ {
			require.Less(t, i, 12, "docket_jobs never reported, after %d jobs", (4+i)*500)
			batch()
			tables, err = b.s.AnalyzeGrown(b.ctx)
			require.NoError(t, err)
		}
	} else {
		require.Empty(t, tables)
	}
	tables, err = b.s.AnalyzeGrown(b.ctx)
	require.NoError(t, err)
	require.Empty(t, tables, "nothing grew since")
}
