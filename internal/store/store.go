// Package store is the only package that speaks SQL. It is implemented by
// store/postgres and store/sqlite and exercised by the conformance suite in
// store/storetest.
//
// # Domains
//
// The database layer is split by domain, one interface and one file each:
// JobStore (jobs.go: jobs, attempts, queues), ClusterStore (cluster.go:
// leadership, nodes), KeyStore (keys.go), OutboxStore (outbox.go), InboxStore
// (inbox.go: the inbox and dead letters), WebhookStore (webhook.go) and
// FlowStore (flow.go: workflow definitions, runs, step instances).
// Store composes them with what belongs to the database as a whole
// (Backend, Ping, Close, Migrate, Subscribe, InTx), and CrowdStore
// (crowd.go: task templates, pools, units, contributors, assignments,
// judgments). A consumer
// declares the narrow interface it needs, in its own package, rather than
// taking a Store: leader.Store is two methods of ClusterStore, the engine's
// store is JobStore and a few methods of ClusterStore, and so on. Each
// backend keeps one package, with one file (or a few) per domain.
//
// # Transactions
//
// Each Store method is one transaction of its own. Changes that must commit
// together, across domains or not, go through Store.InTx (or, for a durable
// event consumer, InboxStore.InboxHandle): both run a function with a Tx,
// whose methods are bound to that one transaction. Tx embeds one interface
// per domain (JobTx, WebhookTx, …), restricted to what makes sense inside a
// caller's transaction: inserts, guarded transitions, reads of one row. Each
// domain's Store interface embeds its Tx interface, so code written against
// JobTx runs the same on a Store (each call its own transaction) and on a
// Tx (every call in the caller's), and both backends run the same domain
// code on either: a pgx.Tx or a *sql.Tx behind the querier the code takes.
//
// # Time
//
// Every method takes the current time in its params (Now) instead of reading
// a clock, so the engine's injectable clock governs leases, backoff and
// scheduling, and tests never sleep.
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Sentinel errors. Backends translate driver errors into these.
var (
	// ErrNotFound: no job (or other row) with that id.
	ErrNotFound = errors.New("not found")
	// ErrLeaseLost: the job is no longer RUNNING under the given attempt, so
	// the caller's lease was fenced off (expired and rescued, canceled, or
	// superseded by a newer attempt). Nothing was changed.
	ErrLeaseLost = errors.New("lease lost")
	// ErrUnsupportedTx: the transaction passed to an ...Tx method is not one
	// the backend can use.
	ErrUnsupportedTx = errors.New("unsupported transaction type")
	// ErrDuplicate: a unique value (such as an API key's secret) exists
	// already.
	ErrDuplicate = errors.New("duplicate")
	// ErrContention: the database aborted the transaction to break a
	// deadlock or a serialization conflict with another one (PostgreSQL),
	// or the write lock was held by another connection for longer than the
	// busy timeout (SQLite). Nothing was written; the same call again
	// normally succeeds.
	ErrContention = errors.New("transaction aborted by a conflict with another; nothing was written, try again")
	// ErrStorageFull: the database has no room left for the write (SQLite's
	// SQLITE_FULL: a full disk or max_page_count; PostgreSQL's disk_full,
	// 53100). Nothing of the write was kept; the same call can succeed
	// once space is freed.
	ErrStorageFull = errors.New("the database's storage is full; nothing was written")
)

// IsStorageFull reports whether err says the database had no room for a
// write: store.ErrStorageFull (SQLite translates SQLITE_FULL into it), or
// PostgreSQL's disk_full (SQLSTATE 53100), read from any error in err's
// chain that reports a SQLSTATE, as pgx's do: PostgreSQL's statements run
// in many places, and this one test serves them all. Nothing of a write
// that failed so was kept.
func IsStorageFull(err error) bool {
	if errors.Is(err, ErrStorageFull) {
		return true
	}
	var st interface{ SQLState() string }
	return errors.As(err, &st) && st.SQLState() == sqlStateDiskFull
}

// sqlStateDiskFull is PostgreSQL's disk_full.
const sqlStateDiskFull = "53100"

// Store is the database layer: every domain, and the database as a whole.
// Every state change is one SQL transaction that also inserts the matching
// outbox row(s). Implementations are safe for concurrent use by many
// goroutines and many processes on one database.
type Store interface {
	// Backend names the implementation: "postgres" or "sqlite".
	Backend() string
	Ping(ctx context.Context) error
	// Close releases connections and stops any listener goroutine.
	Close() error

	Migrate(ctx context.Context, p *MigrateParams) ([]Migration, error)
	MigrationStatus(ctx context.Context) ([]Migration, error)
	StatsRefresher

	Subscriber
	Transactor

	JobStore
	ClusterStore
	KeyStore
	OutboxStore
	InboxStore
	WebhookStore
	FlowStore
	CrowdStore
	Overviewer
}

// StatsRefresher is the part of Store that keeps the query planner's
// view of the tables' sizes current, run by the maintenance leader every
// few seconds.
//
// On PostgreSQL the statements of the hot paths are prepared once per
// connection, and after a few executions PostgreSQL plans them once for
// good (a generic plan) from the statistics of that moment. Tables just
// created (a fresh database, or a reset one) look empty then, and the
// plans read them whole (a sequential scan costs nothing on an empty
// table); they stay so as the table grows to thousands of rows, every
// completion, acquisition and run advancement reading it all, until
// autovacuum next analyzes it — up to a minute away and more. ANALYZE
// invalidates the cached plans, which are then made again with the
// table's size. AnalyzeGrown analyzes a table (of at least 8 pages,
// 64 kB) whose file has grown to at least twice the pages its
// statistics counted: a fresh table within seconds of its first few
// hundred rows, and a growing one each time it doubled (so a cached
// plan's idea of its size is off by at most about 2×), in addition to
// autovacuum's own analyses. Once a table holds as many rows as a full
// ANALYZE samples (30,000 by default) and autovacuum analyzes it, a
// doubling refreshes its size alone (its pages and rows, from a small
// sample) and leaves its columns' statistics to autovacuum. A table
// whose lock is taken (autovacuum analyzing or vacuuming it, a
// migration) is skipped until the next call, one whose ANALYZE fails
// for a minute, and only tables the role may analyze are looked at. SQLite plans each statement when it is
// prepared, from the tables' indexes without statistics: a no-op there.
type StatsRefresher interface {
	// AnalyzeGrown analyzes docket's tables that grew past their
	// statistics (as above) and returns their names, in name order.
	AnalyzeGrown(ctx context.Context) ([]string, error)
}

// Subscriber is the part of Store that delivers wakeups.
type Subscriber interface {
	// Subscribe delivers wakeups on a topic: TopicJobAvailable carries a
	// queue name, TopicJobCancel a job id. An empty payload means "anything
	// may have changed" (e.g. the listener reconnected). Delivery is best
	// effort and non-blocking: slow receivers miss wakeups, never block the
	// store, so callers also poll. cancel stops the subscription.
	Subscribe(topic Topic) (ch <-chan string, cancel func())
}

// Topic names a wakeup channel.
type Topic string

// Wakeup topics.
const (
	TopicJobAvailable Topic = "job_available" // payload: queue name
	TopicJobCancel    Topic = "job_cancel"    // payload: job id
)

// Options configure a backend when it is opened.
type Options struct {
	// PriorityAging is how much waiting time one priority step is worth:
	// a job's sort key is run_at + priority × PriorityAging, so a job of a
	// lower priority that has waited long enough runs before fresh work of a
	// higher priority and nothing starves. Default PriorityAgingDefault.
	PriorityAging time.Duration
}

// PriorityAgingDefault is the default Options.PriorityAging.
const PriorityAgingDefault = 5 * time.Minute

// WithDefaults returns o with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.PriorityAging <= 0 {
		o.PriorityAging = PriorityAgingDefault
	}
	return o
}

// Migration direction.
type Direction string

// Directions.
const (
	Up   Direction = "up"
	Down Direction = "down"
)

// MigrateParams: apply Steps migrations in Direction (0 = all).
type MigrateParams struct {
	Direction Direction
	Steps     int
}

// Migration is one numbered schema change.
type Migration struct {
	Version   int
	Name      string
	Applied   bool
	AppliedAt time.Time // zero when not applied
	// Unknown marks an applied migration this binary has no files for:
	// a newer docket applied it. MigrationStatus lists such migrations
	// after the known ones, with the name their tracking row recorded.
	Unknown bool
}

// UnknownMigrationsError refuses to revert migrations while the database
// has migrations applied that this binary does not know (a newer docket
// applied them): reverting this binary's last one would leave those in
// place on top of a schema they were not written for, and this binary
// cannot revert them first.
type UnknownMigrationsError struct {
	Migrations []Migration // the unknown ones, oldest first
}

func (e *UnknownMigrationsError) Error() string {
	names := make([]string, len(e.Migrations))
	for i, m := range e.Migrations {
		names[i] = fmt.Sprintf("%04d_%s", m.Version, m.Name)
	}
	return fmt.Sprintf("the database has migrations this docket does not know (%s), applied by a newer docket: "+
		"revert them with that docket first (its docket migrate down), or run that docket", strings.Join(names, ", "))
}

// UnknownMigrations returns the applied migrations (version → name and
// time) that are not among known, oldest first.
func UnknownMigrations(known []int, applied map[int]Migration) []Migration {
	isKnown := make(map[int]bool, len(known))
	for _, v := range known {
		isKnown[v] = true
	}
	var out []Migration
	for v, m := range applied {
		if !isKnown[v] {
			m.Version, m.Applied, m.Unknown = v, true, true
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	return out
}
