package docket_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// requireLeaseOf checks that a lease id names the job and attempt, and
// carries a token.
func requireLeaseOf(t *testing.T, jobID any, attempt int, leaseID string) {
	t.Helper()
	id, att, err := docket.ParseLeaseID(leaseID)
	require.NoError(t, err)
	require.Equal(t, jobID, id)
	require.Equal(t, attempt, att)
	require.Len(t, strings.Split(leaseID, "."), 3, "a lease id has a token: %s", leaseID)
}

// TestLeaseIDIsProvenByItsToken: only the lease id Lease gave works. An
// id made from the job's id and attempt (which any reader of the job
// sees), the token of another lease, or a changed token is refused with
// ErrLeaseLost by every lease call, and changes nothing; the lease id
// given works through another client of the same database (another
// server process).
func TestLeaseIDIsProvenByItsToken(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend, fastConfig())
		for i := range 2 {
			_, err := b.client.Insert(ctx, echoArgs{N: i}, nil)
			require.NoError(t, err)
		}
		leases, err := b.client.Lease(ctx, docket.LeaseParams{Queues: []string{"test.echo"}, Max: 2, Duration: time.Minute, WorkerID: "w"})
		require.NoError(t, err)
		require.Len(t, leases, 2)
		mine, other := leases[0], leases[1]
		requireLeaseOf(t, mine.Job.ID, 1, mine.ID)
		otherToken := other.ID[strings.LastIndex(other.ID, ".")+1:]
		changed := []byte(mine.ID)
		changed[len(changed)-1] ^= 1
		for _, forged := range []string{
			mine.Job.ID.String() + ".1",               // job and attempt alone
			mine.Job.ID.String() + ".1.",              // an empty token
			mine.Job.ID.String() + ".1." + otherToken, // another lease's token
			string(changed),                           // a token changed
			mine.Job.ID.String() + ".2" + mine.ID[len(mine.Job.ID.String())+2:], // the token for another attempt
		} {
			_, err := b.client.LeaseHeartbeat(ctx, forged, time.Hour, nil, "forged")
			require.ErrorIs(t, err, docket.ErrLeaseLost, forged)
			require.ErrorIs(t, b.client.LeaseComplete(ctx, forged, json.RawMessage(`{"forged":true}`)), docket.ErrLeaseLost, forged)
			_, err = b.client.LeaseFail(ctx, forged, "forged", false)
			require.ErrorIs(t, err, docket.ErrLeaseLost, forged)
			_, err = b.client.LeaseRelease(ctx, forged, "forged")
			require.ErrorIs(t, err, docket.ErrLeaseLost, forged)
		}
		row, err := b.client.Get(ctx, mine.Job.ID)
		require.NoError(t, err)
		require.Equal(t, docket.JobStateRunning, row.State, "nothing forged changed the job")
		require.Empty(t, row.ProgressMsg)
		require.True(t, row.LeaseExpiresAt.Equal(mine.ExpiresAt), "no forged heartbeat renewed the lease")

		// Another process on the database takes the lease id as given.
		other2, err := docket.NewClient(ctx, docket.Config{DatabaseURL: b.url})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, other2.Close()) })
		_, err = other2.LeaseHeartbeat(ctx, mine.ID, time.Minute, nil, "from the other process")
		require.NoError(t, err)
		require.NoError(t, other2.LeaseComplete(ctx, mine.ID, nil))
		require.NoError(t, b.client.LeaseComplete(ctx, other.ID, nil))
	})
}

// TestLeaseCallsCannotEndInProcessJobs: a job a Worker of this process
// runs has no lease id anybody was given: the lease calls, with the
// job's id and attempt, refuse to end it, and its handler's end stands.
func TestLeaseCallsCannotEndInProcessJobs(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		b := setup(t, backend, fastConfig())
		started, finish := make(chan struct{}), make(chan struct{})
		docket.AddHandler(b.worker, func(ctx context.Context, j *docket.Job[echoArgs]) error {
			close(started)
			<-finish
			return nil
		})
		b.start(t)
		res, err := b.client.Insert(ctx, echoArgs{N: 1}, nil)
		require.NoError(t, err)
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler did not start")
		}
		forged := res.Job.ID.String() + ".1"
		require.ErrorIs(t, b.client.LeaseComplete(ctx, forged, json.RawMessage(`{"forged":true}`)), docket.ErrLeaseLost)
		_, err = b.client.LeaseFail(ctx, forged, "forged", false)
		require.ErrorIs(t, err, docket.ErrLeaseLost)
		close(finish)
		eventually(t, 10*time.Second, "the handler's end", func() bool {
			row, err := b.client.Get(ctx, res.Job.ID)
			require.NoError(t, err)
			return row.State == docket.JobStateSuccess
		})
		row, err := b.client.Get(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Empty(t, row.Result, "not the forged result")
	})
}
