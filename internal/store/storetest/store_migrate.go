package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

func testMigration(t *testing.T, open opener) {
	status := func(t *testing.T, b *bundle) []store.Migration {
		t.Helper()
		ms, err := b.s.MigrationStatus(b.ctx)
		require.NoError(t, err)
		require.NotEmpty(t, ms)
		for i, m := range ms {
			require.Equal(t, i+1, m.Version, "versions are 1..n in order")
			require.NotEmpty(t, m.Name)
			require.Equal(t, m.Applied, !m.AppliedAt.IsZero(), "migration %d: AppliedAt set iff applied", m.Version)
		}
		return ms
	}
	applied := func(ms []store.Migration) int {
		n := 0
		for _, m := range ms {
			if m.Applied {
				n++
			}
		}
		return n
	}

	t.Run("StatusAllApplied", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		ms := status(t, b)
		require.Equal(t, len(ms), applied(ms))
	})

	t.Run("UpWhenCurrentIsNoop", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		row := b.jobIn(t, job.StateQueued)
		_, err := b.s.Migrate(b.ctx, &store.MigrateParams{Direction: store.Up})
		require.NoError(t, err)
		ms := status(t, b)
		require.Equal(t, len(ms), applied(ms))
		b.get(t, row.ID)
	})

	t.Run("DownUp", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		n := len(status(t, b))
		b.jobIn(t, job.StateSuccess)
		require.NoError(t, b.s.NodeHeartbeat(b.ctx, &store.NodeHeartbeatParams{ID: "n1", Hostname: "h", PID: 1, Now: base}))
		require.NoError(t, b.s.QueueSetPaused(b.ctx, &store.QueueSetPausedParams{Name: "paused", Paused: true, Now: base}))
		ok, err := b.s.LeaderAttemptElect(b.ctx, &store.LeaderElectParams{Name: "default", NodeID: "n1", TTL: later.Sub(base), Now: base})
		require.NoError(t, err)
		require.True(t, ok)

		// One step down: only the newest migration is reverted.
		_, err = b.s.Migrate(b.ctx, &store.MigrateParams{Direction: store.Down, Steps: 1})
		require.NoError(t, err)
		ms := status(t, b)
		require.Equal(t, n-1, applied(ms))
		require.False(t, ms[n-1].Applied)

		_, err = b.s.Migrate(b.ctx, &store.MigrateParams{Direction: store.Down})
		require.NoError(t, err)
		require.Zero(t, applied(status(t, b)))

		_, err = b.s.Migrate(b.ctx, &store.MigrateParams{Direction: store.Up})
		require.NoError(t, err)
		require.Equal(t, n, applied(status(t, b)))

		// Clean: every table is empty, and the store works.
		rows, err := b.s.JobList(b.ctx, &store.JobListParams{Limit: 10})
		require.NoError(t, err)
		require.Empty(t, rows)
		b.requireNoOutbox(t, 0)
		nodes, err := b.s.NodeList(b.ctx)
		require.NoError(t, err)
		require.Empty(t, nodes)
		qs, err := b.s.QueueList(b.ctx)
		require.NoError(t, err)
		require.Empty(t, qs)
		ok, err = b.s.LeaderAttemptElect(b.ctx, &store.LeaderElectParams{Name: "default", NodeID: "n2", TTL: lease, Now: at(1)})
		require.NoError(t, err)
		require.True(t, ok, "leadership was reset")

		row := b.jobIn(t, job.StateSuccess)
		require.Equal(t, job.StateSuccess, b.get(t, row.ID).State)
	})
}
