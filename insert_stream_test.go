package docket_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// A large batch is prepared as it is sent (PostgreSQL streams it with
// COPY): an invalid job past the first rows sent is reported exactly as
// when the batch was validated before anything was written (every
// offending field, "job i: "), and nothing is written.
func TestInsertManyInvalidJobWritesNothing(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		ctx := context.Background()
		for _, bad := range []int{0, 2500, 2999} {
			params := make([]docket.InsertParams, 3000)
			for i := range params {
				params[i] = docket.InsertParams{Args: echoArgs{N: i}, Opts: &docket.InsertOpts{Queue: "stream"}}
			}
			nine := 42
			params[bad].Opts = &docket.InsertOpts{Queue: "no spaces", Priority: &nine}
			_, err := b.client.InsertMany(ctx, params)
			requireInvalidJob(t, err, bad)
			counts, err := b.client.CountByQueue(ctx)
			require.NoError(t, err)
			for _, c := range counts {
				require.Zero(t, c.Count, "queue %s state %s", c.Queue, c.State)
			}
		}
		res, err := b.client.InsertMany(ctx, []docket.InsertParams{{Args: echoArgs{N: 1}}, {Args: echoArgs{N: 2}}})
		require.NoError(t, err)
		require.Len(t, res, 2)

		// A store that fails before it reaches the invalid job (here: the
		// client is closed) still reports the job, as validation first did.
		closed, err := docket.NewClient(ctx, docket.Config{DatabaseURL: b.url})
		require.NoError(t, err)
		require.NoError(t, closed.Close())
		params := make([]docket.InsertParams, 3000)
		for i := range params {
			params[i] = docket.InsertParams{Args: echoArgs{N: i}}
		}
		nine := 42
		params[2500].Opts = &docket.InsertOpts{Queue: "no spaces", Priority: &nine}
		_, err = closed.InsertMany(ctx, params)
		requireInvalidJob(t, err, 2500)
	})
}

// requireInvalidJob: err names job i's queue and priority.
func requireInvalidJob(t *testing.T, err error, i int) {
	t.Helper()
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "job "+strconv.Itoa(i)+": "), "error %q", err)
	var fields []string
	for _, e := range err.(interface{ Unwrap() error }).Unwrap().(interface{ Unwrap() []error }).Unwrap() {
		var v *docket.ValidationError
		require.True(t, errors.As(e, &v), "%v", e)
		fields = append(fields, v.Field)
	}
	require.ElementsMatch(t, []string{"queue", "priority"}, fields)
}

// marshalPanicArgs panics when encoded.
type marshalPanicArgs struct{}

func (marshalPanicArgs) JobType() string { return "marshal_panics" }

func (marshalPanicArgs) MarshalJSON() ([]byte, error) { panic("payload refused") }

// A payload whose encoding panics in a streamed batch panics in the
// caller's goroutine, where it can be recovered, as when the batch was
// prepared before the insert; nothing is written.
func TestInsertManyPanicReachesCaller(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend, fastConfig())
		params := make([]docket.InsertParams, 3000)
		for i := range params {
			params[i] = docket.InsertParams{Args: echoArgs{N: i}}
		}
		params[2500].Args = marshalPanicArgs{}
		require.PanicsWithValue(t, "payload refused", func() {
			_, _ = b.client.InsertMany(context.Background(), params)
		})
		counts, err := b.client.CountByQueue(context.Background())
		require.NoError(t, err)
		for _, c := range counts {
			require.Zero(t, c.Count, "queue %s state %s", c.Queue, c.State)
		}
	})
}
