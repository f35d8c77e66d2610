package docket_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestWorkerFailedStartLeavesNothingRunning: a worker whose database is
// closed cannot register its node, after part of its engine has started;
// Start fails with none of its goroutines left, and the worker stays
// stopped. Not parallel: goleak compares with the goroutines that ran
// before the worker was made.
func TestWorkerFailedStartLeavesNothingRunning(t *testing.T) {
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			ctx := t.Context()
			b := setup(t, backend, fastConfig())
			require.NoError(t, b.client.Close()) // closed again at cleanup: a no-op
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

			docket.AddHandler(b.worker, func(context.Context, *docket.Job[echoArgs]) error { return nil })
			err := b.worker.Start(ctx)
			require.ErrorContains(t, err, "register node")
			b.worker.Stop(ctx) // nothing started: nothing to stop
			// Stopped, not half started: handlers may still be added.
			docket.AddHandler(b.worker, func(context.Context, *docket.Job[fatalArgs]) error { return nil })
		})
	}
}
