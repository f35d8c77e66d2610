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

// A job given back again and again is refunded LeaseReleaseRefundsMax
// times; from then on a release counts as an attempt, and the job dies
// when its attempts run out instead of looping forever.
func TestLeaseReleaseRefundsAreBounded(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
			c, err := NewClient(ctx, Config{DatabaseURL: backend.URL(t), AutoMigrate: true, Now: func() time.Time { return now }})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, c.Close()) })
			res, err := c.Insert(ctx, RawArgs{Type: "poison"}, &InsertOpts{MaxAttempts: 2})
			require.NoError(t, err)
			release := func() JobState {
				t.Helper()
				now = now.Add(time.Hour) // past any backoff
				_, err := c.store.JobSchedule(ctx, &store.JobScheduleParams{Now: now, Max: 10})
				require.NoError(t, err)
				leases, err := c.Lease(ctx, LeaseParams{Queues: []string{"poison"}, Max: 1, Duration: time.Minute, WorkerID: "w"})
				require.NoError(t, err)
				require.Len(t, leases, 1)
				state, err := c.LeaseRelease(ctx, leases[0].ID, "")
				require.NoError(t, err)
				return state
			}
			for i := range LeaseReleaseRefundsMax {
				require.Equal(t, JobStateRetry, release(), "release %d", i+1)
			}
			row, err := c.Get(ctx, res.Job.ID)
			require.NoError(t, err)
			require.Equal(t, 0, row.AttemptsUsed(), "every release so far was refunded")

			require.Equal(t, JobStateRetry, release(), "counted: one attempt of two used")
			row, err = c.Get(ctx, res.Job.ID)
			require.NoError(t, err)
			require.Equal(t, 1, row.AttemptsUsed())
			require.True(t, row.RunAt.After(now), "a counted release waits its backoff")
			require.Equal(t, JobStateDead, release(), "counted: no attempt left")
			atts, err := c.store.JobAttemptList(ctx, res.Job.ID)
			require.NoError(t, err)
			require.Len(t, atts, LeaseReleaseRefundsMax+2)
			require.Equal(t, job.OutcomeError, atts[len(atts)-1].Outcome)
			require.Contains(t, atts[len(atts)-1].Error, "counted as an attempt")
		})
	}
}
