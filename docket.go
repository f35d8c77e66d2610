// Package docket is a durable platform for asynchronous work: jobs are
// recorded in a database (PostgreSQL, or an embedded SQLite file by default)
// and run at least once by handlers, with leases, retries and crash recovery.
//
// A Client inserts and manages jobs; a Worker runs them:
//
//	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: "sqlite:docket.db", AutoMigrate: true})
//	w := docket.NewWorker(client, docket.WorkerConfig{})
//	docket.AddHandler(w, func(ctx context.Context, job *docket.Job[EmailArgs]) error { … })
//	w.Start(ctx)
//	client.Insert(ctx, EmailArgs{To: "a@example.com"}, nil)
package docket

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/backoff"
	"github.com/docket-run/docket/internal/engine"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/storeurl"
)

// DatabaseURLDefault is used when Config.DatabaseURL is empty: an SQLite
// file in the working directory.
const DatabaseURLDefault = "sqlite:docket.db"

// SQLitePath tells whether url names an SQLite database (sqlite:PATH or
// sqlite://PATH) and, if so, the path of its file, exactly as NewClient
// reads it: the path is taken as written (no percent-decoding, no ~
// expansion; relative to the working directory), and a URL NewClient
// refuses (nothing after the scheme, a file: URI, options after ?) is
// an error here too, with the same message. A postgres:// URL, or any
// other, is ok false with no error. Programs that look at the file
// before opening it (does it exist? where do its neighbours go?) use it
// so that they and the client can never disagree on which file it is.
func SQLitePath(url string) (path string, ok bool, err error) {
	return storeurl.SQLitePath(url)
}

// Config configures a Client.
type Config struct {
	// DatabaseURL: "postgres://…" (or "postgresql://…") or "sqlite:PATH".
	// Default DatabaseURLDefault.
	DatabaseURL string
	// AutoMigrate applies pending migrations when the client opens,
	// logging each at level info ("applied migration"); on a database a
	// newer docket migrated further (applied migrations this binary does
	// not know) NewClient fails, naming them, and applies nothing.
	// Default false: run `docket migrate up` (or Client.Migrate) instead;
	// a client opened without it on a database that lacks some of this
	// docket's migrations warns of them ("the database lacks migrations"),
	// and of those a newer docket applied ("migrated by a newer docket").
	AutoMigrate bool
	// PriorityAging: how much waiting one priority step is worth; a job of
	// priority p sorts as if it became due p × PriorityAging later, so low
	// priority work cannot starve. Default 5 min.
	PriorityAging time.Duration
	// RetryBackoffBase and RetryBackoffMax: the retry policy of jobs failed
	// through remote leases, and the default of every Worker. The delay after
	// attempt n is uniform in [c/2, c], c = min(base × 2^(n-1), max).
	// Defaults 1 s and 1 h, each on its own (a max alone below 1 s is the
	// base too).
	RetryBackoffBase time.Duration
	RetryBackoffMax  time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock used for every timestamp; default time.Now. Tests
	// inject their own to move time without sleeping.
	Now func() time.Time
	// OnJobFinished, when set, observes the end of every attempt this
	// process records: completions of this client's Workers (and their
	// rescues of expired leases while they lead) and remote lease ends
	// through LeaseComplete and LeaseFail. It runs synchronously after the
	// commit and must be quick (count, don't do I/O). Ends refused as fenced
	// are not reported. Default none. docket serve uses it for /metrics.
	OnJobFinished func(JobFinishedEvent)
	// TakeStrategy is how AssignmentTake picks a unit of a pool: ordered,
	// random or candidates (a per-client cache of available unit ids,
	// refilled by one query; the database stays the arbiter). Default
	// TakeStrategyDefault. docket serve sets it from --take-strategy.
	TakeStrategy TakeStrategy
}

// Client inserts, reads and manages jobs. It is safe for concurrent use.
type Client struct {
	cfg        Config
	store      store.Store
	leaseTurns leaseTurns
	leaseKeys  leaseKeys // the key of lease ids' tokens (lease.go)
	flowState
	tasks compiledTasks // compiled task versions (crowd.go)
	pools poolCache     // what never changes of a pool (crowd_work.go)
	// golden tells the pools that have test questions (crowd_quality.go).
	golden *refreshCache[uuid.UUID, bool]
	cands  candidateCache // available unit ids per pool (StrategyCandidates)
	rates  takeRates      // token buckets of the pools' safe rates (crowd_rate.go)
	refs   assignmentRefs // what never changes of the assignments taken here (crowd_work.go)
	// models are the pools' worker-quality models read here (crowd_estimate.go).
	models *refreshCache[uuid.UUID, modelsRead]
	// completeHumanStep, when set, runs in the transaction that finalizes
	// a unit of a run (crowd_work.go): the workflow runtime sets it to
	// complete the human step with the unit's output.
	completeHumanStep HumanStepCompleter
}

// NewClient opens the database named by cfg.DatabaseURL.
func NewClient(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = DatabaseURLDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TakeStrategy == "" {
		cfg.TakeStrategy = TakeStrategyDefault
	}
	if !cfg.TakeStrategy.Valid() {
		return nil, fmt.Errorf("docket: take strategy %q: want one of %v", cfg.TakeStrategy, TakeStrategies)
	}
	// Each field defaults on its own: a Max alone caps the default Base.
	retry := backoff.Policy{Base: cfg.RetryBackoffBase, Max: cfg.RetryBackoffMax}.Or(
		backoff.Policy{Base: engine.RetryBackoffBaseDefault, Max: engine.RetryBackoffMaxDefault})
	if retry.Max < retry.Base {
		retry.Max = max(engine.RetryBackoffMaxDefault, retry.Base)
	}
	cfg.RetryBackoffBase, cfg.RetryBackoffMax = retry.Base, retry.Max
	st, err := storeurl.Open(ctx, cfg.DatabaseURL, store.Options{PriorityAging: cfg.PriorityAging})
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, store: st,
		golden: newRefreshCache[uuid.UUID, bool](goldenRecheck, time.Now),
		models: newRefreshCache[uuid.UUID, modelsRead](poolModelTTL, cfg.Now)}
	c.completeHumanStep = c.advanceHumanStep
	if cfg.AutoMigrate {
		// A newer docket migrated further: this one was not written for
		// that schema, and refuses to run on it rather than write what
		// the newer one may not read. Checked before applying anything.
		ms, err := c.MigrationStatus(ctx)
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		if err := newerSchemaError(ms); err != nil {
			_ = st.Close()
			return nil, err
		}
		// An upgrade changes the schema at start: say what it applied,
		// also when a later migration failed (those stay applied).
		done, err := c.Migrate(ctx, MigrateUp, 0)
		for _, m := range done {
			cfg.Logger.Info("applied migration", "service", "migrate", "version", m.Version, "name", m.Name)
		}
		if err != nil {
			_ = st.Close()
			return nil, err
		}
	} else {
		c.warnMigrations(ctx)
	}
	return c, nil
}

// newerSchemaError refuses a database that has migrations this docket
// does not know (ms as MigrationStatus lists them), naming them and this
// docket's newest; nil when it has none.
func newerSchemaError(ms []Migration) error {
	var unknown []string
	var newest Migration
	for _, m := range ms {
		if m.Unknown {
			unknown = append(unknown, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		} else {
			newest = m
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	return fmt.Errorf("the database was migrated by a newer docket: it has %s, which this docket (migrations up to %04d_%s) does not know; "+
		"run that docket (or a newer one), or revert those migrations with it first (its docket migrate down)",
		strings.Join(unknown, ", "), newest.Version, newest.Name)
}

// warnMigrations logs a warning when the database's migrations are not
// this docket's: some are missing (a new database, or one an older docket
// migrated), so the client's calls would fail on missing tables or
// columns ("no such table: docket_jobs"), which say nothing of the cause;
// or a newer docket applied some this one does not know, so it runs on a
// schema it was not written for. A database that cannot be read now is
// left for the first call to report.
func (c *Client) warnMigrations(ctx context.Context) {
	ms, err := c.store.MigrationStatus(ctx)
	if err != nil {
		return
	}
	if err := newerSchemaError(ms); err != nil {
		c.cfg.Logger.Warn(err.Error(), "service", "migrate")
	}
	var pending []string
	for _, m := range ms {
		if !m.Applied {
			pending = append(pending, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		}
	}
	if len(pending) == 0 {
		return
	}
	c.cfg.Logger.Warn("the database lacks migrations this docket needs, so its calls will fail: run `docket migrate up`, or set Config.AutoMigrate",
		"service", "migrate", "pending", len(pending), "first", pending[0])
}

// Close releases the database connections.
func (c *Client) Close() error { return c.store.Close() }

// Backend names the database in use: "postgres" or "sqlite".
func (c *Client) Backend() string { return c.store.Backend() }

// Ping checks the database is reachable.
func (c *Client) Ping(ctx context.Context) error { return c.store.Ping(ctx) }

// MigrateDirection is up or down.
type MigrateDirection = store.Direction

// Migration directions for Client.Migrate.
const (
	MigrateUp   = store.Up
	MigrateDown = store.Down
)

// Migration is one schema version and whether it is applied.
type Migration = store.Migration

// Migrate applies steps migrations (0 = all) in the given direction and
// returns the migrations it applied or reverted; up refuses a database
// that a newer docket migrated further, naming what it does not know
// (down refuses too, store.UnknownMigrationsError). Each migration commits
// on its own: when one fails, the error comes with those done before it,
// which stay applied (or reverted).
func (c *Client) Migrate(ctx context.Context, dir MigrateDirection, steps int) ([]Migration, error) {
	// Up on a database a newer docket migrated further has nothing to
	// do, and saying so would let a deployment go on to start a docket
	// that refuses that database: up refuses, as serve does.
	if dir == MigrateUp {
		ms, err := c.store.MigrationStatus(ctx)
		if err != nil {
			return nil, fmt.Errorf("migrate %s: %w", dir, err)
		}
		if err := newerSchemaError(ms); err != nil {
			return nil, fmt.Errorf("migrate %s: %w", dir, err)
		}
	}
	done, err := c.store.Migrate(ctx, &store.MigrateParams{Direction: dir, Steps: steps})
	if err != nil {
		return done, fmt.Errorf("migrate %s: %w", dir, err)
	}
	return done, nil
}

// MigrationStatus lists every known migration and whether it is applied.
func (c *Client) MigrationStatus(ctx context.Context) ([]Migration, error) {
	return c.store.MigrationStatus(ctx)
}

// JobRow is a job as stored.
type JobRow = job.Row

// JobState is a job's lifecycle state.
type JobState = job.State

// Job states.
const (
	JobStateCreated  = job.StateCreated
	JobStateQueued   = job.StateQueued
	JobStateRunning  = job.StateRunning
	JobStateRetry    = job.StateRetry
	JobStateSuccess  = job.StateSuccess
	JobStateDead     = job.StateDead
	JobStateCanceled = job.StateCanceled
)

// JobStates lists every job state, in lifecycle order.
func JobStates() []JobState { return slices.Clone(job.States) }

// JobAttempt is one execution of a job.
type JobAttempt = job.Attempt
