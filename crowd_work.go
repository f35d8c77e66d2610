package docket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/service"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/task"
)

// TakeStrategyDefault is how AssignmentTake picks a unit: at a random point
// of the pool's available units, which spreads the takers of a hot pool
// over its rows (the store's TestCrowdStrategies measured it best; see
// docs/store-plans.md).
const TakeStrategyDefault = crowd.StrategyRandom

// TakeStrategy is how AssignmentTake picks a unit (Config.TakeStrategy).
type TakeStrategy = crowd.Strategy

// The take strategies.
const (
	// TakeOrdered takes the oldest available unit: every taker of a hot
	// pool contends for the same rows.
	TakeOrdered = crowd.StrategyOrdered
	// TakeRandom starts at a random point of the units' random keys.
	TakeRandom = crowd.StrategyRandom
	// TakeCandidates tries unit ids from a per-client cache refilled by
	// one query (stale ones just miss); after a few missed windows it
	// falls back to a random take, which is the final word on "no unit".
	TakeCandidates = crowd.StrategyCandidates
)

// TakeStrategies lists every take strategy.
var TakeStrategies = crowd.Strategies

// EligiblePool is a pool a contributor may work on, as GET /v1/me/pools
// lists it.
type EligiblePool struct {
	Pool *Pool
	// Available is how many of its units are JUDGABLE now.
	Available int
}

// EligiblePoolsLimitDefault is how many pools EligiblePools lists when
// the caller gives no limit; EligiblePoolsLimitMax is the most it lists.
const (
	EligiblePoolsLimitDefault = 100
	EligiblePoolsLimitMax     = store.PoolListEligibleLimitMax
)

// EligiblePools lists the OPEN pools the contributor may work on: every
// skill a pool requires is among theirs, they share a channel with it (or
// it requires none), they are active and not flagged in it, and it holds
// a unit a take would hand them now (JUDGABLE, a free slot, never
// assigned to them). Sorted by priority (0 first), then age (oldest
// first), at most limit (0: EligiblePoolsLimitDefault; at most
// EligiblePoolsLimitMax). One query: on PostgreSQL the GIN indexes of
// the open pools' skills and channels find them. ErrNotFound when there
// is no such contributor; an inactive one gets none.
func (c *Client) EligiblePools(ctx context.Context, contributorID uuid.UUID, limit int) ([]*EligiblePool, error) {
	if limit == 0 {
		limit = EligiblePoolsLimitDefault
	}
	pools, err := c.store.PoolListEligible(ctx, &store.PoolListEligibleParams{ContributorID: contributorID, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]*EligiblePool, len(pools))
	for i, p := range pools {
		out[i] = &EligiblePool{Pool: p, Available: p.Counts.Judgable}
	}
	if len(out) == 0 {
		// Tell "no such contributor" from "no work" only when there is no
		// work: the common answer stays one query.
		if _, err := c.store.ContributorGet(ctx, contributorID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TakenAssignment is an assignment just taken with what the contributor
// needs to do it.
type TakenAssignment struct {
	Assignment *Assignment
	Unit       *Unit
	Task       *CompiledTask
	TaskName   string
	TaskVer    int
}

// AssignmentTake leases one slot of a unit of the pool to the
// contributor for the pool's assignment duration. Test questions (golden
// units) are mixed in by the pool's quality settings — the first
// quizSize assignments, then one in testEvery, never the same one twice
// to one person — and look like any unit (docs/quality.md). ErrNoUnit when none is
// left for them; *PoolNotOpenError when the pool is paused or closed;
// *NotEligibleError when they may not work on it (banned, flagged, a
// skill or channel missing); *TakeRateError past the pool's safe rate on
// this node (its task's takesPerSecond, takesPerSecondPerContributor);
// ErrNotFound when the pool does not exist.
func (c *Client) AssignmentTake(ctx context.Context, poolID, contributorID uuid.UUID) (*TakenAssignment, error) {
	pool, err := c.poolSettings(ctx, poolID)
	if err != nil {
		return nil, err
	}
	// The contributor is not read here: the take itself checks that they
	// exist, are active, have the pool's skills and a channel of it and
	// are not flagged in it, in the same statement.
	ct, err := c.CompiledTask(ctx, pool.Task, pool.TaskVersion)
	if err != nil {
		return nil, err
	}
	if err := c.takeRateAllow(pool, ct, contributorID); err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	tp := &store.AssignmentTakeParams{
		ID: id, PoolID: poolID, ContributorID: contributorID,
		Duration: time.Duration(pool.AssignmentSeconds) * time.Second,
		Strategy: c.cfg.TakeStrategy, Now: c.cfg.Now(),
	}
	// Test questions are mixed in here (crowd_quality.go).
	taken, err := c.takeScheduled(ctx, pool, ct, tp)
	if err != nil {
		return nil, err
	}
	c.refs.put(taken.Assignment.ID, assignmentRef{PoolID: poolID, ContributorID: contributorID, UnitID: taken.Unit.ID, RunID: taken.Unit.RunID})
	return &TakenAssignment{Assignment: taken.Assignment, Unit: taken.Unit, Task: ct, TaskName: pool.Task, TaskVer: pool.TaskVersion}, nil
}

// assignmentRef is what never changes of an assignment: whose it is, of
// which pool, unit and run.
type assignmentRef struct {
	PoolID, ContributorID, UnitID, RunID uuid.UUID
}

// assignmentRefsMax bounds the assignment references a client keeps; past
// it they are all dropped (an assignment taken but never submitted here —
// released, expired, submitted through another node — stays until then).
const assignmentRefsMax = 100_000

// assignmentRefs remembers the assignments taken through this client, so
// that their judgment (usually on the same node) needs no read before its
// transaction: the pool to validate against, the owner, the run to lock.
// An entry can only be missing, never wrong (the fields never change);
// missing, the assignment is read (JudgmentSubmit).
type assignmentRefs struct {
	mu sync.Mutex
	m  map[uuid.UUID]assignmentRef
}

func (r *assignmentRefs) put(id uuid.UUID, ref assignmentRef) {
	r.mu.Lock()
	if r.m == nil || len(r.m) >= assignmentRefsMax {
		r.m = map[uuid.UUID]assignmentRef{}
	}
	r.m[id] = ref
	r.mu.Unlock()
}

func (r *assignmentRefs) get(id uuid.UUID) (assignmentRef, bool) {
	r.mu.Lock()
	ref, ok := r.m[id]
	r.mu.Unlock()
	return ref, ok
}

func (r *assignmentRefs) drop(id uuid.UUID) {
	r.mu.Lock()
	delete(r.m, id)
	r.mu.Unlock()
}

// assignmentRef reads what never changes of an assignment, from the
// cache or else from the store (RunID is then unknown: uuid.Nil with
// known false).
func (c *Client) assignmentRef(ctx context.Context, id uuid.UUID) (ref assignmentRef, runKnown bool, err error) {
	if ref, ok := c.refs.get(id); ok {
		return ref, true, nil
	}
	a, err := c.store.AssignmentGet(ctx, id)
	if err != nil {
		return assignmentRef{}, false, err
	}
	return assignmentRef{PoolID: a.PoolID, ContributorID: a.ContributorID, UnitID: a.UnitID}, false, nil
}

// poolSettings reads what never changes of a pool — its step, task
// version, assignment duration, skills and channels — from a per-client
// cache, so that the hot path (take, submit) does not read the pool's
// counters each time. Its status and counters in the result are those of
// the first read: the store checks the status itself when it takes.
func (c *Client) poolSettings(ctx context.Context, id uuid.UUID) (*Pool, error) {
	c.pools.mu.Lock()
	p, ok := c.pools.m[id]
	c.pools.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := c.store.PoolGet(ctx, id)
	if err != nil {
		return nil, err
	}
	c.pools.mu.Lock()
	c.pools.m = bounded(c.pools.m)
	c.pools.m[id] = p
	c.pools.mu.Unlock()
	return p, nil
}

// Candidate cache of TakeCandidates: a node keeps, per pool, a list of
// available unit ids read by one query (UnitListAvailable from a random
// point) and hands each take the next window of it, so that concurrent
// takers of a hot pool try different rows. The database stays the
// arbiter: a stale candidate (full, or already this contributor's) just
// misses and the take moves on.
const (
	candidateRefill  = 512 // unit ids one refill reads
	candidateWindow  = 8   // unit ids one take tries
	candidateWindows = 3   // windows a take tries before a random take
)

// cacheMax bounds each of a Client's caches of pools, tasks, models and
// candidates: past it, the cache starts over (its entries are re-read on
// use), so a server that sees many pools does not grow without end.
const cacheMax = 10000

// bounded is m, made when nil and emptied when past cacheMax; callers
// hold the cache's lock.
func bounded[K comparable, V any](m map[K]V) map[K]V {
	if m == nil || len(m) > cacheMax {
		return map[K]V{}
	}
	return m
}

// candidateCache holds the candidate lists by pool.
type candidateCache struct {
	mu sync.Mutex
	m  map[uuid.UUID]*poolCandidates
}

// poolCandidates is one pool's list; mu is held across a refill, so a
// node refills a pool with one query at a time.
type poolCandidates struct {
	mu   sync.Mutex
	ids  []uuid.UUID
	next int
}

// window hands out the next candidates of the pool, refilling the list
// when it is used up; none when the pool has no available unit.
func (c *Client) window(ctx context.Context, poolID uuid.UUID) ([]uuid.UUID, error) {
	c.cands.mu.Lock()
	c.cands.m = bounded(c.cands.m)
	pc := c.cands.m[poolID]
	if pc == nil {
		pc = &poolCandidates{}
		c.cands.m[poolID] = pc
	}
	c.cands.mu.Unlock()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.next >= len(pc.ids) {
		ids, err := c.store.UnitListAvailable(ctx, &store.UnitListAvailableParams{PoolID: poolID, Limit: candidateRefill})
		if err != nil {
			return nil, err
		}
		pc.ids, pc.next = ids, 0
	}
	end := min(pc.next+candidateWindow, len(pc.ids))
	w := pc.ids[pc.next:end:end]
	pc.next = end
	return w, nil
}

// takeCandidate takes through the candidate cache: up to
// candidateWindows windows, then a random take, which alone decides that
// no unit is left.
func (c *Client) takeCandidate(ctx context.Context, p *store.AssignmentTakeParams) (*crowd.Taken, error) {
	for range candidateWindows {
		w, err := c.window(ctx, p.PoolID)
		if err != nil {
			return nil, err
		}
		if len(w) == 0 {
			break
		}
		cp := *p
		cp.Candidates = w
		taken, err := c.store.AssignmentTake(ctx, &cp)
		if !errors.Is(err, crowd.ErrNoUnit) {
			return taken, err
		}
	}
	rp := *p
	rp.Strategy = crowd.StrategyRandom
	return c.store.AssignmentTake(ctx, &rp)
}

// poolCache holds pools by id for poolSettings, and their decoded
// quality settings for poolQuality.
type poolCache struct {
	mu      sync.Mutex
	m       map[uuid.UUID]*Pool
	quality map[uuid.UUID]quality.Settings
}

// AssignmentGet reads an assignment; ErrNotFound when there is none.
func (c *Client) AssignmentGet(ctx context.Context, id uuid.UUID) (*Assignment, error) {
	return c.store.AssignmentGet(ctx, id)
}

// AssignmentHeartbeat records that the contributor still works on the
// assignment. *AssignmentError when they no longer hold it.
//
// Heartbeat, extend, release and JudgmentSubmit do not read the
// contributor's state (it would cost the judgment's hot path a query):
// the HTTP API and the work pages, which read the contributor anyway,
// refuse a banned one before they call them. AssignmentTake refuses a
// banned or flagged contributor itself.
func (c *Client) AssignmentHeartbeat(ctx context.Context, id, contributorID uuid.UUID) (*Assignment, error) {
	return c.store.AssignmentHeartbeat(ctx, &store.AssignmentHeartbeatParams{ID: id, ContributorID: contributorID, Now: c.cfg.Now()})
}

// AssignmentExtend moves the expiry to at least now + d.
func (c *Client) AssignmentExtend(ctx context.Context, id, contributorID uuid.UUID, d time.Duration) (*Assignment, error) {
	return c.store.AssignmentExtend(ctx, &store.AssignmentExtendParams{ID: id, ContributorID: contributorID, Duration: d, Now: c.cfg.Now()})
}

// AssignmentRelease gives the assignment back; its slot is free at once.
func (c *Client) AssignmentRelease(ctx context.Context, id, contributorID uuid.UUID) (*Assignment, error) {
	return c.store.AssignmentRelease(ctx, &store.AssignmentReleaseParams{ID: id, ContributorID: contributorID, Now: c.cfg.Now()})
}

// AssignmentExpireBatch is how many lapsed assignments one transaction of
// the reaper expires.
const AssignmentExpireBatch = 500

// AssignmentsExpire expires the ACTIVE assignments whose lease ran out,
// in batches of AssignmentExpireBatch (one short transaction each, one
// assignment.expired event each), freeing their slots; it returns how
// many. A batch never waits for a lock (on PostgreSQL it leaves an
// assignment whose unit or pool counters another transaction holds), so
// batches go on until one expires nothing. The maintenance leader runs it
// (Worker); tools and tests may call it too.
func (c *Client) AssignmentsExpire(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := c.store.AssignmentExpire(ctx, &store.AssignmentExpireParams{Now: c.cfg.Now(), Max: AssignmentExpireBatch})
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// AssignmentReapIntervalDefault is WorkerConfig.AssignmentReapInterval's
// default.
const AssignmentReapIntervalDefault = 5 * time.Second

// assignmentReaper is the leader service that expires lapsed assignments.
func (c *Client) assignmentReaper(interval time.Duration) service.Service {
	if interval <= 0 {
		interval = AssignmentReapIntervalDefault
	}
	return &service.Loop{Name: "assignment-reaper", Interval: interval, Fn: func(ctx context.Context) {
		n, err := c.AssignmentsExpire(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			c.cfg.Logger.Warn("expire assignments failed", "service", "assignment-reaper", "error", err)
		case n > 0:
			c.cfg.Logger.Info("expired assignments", "service", "assignment-reaper", "count", n)
		}
	}}
}

// HumanStepOutput is what a finalized unit gives its workflow step: the
// aggregated answer and its confidence.
type HumanStepOutput struct {
	Output     json.RawMessage `json:"output"`
	Confidence *float64        `json:"confidence"`
	// Canceled, for a CANCELED unit, says what ended it: the error its
	// step FAILS with.
	Canceled string `json:"-"`
}

// HumanStepCompleter completes the human step of a run whose unit was
// finalized. It runs inside the transaction that finalizes the unit (tx),
// so "the unit is FINALIZED" and "the step completed" commit together, or
// neither does (an error rolls back the judgment too). The workflow
// runtime sets Client.completeHumanStep; a unit without a run (RunID nil)
// does not call it. A unit its closed pool CANCELED (crowd_close.go)
// calls it too, in the transaction that cancels it, with unit.State
// CANCELED, no output and out.Canceled saying why: the step then FAILED
// with that error.
type HumanStepCompleter func(ctx context.Context, tx store.Tx, unit *Unit, out HumanStepOutput) error

// SubmittedJudgment is the outcome of JudgmentSubmit.
type SubmittedJudgment struct {
	Judgment *Judgment
	// Created is false when the same data was submitted before through the
	// assignment (the stored judgment is returned).
	Created bool
	// Finalized is the unit when this judgment finalized it.
	Finalized *Unit
	// Test is what the contributor may learn of a judgment of a test
	// question (a golden unit) — right or wrong, the expected answer,
	// the requester's explanation, their trust — as far as the pool's
	// testFeedback allows (crowd_feedback.go); nil for a regular unit.
	Test *TestResult

	quality *judgmentQuality // what quality control made of it
}

// JudgmentSubmit stores the contributor's judgment through the assignment.
// The data is validated against the pool's task first (a
// *TaskValidationError naming every bad field; the assignment stays
// ACTIVE). Then one transaction inserts the judgment (idempotent: the same
// data again returns it with Created false; other data is a
// *JudgmentConflictError), marks the assignment SUBMITTED, counts it, and,
// when the unit reaches its judgments per unit, aggregates the unit's
// clean judgments and either gives it one more slot (dynamic overlap:
// under the task's target confidence and its maximum) or FINALIZES it
// (unit.finalized) and completes its run's human step — exactly once,
// since it all commits together (crowd_finalize.go). An assignment
// the contributor no longer holds is an *AssignmentError, and so is one
// whose unit was CANCELED (Reason RefusedUnitCanceled: the work is no
// longer wanted; the judgment is not stored).
//
// Quality control (docs/quality.md) runs in the same transaction — the
// contributor's quality state locked first, a test question scored with
// trust and its history — and, after it commits, a second transaction
// decides on the contributor: a flag taints their judgments in the pool
// and repairs every unit they judged (crowd_quality.go). An error there is
// returned with the judgment stored; submitting it again is safe and
// decides again. A judgment of a test question returns what it scored in
// Test (as far as the pool's testFeedback allows; crowd_feedback.go):
// what the transaction computed, or for the same data sent again, the
// stored judgment scored again.
func (c *Client) JudgmentSubmit(ctx context.Context, assignmentID, contributorID uuid.UUID, data json.RawMessage) (*SubmittedJudgment, error) {
	// What the judgment needs before its transaction — the owner, the
	// pool's task, the run — never changes, and an assignment taken here
	// is remembered (assignmentRefs): then only the transaction reads and
	// writes, in as few statements as it can.
	ref, runKnown, err := c.assignmentRef(ctx, assignmentID)
	if err != nil {
		return nil, err
	}
	if ref.ContributorID != contributorID {
		a, err := c.store.AssignmentGet(ctx, assignmentID)
		if err != nil {
			return nil, err
		}
		return nil, &AssignmentError{AssignmentID: a.ID, Reason: crowd.RefusedNotOwner, State: a.State}
	}
	pool, err := c.poolSettings(ctx, ref.PoolID)
	if err != nil {
		return nil, err
	}
	ct, err := c.CompiledTask(ctx, pool.Task, pool.TaskVersion)
	if err != nil {
		return nil, err
	}
	if _, err := ct.ParseJudgment(data); err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	models, err := c.poolModels(ctx, pool, ct)
	if err != nil {
		return nil, err
	}
	qs, err := c.poolQuality(pool)
	if err != nil {
		return nil, err
	}
	// The transaction's first statements (one round trip on PostgreSQL):
	// the contributor's quality state locked first, then the run, then
	// the judgment, with the trust the locked state says (docs/quality.md,
	// lock order: state → run → unit).
	tp := &store.JudgmentInTxParams{PoolID: pool.ID, UnitID: ref.UnitID, Insert: store.JudgmentInsertParams{
		ID: id, AssignmentID: assignmentID, ContributorID: contributorID, Data: data, Now: c.cfg.Now(),
	}}
	if pool.Workflow != "" {
		if runKnown {
			tp.RunID = ref.RunID
		} else {
			tp.RunOfUnit = ref.UnitID
		}
	}
	out := &SubmittedJudgment{}
	err = c.store.JudgmentInTx(ctx, tp, func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error {
		// fn may run again (on PostgreSQL, after its batch rolled back):
		// nothing of a try before it stays.
		*out = SubmittedJudgment{}
		q := &judgmentQuality{settings: qs, pool: pool, ct: ct, state: begun.State}
		out.quality = q
		now := tp.Insert.Now
		ins := begun.Inserted
		j := ins.Judgment
		out.Judgment, out.Created = j, ins.Created
		if !ins.Created {
			return nil
		}
		unit := ins.Unit
		if unit.State == crowd.UnitCanceled {
			// Rolled back: the judgment is not stored, the assignment
			// stays as it was (its lease lapses as any other).
			return &AssignmentError{AssignmentID: assignmentID, Reason: crowd.RefusedUnitCanceled, State: crowd.AssignmentActive}
		}
		// Quality control (crowd_quality.go): a test judgment scored, a
		// too-fast one counted, a flagged contributor's judgment tainted
		// at once (unit follows the retarget of its unit).
		if err := c.judged(ctx, tx, q, ins, unit.RunID, now); err != nil {
			return err
		}
		if unit.Golden {
			return nil
		}
		if unit.State != crowd.UnitJudgable || unit.JudgmentCount < unit.JudgmentsPerUnit {
			return nil
		}
		// The unit's judgments, read with the first statements when they
		// could be; not after quality control changed their taint. (Today a
		// retaint also moves the unit past the check above, its target
		// raised or the unit decided, so this is a guard, not a path: a
		// taint must never reach the aggregation through a stale read.)
		judgments := begun.UnitJudgments
		if q.retainted {
			judgments = nil
		}
		// The finalized unit may come later in the transaction (a batch
		// sends its judgments' finalizations together), before it commits.
		_, err = c.unitTargetReached(ctx, tx, pool, ct, models, unit, judgments, func(u *Unit) { out.Finalized = u })
		return err
	})
	if conflict := (*JudgmentConflictError)(nil); errors.As(err, &conflict) {
		// The same answers spelt otherwise — a null for a field first left
		// out, a multi_choice's options in another order — are the
		// judgment sent again (200), not other data (409).
		stored, serr := c.sameStoredJudgment(ctx, ct, ref.UnitID, conflict.JudgmentID, data)
		if serr != nil {
			return nil, serr
		}
		if stored != nil {
			*out, err = SubmittedJudgment{Judgment: stored}, nil
		}
	}
	if err != nil {
		return nil, err
	}
	c.refs.drop(assignmentID)
	if out.Created && out.quality != nil {
		out.Test = out.quality.test // scored in the transaction
	} else if !out.Created {
		if out.Test, err = c.testResultAgain(ctx, pool, ct, out.Judgment); err != nil {
			return nil, fmt.Errorf("judgment %s stored; its test result: %w", out.Judgment.ID, err)
		}
	}
	// Quality control's decision on the contributor (crowd_quality.go):
	// a flag, with its repair, in a transaction of its own.
	// Its error must not read as ErrContention (a 503 saying nothing was
	// written): the judgment is stored (a resend answers 200 and decides
	// again).
	if q := out.quality; q == nil || q.review || !out.Created {
		if err := c.review(ctx, pool, ct, contributorID); err != nil {
			return nil, fmt.Errorf("judgment %s stored; deciding on contributor %s: %v", out.Judgment.ID, contributorID, err)
		}
	}
	return out, nil
}

// sameStoredJudgment is the stored judgment id of unit unitID when it
// gives the same answers as data (task.SameJudgment), else nil.
func (c *Client) sameStoredJudgment(ctx context.Context, ct *CompiledTask, unitID, id uuid.UUID, data json.RawMessage) (*Judgment, error) {
	list, err := c.store.JudgmentList(ctx, &store.JudgmentListParams{UnitID: unitID})
	if err != nil {
		return nil, err
	}
	for _, j := range list {
		if j.ID != id {
			continue
		}
		stored, err := ct.ParseJudgment(j.Data)
		if err != nil {
			return nil, nil // stored under other rules: other data
		}
		sent, err := ct.ParseJudgment(data)
		if err != nil || !task.SameJudgment(stored, sent) {
			return nil, nil
		}
		return j, nil
	}
	return nil, nil
}

// lockRun takes the lock of run runID (none for uuid.Nil: a unit of no
// run) before the transaction changes any of its units.
//
// Lock order. Every transaction that changes a run's units takes the run's
// lock first: run → assignment → unit → pool counter row. A run cancel
// (Advancer.Cancel: the run, then its open units), the advancements of the
// queue and the sweeper (RunLock, RunLoadMany in id order, then the units
// they cancel) and a judgment that may finalize a unit of a run
// (JudgmentSubmit: the store's JudgmentInTx locks the run before its
// judgment statement; then UnitFinalize and Advance, which locks the run
// again at no cost) all follow it. Before, a judgment held the unit and
// took the run's lock last, and on PostgreSQL a cancel racing the unit's
// final judgment deadlocked (TestRunHumanStepRace). Units without a run
// (pools made by hand, golden units) take no run lock: a pool of no
// workflow reads nothing more.
func lockRun(ctx context.Context, tx store.Tx, runID uuid.UUID) error {
	if runID == uuid.Nil {
		return nil
	}
	_, err := tx.RunLock(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return nil // pruned: nothing to advance
	}
	return err
}

// IsNoUnit reports whether err says no unit is left for the contributor.
func IsNoUnit(err error) bool { return errors.Is(err, crowd.ErrNoUnit) }
