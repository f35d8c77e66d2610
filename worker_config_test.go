package docket_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestWorkerConfigIntervalMin: a WorkerConfig interval below its minimum
// (a 1 ns poll queried the database without a pause, a core busy per
// loop) is refused, one *ValidationError per field, all at once; the
// minimums themselves pass, as do zero (the defaults).
func TestWorkerConfigIntervalMin(t *testing.T) {
	t.Parallel()
	tiny := docket.WorkerConfig{
		LeaseDuration: time.Nanosecond, RescueInterval: time.Nanosecond, SchedulerInterval: time.Nanosecond,
		PruneInterval: time.Nanosecond, PollInterval: time.Nanosecond, LeaderTTL: time.Nanosecond,
		CompleteInterval: time.Nanosecond, WorkflowSweepInterval: time.Nanosecond,
		AssignmentReapInterval: time.Nanosecond, PoolEstimateInterval: -time.Second,
	}
	err := tiny.Validate()
	require.Equal(t, []string{"LeaseDuration", "RescueInterval", "SchedulerInterval", "PruneInterval",
		"PollInterval", "LeaderTTL", "CompleteInterval", "WorkflowSweepInterval",
		"AssignmentReapInterval", "PoolEstimateInterval"}, validationFields(t, err))
	require.ErrorContains(t, err, "PollInterval: 1ns is below the minimum 10ms")
	require.ErrorContains(t, err, "CompleteInterval: 1ns is below the minimum 1ms")
	require.ErrorContains(t, err, "PoolEstimateInterval: -1s is below the minimum 10ms")

	least := docket.WorkerConfig{
		LeaseDuration: docket.WorkerLeaseDurationMin, RescueInterval: docket.WorkerIntervalMin,
		SchedulerInterval: docket.WorkerIntervalMin, PruneInterval: docket.WorkerIntervalMin,
		PollInterval: docket.WorkerIntervalMin, LeaderTTL: docket.LeaderTTLMin,
		CompleteInterval: docket.CompleteIntervalMin, WorkflowSweepInterval: docket.WorkerIntervalMin,
		AssignmentReapInterval: docket.WorkerIntervalMin, PoolEstimateInterval: docket.WorkerIntervalMin,
	}
	require.NoError(t, least.Validate())
	require.NoError(t, docket.WorkerConfig{}.Validate(), "zero fields take the defaults")
	require.Equal(t, 10*time.Millisecond, docket.WorkerIntervalMin, "serve's flags have the same minimum")

	// Start refuses it before anything runs.
	b := setup(t, testdb.Backend{Name: "sqlite", URL: testdb.SQLiteMigratedURL}, docket.WorkerConfig{PollInterval: time.Nanosecond})
	docket.AddHandler(b.worker, func(context.Context, *docket.Job[echoArgs]) error { return nil })
	err = b.worker.Start(t.Context())
	require.Equal(t, []string{"PollInterval"}, validationFields(t, err))
	b.worker.Stop(t.Context())
}
