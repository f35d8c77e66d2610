package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// docket bench refuses a database with unfinished jobs (a previous
// continuous run leaves some) unless --reset empties it first.
func TestBenchReset(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			u := backend.URL(t)
			c, err := docket.NewClient(context.Background(), docket.Config{DatabaseURL: u, AutoMigrate: true})
			require.NoError(t, err)
			_, err = c.InsertMany(context.Background(), []docket.InsertParams{{Args: benchArgs{}}, {Args: benchArgs{}}})
			require.NoError(t, err)
			require.NoError(t, c.Close())

			args := []string{"bench", "--database-url", u, "--mode", "burn", "--jobs", "30", "--workers", "10", "--batch", "10", "--interval", "50ms"}
			_, err = runDocket(t, args...)
			require.ErrorContains(t, err, "2 unfinished jobs")
			require.ErrorContains(t, err, "--reset")
			_, err = runDocket(t, append(args, "--reset")...)
			require.NoError(t, err)
			// And again: back-to-back runs are one command each.
			_, err = runDocket(t, append(args, "--reset")...)
			require.NoError(t, err)

			c, err = docket.NewClient(context.Background(), docket.Config{DatabaseURL: u})
			require.NoError(t, err)
			defer c.Close()
			counts, err := c.CountByState(context.Background())
			require.NoError(t, err)
			total := 0
			for _, n := range counts {
				total += n
			}
			require.Equal(t, 30, counts[docket.JobStateSuccess], "the last run's jobs, all worked")
			require.Equal(t, 30, total, "nothing of the earlier runs is left")
		})
	}
}
