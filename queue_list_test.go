package docket_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestQueueListPages: Client.QueueList pages the queues by name (After,
// Limit), each with its counts; a cap that is not positive is a
// *ValidationError naming Cap.
func TestQueueListPages(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, docket.WorkerConfig{})
		ctx := t.Context()
		for _, q := range []string{"c", "a", "b", "a"} {
			_, err := b.client.Insert(ctx, echoArgs{}, &docket.InsertOpts{Queue: q})
			require.NoError(t, err)
		}
		names := func(qs []*docket.QueueInfo) []string {
			out := []string{}
			for _, q := range qs {
				out = append(out, q.Name)
			}
			return out
		}
		first, err := b.client.QueueList(ctx, docket.QueueListParams{Cap: 100, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b"}, names(first))
		require.Equal(t, 2, first[0].Counts[docket.JobStateQueued])
		rest, err := b.client.QueueList(ctx, docket.QueueListParams{Cap: 100, Limit: 2, After: "b"})
		require.NoError(t, err)
		require.Equal(t, []string{"c"}, names(rest))
		all, err := b.client.QueueList(ctx, docket.QueueListParams{Cap: 100})
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b", "c"}, names(all), "default limit 100")

		_, err = b.client.QueueList(ctx, docket.QueueListParams{})
		require.Equal(t, []string{"Cap"}, validationFields(t, err))
	})
}
