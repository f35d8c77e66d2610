package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/docket-run/docket/internal/backoff"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/leader"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// Defaults of Config. Each suits production; tests set short values.
const (
	LeaseDurationDefault     = 30 * time.Second
	LeaseDurationMin         = time.Second
	JobTimeoutDefault        = 5 * time.Minute
	MaxAttemptsDefault       = 25
	RescueIntervalDefault    = 15 * time.Second
	SchedulerIntervalDefault = time.Second
	PruneIntervalDefault     = time.Minute
	AnalyzeIntervalDefault   = 2 * time.Second
	RetentionDefault         = 7 * 24 * time.Hour
	OutboxMaxAgeDefault      = 7 * 24 * time.Hour
	PollIntervalDefault      = time.Second
	FetchCooldownDefault     = 5 * time.Millisecond
	LeaderTTLDefault         = 15 * time.Second
	NodeHeartbeatDefault     = 10 * time.Second
	FetchBatchDefault        = 200
	CompleteBatchDefault     = 2000
	CompleteIntervalDefault  = 5 * time.Millisecond
	RetryBackoffBaseDefault  = time.Second
	RetryBackoffMaxDefault   = time.Hour
	QueueWorkersDefault      = 10
)

// Config configures an Engine. Zero fields take the defaults above.
type Config struct {
	// NodeID names this process in leases, attempts and the nodes table.
	// Default: hostname-pid-random.
	NodeID string
	// Queues maps each queue this node works to its concurrency (handlers
	// running at once). Empty: the engine only does maintenance.
	Queues map[string]int
	// LeaseDuration of acquired jobs; the worker renews a lease once a
	// quarter of it has passed (it looks every sixth). Default 30 s.
	LeaseDuration time.Duration
	// JobTimeout is the default per-attempt deadline. Default 5 min.
	JobTimeout time.Duration
	// RescueInterval: how often the leader looks for expired leases. A job
	// whose holder died is retried within LeaseDuration + RescueInterval.
	// Default 15 s.
	RescueInterval time.Duration
	// SchedulerInterval: how often RETRY jobs whose backoff is over are
	// queued again. Default 1 s.
	SchedulerInterval time.Duration
	// PruneInterval and Retention: finished jobs older than Retention are
	// deleted every PruneInterval. Defaults 1 min and 7 days.
	PruneInterval time.Duration
	Retention     time.Duration
	// OutboxMaxAge bounds the outbox of a program that publishes no
	// events: every PruneInterval, outbox rows older than it that were
	// never published (no event relay runs, or it has been down that
	// long) or never fanned out to webhooks are deleted, so the outbox
	// does not grow without bound. A published row is left to the
	// relay's retention. Default 7 days (a JetStream stream keeps events
	// as long); negative keeps the rows forever.
	OutboxMaxAge time.Duration
	// AnalyzeInterval: how often the leader looks for tables grown past
	// their planner statistics and analyzes them (store.StatsRefresher:
	// the plans of a fresh table's statements read it whole until then).
	// Default 2 s; each look is one catalog query.
	AnalyzeInterval time.Duration
	// PollInterval: fallback acquisition poll when no wakeup arrives.
	// Default 1 s.
	PollInterval time.Duration
	// LeaderTTL: leadership term, renewed every third of it. Default 15 s.
	LeaderTTL time.Duration
	// NodeHeartbeat: how often the node refreshes its row. Default 10 s.
	NodeHeartbeat time.Duration
	// FetchCooldown: least time between two acquisitions prompted by
	// wakeups, once a fetch acquired a few jobs (a quiet queue, whose last
	// fetch found fewer, fetches at once). An idle queue acquires at once on the first wakeup; a burst
	// of single inserts then waits out the rest of the cooldown and is
	// acquired by one query instead of one durable commit per job, which
	// would take the fsyncs the inserts need. Default 5 ms.
	FetchCooldown time.Duration
	// FetchBatch: most jobs acquired per query. Default 200.
	FetchBatch int
	// CompleteBatch and CompleteInterval: completions are written when
	// CompleteBatch are pending or CompleteInterval after the first of them
	// (but see JobsEndedTx: under a light load the jobs it matches are
	// written at once).
	// Defaults 2000 and 5 ms (a commit per completion at a few hundred
	// jobs/s would compete with the inserts for fsyncs; at full speed on
	// SQLite's single writer, 2000 per commit beat 1000 by ~5 %).
	CompleteBatch    int
	CompleteInterval time.Duration
	// RetryBackoff is the default retry policy (per-type policies override).
	// Defaults base 1 s, max 1 h.
	RetryBackoff backoff.Policy
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now. Tests inject their own.
	Now func() time.Time
	// OnFinish, when set, observes every attempt end this engine wrote and
	// the database applied (completions, shutdown releases, and rescues
	// while this node leads): row is the job as acquired (queue, RunAt,
	// AttemptedAt), fin the end recorded. It is called synchronously after
	// the commit, from the writing goroutine: it must be quick and must not
	// block. Fenced ends are not observed. Default none.
	OnFinish func(row *job.Row, fin *store.JobFinishParams)
	// OnJobsEnded, when set, is given the jobs whose attempt ended in
	// SUCCESS, DEAD or CANCELED, after the commit that recorded it
	// (completions, and rescues while this node leads): rows as acquired
	// (their payload tells a workflow step's job from a plain one). It is
	// called from the writing goroutine and must not block or keep the
	// slice: the workflow runtime queues the runs to advance and returns.
	// Default none.
	OnJobsEnded func(rows []*job.Row)
	// JobsEndedTx, when set, handles the ends of the jobs it matches in
	// the transaction that records them, when the completer writes a
	// batch at once (a light load, see completer): the next steps of a
	// workflow run are released in the commit that ends its step's job,
	// instead of by a transaction of their own after it. Those jobs are
	// not given to OnJobsEnded. Under load, and when that transaction
	// fails (it is rolled back and the batch written again without it),
	// every job goes to OnJobsEnded as usual. Default none.
	JobsEndedTx *JobsEndedHook
	// Services run beside the engine on every node: started with it
	// (before its producers) and stopped after its completer, so that
	// what the last completions hand them is taken. Default none.
	Services []service.Service
	// Maintenance are more services run while this node holds the
	// maintenance leadership, beside the rescuer, scheduler and pruner
	// (the workflow sweeper). Default none.
	Maintenance []service.Service
	// Leaderships are services run while this node holds the named
	// leadership (leader.Events: the outbox relay), each elected on its
	// own row among the nodes that have it, beside the maintenance
	// leadership every engine contends for. A service is started at the
	// start of each term and stopped at its end. Default none.
	Leaderships map[string][]service.Service
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.LeaseDuration, LeaseDurationDefault)
	def(&c.JobTimeout, JobTimeoutDefault)
	def(&c.RescueInterval, RescueIntervalDefault)
	def(&c.SchedulerInterval, SchedulerIntervalDefault)
	def(&c.PruneInterval, PruneIntervalDefault)
	def(&c.AnalyzeInterval, AnalyzeIntervalDefault)
	def(&c.Retention, RetentionDefault)
	def(&c.OutboxMaxAge, OutboxMaxAgeDefault)
	def(&c.PollInterval, PollIntervalDefault)
	def(&c.FetchCooldown, FetchCooldownDefault)
	def(&c.LeaderTTL, LeaderTTLDefault)
	def(&c.NodeHeartbeat, NodeHeartbeatDefault)
	def(&c.CompleteInterval, CompleteIntervalDefault)
	def(&c.RetryBackoff.Base, RetryBackoffBaseDefault)
	def(&c.RetryBackoff.Max, RetryBackoffMaxDefault)
	if c.FetchBatch == 0 {
		c.FetchBatch = FetchBatchDefault
	}
	if c.CompleteBatch == 0 {
		c.CompleteBatch = CompleteBatchDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NodeID == "" {
		c.NodeID = defaultNodeID()
	}
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	var errs []error
	for name := range c.Leaderships {
		if name == "" || name == leader.Maintenance {
			errs = append(errs, fmt.Errorf("invalid Leaderships: %q is not a leadership of its own", name))
		}
	}
	if c.LeaseDuration < LeaseDurationMin {
		errs = append(errs, fmt.Errorf("invalid LeaseDuration: %v is below the minimum %v", c.LeaseDuration, LeaseDurationMin))
	}
	for q, n := range c.Queues {
		if q == "" {
			errs = append(errs, errors.New("invalid Queues: a queue name is empty"))
		}
		if n < 1 {
			errs = append(errs, fmt.Errorf("invalid Queues[%q]: concurrency %d must be at least 1", q, n))
		}
	}
	positive := map[string]time.Duration{
		"JobTimeout": c.JobTimeout, "RescueInterval": c.RescueInterval,
		"SchedulerInterval": c.SchedulerInterval, "PruneInterval": c.PruneInterval,
		"AnalyzeInterval": c.AnalyzeInterval, "Retention": c.Retention,
		"PollInterval":  c.PollInterval,
		"NodeHeartbeat": c.NodeHeartbeat, "CompleteInterval": c.CompleteInterval,
		"FetchCooldown": c.FetchCooldown,
	}
	for name, d := range positive {
		if d < 0 {
			errs = append(errs, fmt.Errorf("invalid %s: %v must not be negative", name, d))
		}
	}
	if c.LeaderTTL < leader.TTLMin {
		errs = append(errs, fmt.Errorf("invalid LeaderTTL: %v is below the minimum %v", c.LeaderTTL, leader.TTLMin))
	}
	if c.FetchBatch < 1 || c.CompleteBatch < 1 {
		errs = append(errs, fmt.Errorf("invalid FetchBatch (%d) or CompleteBatch (%d): must be at least 1", c.FetchBatch, c.CompleteBatch))
	}
	if c.RetryBackoff.Base < 0 || c.RetryBackoff.Max < c.RetryBackoff.Base {
		errs = append(errs, fmt.Errorf("invalid RetryBackoff: base %v must be >= 0 and <= max %v", c.RetryBackoff.Base, c.RetryBackoff.Max))
	}
	return errors.Join(errs...)
}

// JobsEndedHook handles job ends inside the completer's transaction
// (Config.JobsEndedTx).
type JobsEndedHook struct {
	// Match tells the jobs Handle takes (a workflow step's job, by its
	// payload). It is called for each job of a batch before the batch is
	// written: it must be quick. A batch where nothing matches is written
	// by the one statement of JobFinishMany, as without the hook.
	Match func(row *job.Row) bool
	// Lock, when set, is called in the transaction before the batch's
	// ends are written, with the matching jobs (whether or not their ends
	// will apply): it takes the locks Handle needs, so that this
	// transaction takes them in the order the rest of the system does
	// (a workflow run before its jobs; a run cancel holds the run and
	// then stops its jobs, and taking the job rows first would deadlock
	// with it). An error rolls the transaction back.
	Lock func(ctx context.Context, tx store.Tx, rows []*job.Row) error
	// Handle is called in the transaction, after the batch's ends are
	// written, with the matching jobs that ended (SUCCESS, DEAD,
	// CANCELED), rows as acquired. Its writes commit with the ends; an
	// error rolls both back. It must write through tx only.
	Handle func(ctx context.Context, tx store.Tx, rows []*job.Row) error
	// Concurrency is how many such transactions may be in flight at once,
	// each writing a batch that came while the others were: a step's
	// completion need not wait behind another's transaction. More than
	// one helps a database server (PostgreSQL), not a single writer
	// (SQLite, where processes would contend for its lock). Default 1.
	Concurrency int
}
