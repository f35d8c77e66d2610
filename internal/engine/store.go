package engine

import (
	"context"

	"github.com/docket-run/docket/internal/leader"
	"github.com/docket-run/docket/internal/store"
)

// Store is what the engine needs of the store: the jobs domain, wakeups,
// transactions (Config.JobsEndedTx), the node registry, the leaderships its electors hold, the outbox's
// bound by age (Config.OutboxMaxAge), and a ping to tell a database that is down from one that refuses.
type Store interface {
	store.JobStore
	store.Transactor // Config.JobsEndedTx
	store.Subscriber
	store.StatsRefresher // the analyzer
	leader.Store
	NodeHeartbeat(ctx context.Context, p *store.NodeHeartbeatParams) error
	NodeDelete(ctx context.Context, id string) error
	NodeDeleteStale(ctx context.Context, p *store.NodeDeleteStaleParams) (int, error)
	OutboxDeleteOld(ctx context.Context, p *store.OutboxDeleteOldParams) (int, error) // the pruner
	Ping(ctx context.Context) error
}
