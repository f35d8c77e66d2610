package docket

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// cancelBeforeFinish is a real store where a cancel of the job lands just
// before each finish: after the lease call read the job, before its finish
// statement ran, as a concurrent DELETE /v1/jobs/{id} can.
type cancelBeforeFinish struct {
	store.Store
	t *testing.T
}

func (s cancelBeforeFinish) JobFinishMany(ctx context.Context, p *store.JobFinishManyParams) ([]job.State, error) {
	for _, f := range p.Jobs {
		_, err := s.Store.JobCancel(ctx, &store.JobCancelParams{ID: f.ID, Now: p.Now})
		require.NoError(s.t, err)
	}
	return s.Store.JobFinishMany(ctx, p)
}

// LeaseRelease and LeaseFail report the state the finish wrote: a cancel
// requested between their read of the job and the finish ends the job
// CANCELED, and they must say so, not RETRY.
func TestLeaseEndReportsStateWritten(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, err := NewClient(ctx, Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, c.Close()) })
			real := c.store
			c.store = cancelBeforeFinish{Store: real, t: t}

			for name, end := range map[string]func(leaseID string) (JobState, error){
				"Release": func(id string) (JobState, error) { return c.LeaseRelease(ctx, id, "shutting down") },
				"Fail":    func(id string) (JobState, error) { return c.LeaseFail(ctx, id, "upstream 503", true) },
			} {
				_, err := c.Insert(ctx, RawArgs{Type: "race." + name}, nil)
				require.NoError(t, err)
				leases, err := c.Lease(ctx, LeaseParams{Queues: []string{"race." + name}, Max: 1, Duration: time.Minute, WorkerID: "w"})
				require.NoError(t, err)
				require.Len(t, leases, 1)
				got, err := end(leases[0].ID)
				require.NoError(t, err, name)
				row, err := real.JobGet(ctx, leases[0].Job.ID)
				require.NoError(t, err)
				require.Equal(t, JobStateCanceled, row.State, name)
				require.Equal(t, row.State, got, "%s reports the state written", name)
			}
		})
	}
}
