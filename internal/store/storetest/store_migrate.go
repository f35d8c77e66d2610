package storetest

import (
	"fmt"
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

// RunUnknownMigration checks a database that a newer docket migrated
// further than this binary knows: s is migrated, and record writes a
// tracking row for a migration (version, name) without running anything,
// as that newer docket would have. MigrationStatus lists it, marked
// Unknown, after the known ones; Migrate down refuses, naming it, and
// reverts nothing (reverting this binary's last migration would leave the
// newer one on a schema it was not written for); up has nothing to do.
func RunUnknownMigration(t *testing.T, s store.Store, record func(version int, name string)) {
	t.Helper()
	ctx := t.Context()
	before, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	n := len(before)
	record(n+1, "from_the_future")

	ms, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.Len(t, ms, n+1)
	require.Equal(t, before, ms[:n], "the known migrations are listed as before")
	last := ms[n]
	require.Equal(t, n+1, last.Version)
	require.Equal(t, "from_the_future", last.Name)
	require.True(t, last.Applied)
	require.True(t, last.Unknown)
	require.False(t, last.AppliedAt.IsZero())
	for _, m := range ms[:n] {
		require.False(t, m.Unknown)
	}

	for _, steps := range []int{1, 0} {
		done, err := s.Migrate(ctx, &store.MigrateParams{Direction: store.Down, Steps: steps})
		var unknown *store.UnknownMigrationsError
		require.ErrorAs(t, err, &unknown, "down %d", steps)
		require.Empty(t, done)
		require.Contains(t, err.Error(), fmt.Sprintf("%04d_from_the_future", n+1))
		after, err := s.MigrationStatus(ctx)
		require.NoError(t, err)
		require.Equal(t, ms, after, "down %d reverted nothing", steps)
	}

	done, err := s.Migrate(ctx, &store.MigrateParams{Direction: store.Up})
	require.NoError(t, err)
	require.Empty(t, done)
}
