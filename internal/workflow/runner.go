package workflow

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
)

// Queue advances the runs it is given from a few goroutines, each taking
// up to QueueBatch waiting runs at a time and advancing them together in
// one transaction (Advancer.AdvanceRuns). Enqueue never blocks: a run enqueued again while
// it waits is advanced once. It is the fast path after job completions;
// what it misses (the process dies with runs queued) the Sweeper finds.
type Queue struct {
	adv     *Advancer
	st      Store
	log     *slog.Logger
	workers int

	mu      sync.Mutex
	pending map[uuid.UUID]struct{}
	order   []uuid.UUID // pending, in arrival order
	wake    chan struct{}
	life    service.Lifecycle
}

// QueueWorkersDefault is how many transactions a Queue runs at once.
const QueueWorkersDefault = 4

// QueueBatch is the most runs one transaction of a Queue advances.
const QueueBatch = 128

// NewQueue makes a queue advancing runs with adv on st.
func NewQueue(adv *Advancer, st Store, log *slog.Logger, workers int) *Queue {
	if workers < 1 {
		workers = QueueWorkersDefault
	}
	return &Queue{adv: adv, st: st, log: log, workers: workers, pending: map[uuid.UUID]struct{}{}, wake: make(chan struct{}, 1)}
}

// Enqueue asks for runs to be advanced.
func (q *Queue) Enqueue(ids ...uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	q.mu.Lock()
	for _, id := range ids {
		if _, ok := q.pending[id]; !ok {
			q.pending[id] = struct{}{}
			q.order = append(q.order, id)
		}
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// next takes up to QueueBatch waiting runs, oldest first.
func (q *Queue) next() []uuid.UUID {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.order), QueueBatch)
	if n == 0 {
		return nil
	}
	ids := slices.Clone(q.order[:n])
	q.order = q.order[n:]
	if len(q.order) == 0 {
		q.order = nil // let the backing array go
	}
	for _, id := range ids {
		delete(q.pending, id)
	}
	if len(q.order) > 0 {
		select { // more work: wake another goroutine
		case q.wake <- struct{}{}:
		default:
		}
	}
	return ids
}

// Start launches the goroutines.
func (q *Queue) Start(ctx context.Context) error {
	return q.life.Start(ctx, func(ctx context.Context, r *service.Run) error {
		for range q.workers {
			r.Go(func() { q.run(ctx) })
		}
		return nil
	})
}

// Stop stops them; runs still queued are left to the sweeper.
func (q *Queue) Stop() { q.life.Stop() }

func (q *Queue) run(ctx context.Context) {
	for {
		ids := q.next()
		if len(ids) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-q.wake:
				continue
			}
		}
		if err := q.adv.AdvanceRuns(ctx, q.st, ids); err != nil && ctx.Err() == nil {
			q.log.Warn("advance runs failed; the sweeper will advance them", "service", "workflow", "runs", len(ids), "error", err)
		}
	}
}

// SweepStore is what the Sweeper reads.
type SweepStore interface {
	Store
	StepRunsToAdvance(ctx context.Context, p *store.StepRunsToAdvanceParams) ([]uuid.UUID, error)
	StepSignalsWaiting(ctx context.Context, p *store.StepSignalsWaitingParams) ([]*store.SignalWait, error)
	WorkflowGet(ctx context.Context, p *store.WorkflowGetParams) (*flow.Version, error)
}

// sweepBatch bounds the runs one sweep reads at once.
const sweepBatch = 1000

// sweepRounds bounds the pages of runs one sweep advances.
const sweepRounds = 20

// Sweeper is the safety net of advancement, run on the maintenance
// leader: it advances the runs with a step whose job ended but was not
// recorded (the process that completed the job died before it advanced
// the run, or its queue was full of other work), and the runs whose
// signal steps timed out.
type Sweeper struct {
	// Advancer returns the advancer; it is called only when a round finds
	// something to do, so a process that never runs workflows never
	// builds one.
	Advancer func() (*Advancer, error)
	Store    SweepStore
	Log      *slog.Logger
	Now      func() time.Time
}

// Sweep runs one round.
func (s *Sweeper) Sweep(ctx context.Context) {
	// The list is paged in run id order, so runs that keep failing to
	// advance (they stay listed) cannot hold the others back, and a round
	// stops after sweepRounds pages so the signal timeouts below always
	// get their turn.
	var after uuid.UUID
	for round := 0; ctx.Err() == nil && round < sweepRounds; round++ {
		runs, err := s.Store.StepRunsToAdvance(ctx, &store.StepRunsToAdvanceParams{After: after, Limit: sweepBatch})
		if err != nil {
			s.warn(ctx, "list runs to advance", err)
			return
		}
		if len(runs) == 0 {
			break
		}
		adv, err := s.Advancer()
		if err != nil {
			s.warn(ctx, "make the advancer", err)
			return
		}
		for _, id := range runs {
			if _, err := adv.AdvanceRun(ctx, s.Store, id); err != nil {
				s.warn(ctx, "advance run", err)
			}
		}
		if len(runs) < sweepBatch {
			break
		}
		after = runs[len(runs)-1]
	}
	now := s.Now()
	// The waits whose timeout has passed, by an indexed range query: waits
	// without a timeout or with a later one are not read, however many.
	waits, err := s.Store.StepSignalsWaiting(ctx, &store.StepSignalsWaitingParams{TimedOutBy: now, Limit: sweepBatch})
	if err != nil {
		s.warn(ctx, "list waiting signals", err)
		return
	}
	if len(waits) == 0 {
		return
	}
	adv, err := s.Advancer()
	if err != nil {
		s.warn(ctx, "make the advancer", err)
		return
	}
	done := map[uuid.UUID]bool{}
	for _, w := range waits {
		if done[w.RunID] {
			continue
		}
		g, err := adv.Graph(ctx, s.Store, w.Workflow, w.Version)
		if err != nil {
			// A version that no longer compiles: its advancement fails
			// the run and ends the wait, which would else stay listed,
			// first, at every round.
			done[w.RunID] = true
			if _, err := adv.AdvanceRun(ctx, s.Store, w.RunID); err != nil {
				s.warn(ctx, "time out a signal", err)
			}
			continue
		}
		step := g.Step(w.Step)
		if step == nil || step.Signal == nil {
			continue
		}
		timeout, err := step.Signal.Timeout.Parse()
		if err != nil || timeout <= 0 || now.Before(w.StartedAt.Add(timeout)) {
			continue
		}
		done[w.RunID] = true
		if _, err := adv.AdvanceRun(ctx, s.Store, w.RunID); err != nil {
			s.warn(ctx, "time out a signal", err)
		}
	}
}

func (s *Sweeper) warn(ctx context.Context, what string, err error) {
	if ctx.Err() == nil {
		s.Log.Warn("workflow sweeper: "+what+" failed", "service", "workflow_sweeper", "error", err)
	}
}
