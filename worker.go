package docket

import (
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"time"

	"github.com/docket-run/docket/internal/backoff"
	"github.com/docket-run/docket/internal/engine"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/leader"
	"github.com/docket-run/docket/internal/store"
)

// WorkerConfig configures a Worker. Zero fields take the documented
// defaults, which suit production; tests set short timings instead of
// sleeping. A timing below its minimum (WorkerIntervalMin for the
// periodic loops; see Validate) is refused by Start. Queues not listed but served by a registered handler (a job's
// queue defaults to its type) are worked with QueueWorkersDefault slots.
type WorkerConfig struct {
	// NodeID names this process in leases and attempts; default
	// hostname-pid-random.
	NodeID string
	// Queues maps queue names to how many of their jobs run at once here.
	Queues map[string]int
	// LeaseDuration of acquired jobs, renewed once a quarter of it has
	// passed; default 30 s.
	LeaseDuration time.Duration
	// JobTimeout is the default deadline of one attempt; default 5 min.
	JobTimeout time.Duration
	// RescueInterval: how often expired leases are looked for; a job whose
	// worker died runs again within LeaseDuration + RescueInterval.
	// Default 15 s.
	RescueInterval time.Duration
	// SchedulerInterval: how often retries whose backoff is over are queued
	// again; default 1 s.
	SchedulerInterval time.Duration
	// PruneInterval and Retention: finished jobs older than Retention are
	// deleted; defaults 1 min and 7 days.
	PruneInterval time.Duration
	Retention     time.Duration
	// OutboxMaxAge bounds the event outbox (docs/events.md): every state
	// change writes an outbox row, and only an event relay (EventRelay)
	// publishes and later deletes them. Every PruneInterval, rows older
	// than OutboxMaxAge that were never published (no relay runs, or it
	// has been down that long) or never fanned out to webhooks are
	// deleted, so a program that runs no relay keeps a bounded outbox.
	// Default 7 days; negative keeps them forever.
	OutboxMaxAge time.Duration
	// PollInterval: fallback poll for new jobs when no wakeup arrives;
	// default 1 s.
	PollInterval time.Duration
	// LeaderTTL: term of each of the worker's leaderships (maintenance,
	// and the event relay if set); default 15 s, at least 100 ms.
	LeaderTTL time.Duration
	// FetchBatch: most jobs acquired by one query; default 200.
	FetchBatch int
	// CompleteBatch and CompleteInterval: results are written when this many
	// are pending or this long after the first; defaults 2000 and 5 ms.
	// Under a light load a workflow step's result does not wait: it is
	// written at once, and its run advanced, in one transaction.
	CompleteBatch    int
	CompleteInterval time.Duration
	// RetryBackoffBase and RetryBackoffMax: the delay after attempt n is
	// uniform in [c/2, c], c = min(base × 2^(n-1), max); each defaults on
	// its own to the client's (1 s and 1 h).
	RetryBackoffBase time.Duration
	RetryBackoffMax  time.Duration
	// WorkflowSweepInterval: how often the maintenance leader looks for
	// workflow runs whose advancement was missed (a process died between
	// a step job's completion and the release of the next steps) and for
	// signal steps past their timeout. Default 5 s.
	WorkflowSweepInterval time.Duration
	// EventRelay, when set, publishes the outbox to the event bus while
	// this worker leads the relay: one relay at a time, elected among the
	// workers that have one (a worker without a relay may lead the
	// maintenance meanwhile). Make it with Client.NewEventRelay. Default
	// none.
	EventRelay *EventRelay
	// AssignmentReapInterval: how often the maintenance leader expires the
	// assignments of human work whose lease ran out (freeing their slots,
	// in batches); an abandoned slot is free again within the pool's
	// assignment duration + this. The pool-completer runs as often: a
	// unit of a closed pool ends within this of its last assignment
	// ending, and a closed pool is COMPLETED within this of its last unit
	// becoming final. Default AssignmentReapIntervalDefault.
	AssignmentReapInterval time.Duration
	// PoolEstimateInterval: how often the maintenance leader re-estimates
	// the worker-quality models of the pools whose fields use a
	// model-based aggregation method (Dawid-Skene, …) and that counted a
	// judgment since their last estimate (the pool-estimator service;
	// docs/quality.md). Default PoolEstimateIntervalDefault.
	PoolEstimateInterval time.Duration
}

// Minimums of WorkerConfig's timings (zero takes the default). Each
// periodic loop queries the database every tick: below WorkerIntervalMin
// (the minimum of serve's interval flags too) a loop keeps a core busy
// for nothing.
const (
	// WorkerIntervalMin is the least RescueInterval, SchedulerInterval,
	// PruneInterval, PollInterval, WorkflowSweepInterval,
	// AssignmentReapInterval and PoolEstimateInterval.
	WorkerIntervalMin = 10 * time.Millisecond
	// CompleteIntervalMin is the least CompleteInterval (default 5 ms):
	// below it a completion is written by a commit of its own.
	CompleteIntervalMin = time.Millisecond
	// WorkerLeaseDurationMin is the least LeaseDuration: a lease is
	// renewed once a quarter of it has passed (looked at every sixth).
	WorkerLeaseDurationMin = engine.LeaseDurationMin
	// LeaderTTLMin is the least LeaderTTL: leaderships are renewed every
	// third of it.
	LeaderTTLMin = leader.TTLMin
)

// Validate reports every timing of c below its minimum (zero is the
// default and passes): errors.Join of one *ValidationError per field,
// named as in WorkerConfig. Worker.Start calls it.
func (c WorkerConfig) Validate() error {
	var errs []error
	for _, f := range []struct {
		field string
		v     time.Duration
		least time.Duration
	}{
		{"LeaseDuration", c.LeaseDuration, WorkerLeaseDurationMin},
		{"RescueInterval", c.RescueInterval, WorkerIntervalMin},
		{"SchedulerInterval", c.SchedulerInterval, WorkerIntervalMin},
		{"PruneInterval", c.PruneInterval, WorkerIntervalMin},
		{"PollInterval", c.PollInterval, WorkerIntervalMin},
		{"LeaderTTL", c.LeaderTTL, LeaderTTLMin},
		{"CompleteInterval", c.CompleteInterval, CompleteIntervalMin},
		{"WorkflowSweepInterval", c.WorkflowSweepInterval, WorkerIntervalMin},
		{"AssignmentReapInterval", c.AssignmentReapInterval, WorkerIntervalMin},
		{"PoolEstimateInterval", c.PoolEstimateInterval, WorkerIntervalMin},
	} {
		if f.v != 0 && f.v < f.least {
			errs = append(errs, &ValidationError{Field: f.field, Message: fmt.Sprintf("%v is below the minimum %v", f.v, f.least)})
		}
	}
	return errors.Join(errs...)
}

func (c WorkerConfig) engineConfig(client *Client) engine.Config {
	cfg := engine.Config{
		NodeID: c.NodeID, Queues: c.Queues, LeaseDuration: c.LeaseDuration,
		JobTimeout: c.JobTimeout, RescueInterval: c.RescueInterval,
		SchedulerInterval: c.SchedulerInterval, PruneInterval: c.PruneInterval,
		Retention: c.Retention, OutboxMaxAge: c.OutboxMaxAge, PollInterval: c.PollInterval, LeaderTTL: c.LeaderTTL,
		FetchBatch: c.FetchBatch, CompleteBatch: c.CompleteBatch, CompleteInterval: c.CompleteInterval,
		RetryBackoff: backoff.Policy{Base: c.RetryBackoffBase, Max: c.RetryBackoffMax},
		Logger:       client.cfg.Logger, Now: client.cfg.Now,
		OnFinish: client.engineObserver(), Leaderships: c.leaderships(),
	}
	cfg.RetryBackoff = cfg.RetryBackoff.Or(client.retryPolicy())
	c.workflowRuntime(client, &cfg)
	cfg.Maintenance = append(cfg.Maintenance, client.assignmentReaper(c.AssignmentReapInterval),
		client.poolCompleter(c.AssignmentReapInterval), client.poolEstimator(c.PoolEstimateInterval))
	return cfg
}

// QueueWorkersDefault is the concurrency of a queue a Worker works because a
// handler is registered for it, when WorkerConfig.Queues does not list it.
const QueueWorkersDefault = engine.QueueWorkersDefault

// Worker runs jobs in this process: it acquires leases on its queues, runs
// the registered handlers, renews leases, records results, and takes its
// turn as leader for maintenance (rescuing expired leases, scheduling
// retries, pruning). Any number of workers in any number of processes may
// share one PostgreSQL database.
type Worker struct {
	client *Client
	cfg    WorkerConfig

	life     sync.Mutex // held through Start and Stop: they never interleave
	mu       sync.Mutex
	handlers map[string]*engine.Handler
	engine   *engine.Engine
}

// NewWorker makes a worker on client's database. Register handlers with
// AddHandler, then Start it.
func NewWorker(client *Client, cfg WorkerConfig) *Worker {
	return &Worker{client: client, cfg: cfg, handlers: map[string]*engine.Handler{}}
}

// Job is one attempt of a job whose payload decoded into Args.
type Job[T JobArgs] struct {
	*JobRow
	Args T
}

// HandlerOpts tune one job type.
type HandlerOpts struct {
	// Timeout of each attempt; default WorkerConfig.JobTimeout. A job's own
	// timeout (InsertOpts.Timeout) wins over both.
	Timeout time.Duration
	// RetryBackoffBase and RetryBackoffMax: the retry delay after attempt n
	// is uniform in [c/2, c] with c = min(base × 2^(n-1), max). Each
	// defaults on its own to the worker's.
	RetryBackoffBase time.Duration
	RetryBackoffMax  time.Duration
}

// AddHandler registers fn for jobs whose type is T's JobType(). The payload
// is decoded into T; a payload that does not decode sends the job to DEAD.
// fn returning nil records SUCCESS (with the result given to SetResult, if
// any); Fatal(err) records DEAD; any other error or a panic records RETRY
// (DEAD once attempts are used up). ctx carries the attempt's deadline and is
// canceled with cause ErrCancelRequested when the job is canceled.
//
// Attempts run on goroutines the worker keeps between attempts: a handler
// must leave its goroutine as it found it (a runtime.LockOSThread without
// its UnlockOSThread keeps that thread for the attempts after it, where a
// goroutine of its own used to take the thread with it; so do profiler
// labels set with pprof.SetGoroutineLabels).
//
// Handlers are registered before Start (or after Stop, for the next Start):
// AddHandler on a running worker panics, as registering while jobs are being
// taken is a programming error (the new type's queue would not be worked).
// A job type has one handler: AddHandler for a type that has one already
// (by the same T, or by another type whose JobType is the same) panics
// naming the type, and the first handler stays.
func AddHandler[T JobArgs](w *Worker, fn func(ctx context.Context, job *Job[T]) error, opts ...HandlerOpts) {
	var zero T
	typ := zero.JobType()
	emptyDecodesToZero := emptyObjectIsZero[T]()
	var o HandlerOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	h := &engine.Handler{
		Timeout: o.Timeout,
		Backoff: backoff.Policy{Base: o.RetryBackoffBase, Max: o.RetryBackoffMax},
		Work: func(ctx context.Context, row *job.Row) (json.RawMessage, error) {
			var args T
			if !(emptyDecodesToZero && string(row.Payload) == "{}") {
				if err := json.Unmarshal(row.Payload, &args); err != nil {
					return nil, Fatal(fmt.Errorf("decode payload of job type %q: %w", typ, err))
				}
			}
			return nil, fn(ctx, &Job[T]{JobRow: row, Args: args})
		},
	}
	if h.Backoff.Base > 0 && h.Backoff.Max > 0 && h.Backoff.Max < h.Backoff.Base {
		h.Backoff.Max = h.Backoff.Base
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.engine != nil {
		panic(fmt.Sprintf("docket: AddHandler for job type %q on a running worker: register handlers before Start", typ))
	}
	if w.handlers == nil { // a Worker not made by NewWorker: Start says so
		w.handlers = map[string]*engine.Handler{}
	}
	if _, ok := w.handlers[typ]; ok {
		panic(fmt.Sprintf("docket: AddHandler for job type %q: the worker has a handler for it already (one handler per job type)", typ))
	}
	w.handlers[typ] = h
}

// emptyObjectIsZero reports whether json.Unmarshal of {} into a zero T
// leaves it as it is, without error: T is a struct that decodes itself by
// no method of its own. The handler then skips decoding a payload of {}
// (arguments with no fields set, the payload of a type without any),
// whose decoder and scanner state were about two allocations a job.
func emptyObjectIsZero[T any]() bool {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Struct {
		return false // a map becomes empty, not nil; a slice is an error
	}
	p := reflect.PointerTo(t) // its method set holds T's
	// UnmarshalJSONFrom: the decoding method json.Unmarshal also honours
	// when built with GOEXPERIMENT=jsonv2.
	_, from := p.MethodByName("UnmarshalJSONFrom")
	return !from && !p.Implements(reflect.TypeFor[json.Unmarshaler]()) &&
		!p.Implements(reflect.TypeFor[encoding.TextUnmarshaler]())
}

// Start begins working. It returns once the worker's services run, and
// registers this worker's node in the database first: if that or any other
// part fails, what already started is stopped and Start returns the error,
// leaving the worker stopped.
func (w *Worker) Start(ctx context.Context) error {
	w.life.Lock()
	defer w.life.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.engine != nil {
		return errors.New("worker already started")
	}
	if w.client == nil {
		return errors.New("docket: worker has no client: make it with NewWorker(client, …)")
	}
	if err := w.cfg.Validate(); err != nil {
		return err
	}
	cfg := w.cfg.engineConfig(w.client)
	queues := make(map[string]int, len(cfg.Queues)+len(w.handlers))
	for q, n := range cfg.Queues {
		queues[q] = n
	}
	for typ := range w.handlers {
		if _, ok := queues[typ]; !ok {
			queues[typ] = QueueWorkersDefault
		}
	}
	cfg.Queues = queues
	// The engine gets its own copy: handlers added after a Stop are for the
	// next Start, never seen by a running engine.
	e, err := engine.New(w.client.store, cfg, maps.Clone(w.handlers))
	if err != nil {
		return err
	}
	if err := e.Start(ctx); err != nil {
		return err
	}
	w.engine = e
	return nil
}

// Stop shuts down gracefully: no new jobs are taken; running handlers may
// finish until ctx is done, after which their contexts are canceled and the
// leases they still hold are given back for another node to run. Safe to
// call twice and before Start; a second Stop returns once the first is
// done. A stopped worker may be started again.
func (w *Worker) Stop(ctx context.Context) {
	w.life.Lock()
	defer w.life.Unlock()
	w.mu.Lock()
	e := w.engine
	w.engine = nil
	w.mu.Unlock()
	if e != nil {
		e.Stop(ctx)
	}
}

// NodeID is the id under which this worker holds leases.
func (w *Worker) NodeID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.engine != nil {
		return w.engine.NodeID()
	}
	return w.cfg.NodeID
}

// Progress records the running job's progress (0..100) and a message; it
// is visible at once in the job and as a job.progress event.
func Progress(ctx context.Context, percent float64, message string) error {
	return engine.ReportProgress(ctx, percent, message)
}

// SetResult sets the JSON result stored with the job if the handler
// succeeds.
func SetResult(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode job result: %w", err)
	}
	if msg := store.JSONUnstorable(b); msg != "" {
		return &ValidationError{Field: "result", Message: msg}
	}
	return engine.SetResult(ctx, b)
}
