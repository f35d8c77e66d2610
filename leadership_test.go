package docket_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/natsembed"
)

// TestEventsFlowWhileAWorkerWithoutThemLeads: a worker that has no event
// relay and no webhooks (a plain Go worker) may lead the maintenance; the
// outbox relay and the webhook deliveries of the processes that have them
// must run all the same. The chaos harness found this (seed 45): a Go
// worker won the one leadership after the serving leader was killed, and no
// event reached the bus or a webhook until the end of the run.
func TestEventsFlowWhileAWorkerWithoutThemLeads(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		cfg := fastConfig()
		cfg.NodeID = "plain"
		plain := setup(t, backend, cfg)
		// A job that fails once is scheduled again by the leader alone: its
		// success shows the plain worker leads.
		var tries atomic.Int32
		docket.AddHandler(plain.worker, func(ctx context.Context, j *docket.Job[flakyArgs]) error {
			if tries.Add(1) == 1 {
				return errors.New("once")
			}
			return nil
		})
		plain.start(t)
		res, err := plain.client.Insert(ctx, flakyArgs{}, nil)
		require.NoError(t, err)
		plain.waitState(t, res.Job.ID, docket.JobStateSuccess)

		srv, err := natsembed.Start(t.TempDir())
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		bus, err := docket.OpenEventBus(ctx, docket.EventBusConfig{Embedded: srv})
		require.NoError(t, err)
		t.Cleanup(bus.Close)
		ecfg := fastConfig()
		ecfg.NodeID = "serving"
		ecfg.EventRelay = plain.client.NewEventRelay(bus, docket.EventRelayConfig{PollInterval: 10 * time.Millisecond})
		serving := docket.NewWorker(plain.client, ecfg)
		require.NoError(t, serving.Start(ctx))
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			serving.Stop(sctx)
		})
		hooks, err := plain.client.NewWebhooks(docket.WebhooksConfig{NodeID: "serving", LeaderTTL: cfg.LeaderTTL})
		require.NoError(t, err)
		require.NoError(t, hooks.Start(ctx))
		t.Cleanup(hooks.Stop)

		eventually(t, 10*time.Second, "the relay to publish the outbox", func() bool {
			n, err := plain.client.UnpublishedEventRows(ctx)
			require.NoError(t, err)
			return n == 0
		})
		eventually(t, 10*time.Second, "the webhook deliveries to run", hooks.Leading)
	})
}
