package docket

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/aggregate"
	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/task"
)

// Quality control wired into human work (docs/quality.md): the
// test-question take, the scoring of a test judgment, trust with its
// history, the behaviour checks, and the flag (or un-flag) that taints
// (or un-taints) a contributor's judgments in a pool and repairs every
// unit they judged — all in the transaction of the judgment (or of the
// admin's forgiveness) that caused it, so that a crash leaves either all
// of it or none of it, and every audit row and event is written exactly
// once.

// QualitySettings are a pool's quality-control settings (docs/quality.md).
type QualitySettings = quality.Settings

// poolQuality decodes a pool's quality settings ({} or none: the
// defaults). The store keeps what PoolCreate was given; a pool whose
// settings no longer decode (a newer server wrote them) is an error, not
// silently the defaults. A pool's settings never change, so each pool's
// are decoded once per client (every take and judgment asked before: a
// strict JSON decode and a validation each time).
func (c *Client) poolQuality(pool *Pool) (quality.Settings, error) {
	c.pools.mu.Lock()
	s, ok := c.pools.quality[pool.ID]
	c.pools.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := quality.Decode(pool.Settings)
	if err != nil {
		return quality.Settings{}, fmt.Errorf("pool %s: %w", pool.ID, err)
	}
	c.pools.mu.Lock()
	c.pools.quality = bounded(c.pools.quality)
	c.pools.quality[pool.ID] = s
	c.pools.mu.Unlock()
	return s, nil
}

// takeScheduled is the take with test questions mixed in: when the
// contributor's next assignment in the pool must be a test question
// (quality.Settings.NextAssignment on their counts), a golden unit they
// never had an assignment for, in any state, is taken (the store's golden
// take: one statement, and the UNIQUE (unit, contributor) of the
// assignments refuses a second one); when none is left, a regular unit
// (the test question is owed). Then the counts move, in a short
// transaction of their own (quality state only).
//
// The counts are written after the take, not with it: a crash between
// the two loses one count, which delays or advances one test question;
// it never shows a test question twice nor hands out work to a flagged
// contributor (the take itself refuses them).
func (c *Client) takeScheduled(ctx context.Context, pool *Pool, ct *task.Compiled, tp *store.AssignmentTakeParams) (*crowd.Taken, error) {
	qs, err := c.poolQuality(pool)
	if err != nil {
		return nil, err
	}
	scheduling := qs.QuizSize > 0 || qs.TestEvery > 0
	if scheduling {
		// A pool without test questions schedules none and counts
		// nothing: a contributor's quiz starts with the first test
		// question the pool gets.
		if scheduling, err = c.poolHasGolden(ctx, tp.PoolID); err != nil {
			return nil, err
		}
	}
	var taken *crowd.Taken
	if scheduling || qs.MinSeconds > 0 {
		st, err := c.store.QualityStateGet(ctx, tp.PoolID, tp.ContributorID)
		if err != nil {
			return nil, err
		}
		if !st.Standing.Flagged && (qs.CheckTrust(tp.PoolID, tp.ContributorID, st.Trust, st.Standing).Flag ||
			qs.CheckTooFast(tp.PoolID, tp.ContributorID, st.TooFast, st.Standing).Flag) {
			// A flag its judgment's review did not write (the process
			// died between the two): written now, before any more work.
			if err := c.review(ctx, pool, ct, tp.ContributorID); err != nil {
				return nil, err
			}
			st.Standing.Flagged = true
		}
		if st.Standing.Flagged {
			return nil, &NotEligibleError{ContributorID: tp.ContributorID, PoolID: tp.PoolID, Reason: "the contributor is flagged in the pool"}
		}
		if scheduling && qs.NextAssignment(st.Counts, st.Trust).Test {
			gp := *tp
			gp.Golden, gp.Candidates = true, nil
			if gp.Strategy == crowd.StrategyCandidates {
				gp.Strategy = crowd.StrategyRandom
			}
			taken, err = c.store.AssignmentTake(ctx, &gp)
			if err != nil && !errors.Is(err, crowd.ErrNoUnit) {
				return nil, err
			}
		}
	}
	if taken == nil {
		var err error
		if tp.Strategy == crowd.StrategyCandidates {
			taken, err = c.takeCandidate(ctx, tp)
		} else {
			taken, err = c.store.AssignmentTake(ctx, tp)
		}
		if err != nil {
			return nil, err
		}
	}
	if scheduling {
		err := c.store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			st, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: tp.PoolID, ContributorID: tp.ContributorID, Now: tp.Now})
			if err != nil {
				return err
			}
			st.Counts.Taken++
			if taken.Unit.Golden {
				st.Counts.TestsTaken++
			}
			return putQualityState(ctx, tx, st, tp.Now)
		})
		if err != nil {
			// The assignment is theirs already; a lost count only moves
			// one test question (see above).
			c.cfg.Logger.Warn("count an assignment for quality control failed", "pool_id", tp.PoolID,
				"contributor_id", tp.ContributorID, "error", err)
		}
	}
	return taken, nil
}

// putQualityState writes st whole, and sets st to the row as written: its
// times as the database keeps them (microseconds), flaggedAt as the store
// set or cleared it, so that an answer made of st is what a later read
// returns.
func putQualityState(ctx context.Context, tx store.Tx, st *store.QualityState, now time.Time) error {
	written, err := tx.QualityStatePut(ctx, &store.QualityStatePutParams{
		PoolID: st.PoolID, ContributorID: st.ContributorID, Trust: st.Trust, Standing: st.Standing,
		FlagReason: st.FlagReason, ForgivenAt: st.ForgivenAt, Counts: st.Counts, TooFast: st.TooFast, Now: now,
	})
	if err != nil {
		return err
	}
	history := st.Trust.History // the store's row has none
	*st = *written
	st.Trust.History = history
	return nil
}

// judgmentQuality is quality control's part of one judgment's
// transaction: the contributor's state, locked first of everything
// (before the run: see the lock order in docs/quality.md), and what the
// judgment changes of it.
type judgmentQuality struct {
	settings quality.Settings
	pool     *Pool
	ct       *task.Compiled
	state    *store.QualityState
	// models are the pool's worker-quality models, for a repair's
	// re-aggregation (read before the transaction; nil for none).
	models  map[string]*aggregate.Model
	changed bool
	// review: after the judgment commits, the contributor's standing is
	// to be decided (see review).
	review bool
	// test is what the contributor learns of a test judgment just scored
	// (crowd_feedback.go); nil for none.
	test *TestResult
	// retainted: the transaction changed judgments' taint (a flagged
	// contributor's judgment tainted at once), so judgments read before
	// (JudgmentBegun.UnitJudgments) are not what the unit has now.
	retainted bool
}

// qualityLock locks the contributor's quality state in the pool: the
// first lock of a judgment's transaction.
func (c *Client) qualityLock(ctx context.Context, tx store.Tx, pool *Pool, ct *task.Compiled, contributorID uuid.UUID, now time.Time) (*judgmentQuality, error) {
	qs, err := c.poolQuality(pool)
	if err != nil {
		return nil, err
	}
	st, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: pool.ID, ContributorID: contributorID, Now: now})
	if err != nil {
		return nil, err
	}
	return &judgmentQuality{settings: qs, pool: pool, ct: ct, state: st}, nil
}

// judged runs quality control on a judgment just inserted (ins, Created,
// its unit not CANCELED), in its transaction: a flagged contributor's
// judgment is tainted at once (and its unit retargeted: ins.Unit follows,
// so that the finalization after this sees the unit as it now is); a
// test judgment is scored and moves trust (test_judgment.evaluated, the
// history); a too-fast judgment counts (judgment.check_failed). Whether
// that flags the contributor is decided after this transaction commits,
// in one of its own (review): a flag taints and repairs units of many
// runs, which must be locked before any unit or counter row, and this
// transaction holds its unit and a counter row already.
func (c *Client) judged(ctx context.Context, tx store.Tx, q *judgmentQuality, ins *store.JudgmentInserted, runLocked uuid.UUID, now time.Time) error {
	j, st, qs := ins.Judgment, q.state, q.settings
	ref := quality.JudgmentRef{JudgmentID: j.ID, ContributorID: j.ContributorID, PoolID: j.PoolID}
	if st.Standing.Flagged {
		// Taken before the flag, submitted after it: tainted like the
		// rest. Only this judgment changes, so only its unit (locked
		// already, its run too) is repaired.
		cause := quality.Cause{ContributorID: j.ContributorID, Check: st.Standing.Check, Reason: st.FlagReason}
		q.retainted = true
		return c.retaint(ctx, tx, q, true, cause, ins.Unit, runLocked, now)
	}
	if ins.Unit.Golden {
		parsed, err := q.ct.ParseJudgment(j.Data)
		if err != nil {
			return fmt.Errorf("judgment %s: %w", j.ID, err)
		}
		unit, err := tx.UnitGet(ctx, ins.Unit.ID)
		if err != nil {
			return err
		}
		answer, err := q.ct.ParseAnswer(unit.Answer)
		if err != nil {
			return fmt.Errorf("the answer of golden unit %s: %w", unit.ID, err)
		}
		score, trust, ev := qs.EvaluateTest(ref, q.ct, answer, parsed, st.Trust, now)
		q.test = testResultOf(qs.TestFeedback, score, unit, trust)
		if err := appendTrust(ctx, tx, st, trust); err != nil {
			return err
		}
		q.changed = true
		if err := writeEvents(ctx, tx, now, ev); err != nil {
			return err
		}
	}
	if chk := qs.CheckSpeed(ref, j.StartedAt, j.SubmittedAt); chk.Failed {
		st.TooFast++
		q.changed = true
		if err := writeEvents(ctx, tx, now, chk.Events...); err != nil {
			return err
		}
	}
	q.review = q.changed || qs.PatternMaxShare > 0 || qs.PatternFirstOption
	if q.changed {
		return putQualityState(ctx, tx, st, now)
	}
	return nil
}

// appendTrust records the last change of trust in the history and sets
// it on st (without the history, which the store keeps).
func appendTrust(ctx context.Context, tx store.Tx, st *store.QualityState, trust quality.Trust) error {
	if n := len(trust.History); n > 0 {
		if err := tx.TrustHistoryAppend(ctx, &store.TrustHistoryAppendParams{PoolID: st.PoolID, ContributorID: st.ContributorID, Entry: trust.History[n-1]}); err != nil {
			return err
		}
	}
	trust.History = nil
	st.Trust = trust
	return nil
}

// review decides, in a transaction of its own, whether the contributor
// is to be flagged (or un-flagged) in the pool, and if so writes it with
// the taint and the repair of every unit they judged (applyDecision): one
// transaction, so a crash leaves all of it or none, and the next review
// (their next judgment or take) decides again. The decision depends only
// on what is stored — trust, the too-fast count, the recent answers — so
// it is the same whichever review makes it, and made once: the flag is
// written under the contributor's state, and a flagged contributor is not
// flagged again. For the same reason one the database aborted to break a
// deadlock (ErrContention) is simply made again, up to twice more.
func (c *Client) review(ctx context.Context, pool *Pool, ct *task.Compiled, contributorID uuid.UUID) error {
	models, err := c.poolModels(ctx, pool, ct)
	if err != nil {
		return err
	}
	err = c.reviewOnce(ctx, pool, ct, contributorID, models)
	for try := 1; try < 3 && errors.Is(err, ErrContention); try++ {
		err = c.reviewOnce(ctx, pool, ct, contributorID, models)
	}
	return err
}

func (c *Client) reviewOnce(ctx context.Context, pool *Pool, ct *task.Compiled, contributorID uuid.UUID, models map[string]*aggregate.Model) error {
	return c.store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		now := c.cfg.Now()
		q, err := c.qualityLock(ctx, tx, pool, ct, contributorID, now)
		if err != nil {
			return err
		}
		q.models = models
		d, err := c.decide(ctx, tx, q)
		if err != nil || !(d.Flag || d.Unflag) {
			return err
		}
		return c.applyDecision(ctx, tx, q, d, nil, uuid.Nil, now)
	})
}

// decide runs the checks of the contributor's state: trust (CheckTrust),
// the too-fast count (CheckTooFast), the recent answers (CheckPattern).
func (c *Client) decide(ctx context.Context, tx store.Tx, q *judgmentQuality) (quality.Decision, error) {
	st, qs := q.state, q.settings
	d := qs.CheckTrust(st.PoolID, st.ContributorID, st.Trust, st.Standing)
	if d.Flag || d.Unflag {
		return d, nil
	}
	if d := qs.CheckTooFast(st.PoolID, st.ContributorID, st.TooFast, st.Standing); d.Flag {
		return d, nil
	}
	if st.Standing.Flagged || !(qs.PatternMaxShare > 0 || qs.PatternFirstOption) {
		return d, nil
	}
	fields := quality.ChoiceFields(q.ct)
	recent, err := c.recentAnswers(ctx, tx, q, fields)
	if err != nil {
		return quality.Decision{}, err
	}
	return qs.CheckPattern(st.PoolID, st.ContributorID, fields, recent, st.Standing), nil
}

// recentAnswers lists the choice answers of the contributor's last
// PatternWindow judgments in the pool, oldest first, leaving out those
// submitted before their last forgiveness.
func (c *Client) recentAnswers(ctx context.Context, tx store.Tx, q *judgmentQuality, fields []quality.ChoiceField) ([]quality.Answer, error) {
	if len(fields) == 0 {
		return nil, nil
	}
	js, err := tx.JudgmentList(ctx, &store.JudgmentListParams{PoolID: q.state.PoolID, ContributorID: q.state.ContributorID, Limit: q.settings.PatternWindow})
	if err != nil {
		return nil, err
	}
	out := make([]quality.Answer, 0, len(js))
	for i := len(js) - 1; i >= 0; i-- {
		if !js[i].SubmittedAt.After(q.state.ForgivenAt) {
			// Judged before an admin forgave them: not held against them.
			continue
		}
		parsed, err := q.ct.ParseJudgment(js[i].Data)
		if err != nil {
			return nil, fmt.Errorf("judgment %s: %w", js[i].ID, err)
		}
		out = append(out, quality.AnswerOf(fields, parsed))
	}
	return out, nil
}

// applyDecision writes a flag or an un-flag: the standing, its events,
// then the taint (or un-taint) and the repair.
func (c *Client) applyDecision(ctx context.Context, tx store.Tx, q *judgmentQuality, d quality.Decision, judged *store.JudgedUnit, runLocked uuid.UUID, now time.Time) error {
	st := q.state
	if d.Flag {
		st.Standing, st.FlagReason = quality.Standing{Flagged: true, Check: d.Check}, d.Reason
	} else {
		st.Standing, st.FlagReason = quality.Standing{}, ""
	}
	if err := putQualityState(ctx, tx, st, now); err != nil {
		return err
	}
	if err := writeEvents(ctx, tx, now, d.Events...); err != nil {
		return err
	}
	cause := quality.Cause{ContributorID: st.ContributorID, Check: d.Check, Untaint: d.Unflag, Reason: d.Reason}
	return c.retaint(ctx, tx, q, d.Flag, cause, judged, runLocked, now)
}

// writeEvents writes quality control's events to the outbox.
func writeEvents(ctx context.Context, tx store.Tx, now time.Time, evs ...quality.Event) error {
	for _, ev := range evs {
		if err := tx.QualityEventInsert(ctx, &store.QualityEventInsertParams{Type: ev.Type, Data: ev.Data, Now: now}); err != nil {
			return err
		}
	}
	return nil
}

// retaint taints (taint) or un-taints every judgment of the contributor
// in the pool and repairs each unit they judged (quality.PlanRepair):
// units not final are retargeted (their slots for the tainted judgments
// reopen; one with enough clean judgments after an un-taint is finalized
// now), FINALIZED ones recomputed with the existing aggregation or, short
// of clean judgments, reopened; each change of a finalized result writes
// an audit row and unit.result_changed.
//
// Lock order (store.QualityTx, docs/quality.md "Lock order"): the caller
// holds the contributor's state; the units to repair are listed first,
// locking nothing (JudgmentTaintUnits), then their runs are locked in run
// id order (runLocked, the judgment's own run, is held already), then
// every unit (UnitLock), in (run, unit) id order, and only then are the
// judgments tainted — on the locked units alone — and the units changed.
// A QA review's reject taints the judgments of a unit under its run and
// the unit too; tainting before taking the runs deadlocked with it. The
// list cannot go stale under these locks: the contributor's judgments
// are inserted under their state (held here), and other judgments'
// taints change only under their unit's lock (a unit a reject tainted
// meanwhile is left to it). A run that moved on past
// its human step is not rewound (see docs/quality.md). judged, when one
// of the units, follows the repair.
func (c *Client) retaint(ctx context.Context, tx store.Tx, q *judgmentQuality, taint bool, cause quality.Cause, judged *store.JudgedUnit, runLocked uuid.UUID, now time.Time) error {
	tp := &store.JudgmentTaintManyParams{PoolID: q.state.PoolID, ContributorID: q.state.ContributorID, Tainted: taint}
	listed, err := tx.JudgmentTaintUnits(ctx, tp)
	if err != nil {
		return err
	}
	tp.Units = make([]uuid.UUID, 0, len(listed))
	for _, u := range listed {
		tp.Units = append(tp.Units, u.UnitID)
	}
	// Golden and CANCELED units are not repaired: their judgments change
	// taint without their lock (no judgment of them is tainted by
	// anything else), the others' after it.
	listedRes := store.SplitTaintedUnits(listed)
	units := append(append([]store.TaintedUnit(nil), listedRes.Finalized...), listedRes.Open...)
	slices.SortFunc(units, func(a, b store.TaintedUnit) int {
		if c := bytes.Compare(a.RunID[:], b.RunID[:]); c != 0 {
			return c
		}
		return bytes.Compare(a.UnitID[:], b.UnitID[:])
	})
	if q.pool.Workflow != "" {
		var last uuid.UUID
		for _, u := range units {
			if u.RunID == uuid.Nil || u.RunID == last || u.RunID == runLocked {
				continue
			}
			last = u.RunID
			if err := lockRun(ctx, tx, u.RunID); err != nil {
				return err
			}
		}
	}
	// Every unit is locked before any is changed: changing one moves a
	// pool counter row, which a judgment holding another of them may be
	// waiting for.
	locked := make([]*Unit, len(units))
	for i, tu := range units {
		if locked[i], err = tx.UnitLock(ctx, tu.UnitID); err != nil {
			return err
		}
	}
	res, err := tx.JudgmentTaintMany(ctx, tp)
	if err != nil {
		return err
	}
	// What changed, under the locks: a reject may have tainted one of the
	// listed judgments between the list and the unit's lock (and repaired
	// that unit itself).
	changed := make(map[uuid.UUID]bool, len(units))
	for _, u := range append(res.Finalized, res.Open...) {
		changed[u.UnitID] = true
	}
	jpu := overlapOf(q.pool, q.ct)
	for i, tu := range units {
		if !changed[tu.UnitID] {
			continue
		}
		fin, err := c.repairUnit(ctx, tx, q, locked[i], taint, jpu, cause, now)
		if err != nil {
			return err
		}
		if judged != nil && judged.ID == tu.UnitID && fin != nil {
			judged.JudgmentsPerUnit, judged.State = fin.JudgmentsPerUnit, fin.State
		}
	}
	return nil
}

// repairUnit applies the plan of one unit whose judgments of the
// contributor changed taint, and returns the unit as it left it (nil when
// nothing was done).
//
// The unit was locked (UnitLock) before its judgments are read here: a
// judgment of someone else may have finalized it since the taint listed
// it (with this contributor's judgment still clean in its snapshot).
func (c *Client) repairUnit(ctx context.Context, tx store.Tx, q *judgmentQuality, unit *Unit, taint bool, jpu task.JudgmentsPerUnit, cause quality.Cause, now time.Time) (*Unit, error) {
	unitID := unit.ID
	js, err := tx.JudgmentList(ctx, &store.JudgmentListParams{UnitID: unitID})
	if err != nil {
		return nil, err
	}
	marks := make([]quality.Mark, len(js))
	for i, j := range js {
		marks[i] = quality.Mark{JudgmentID: j.ID, WasTainted: j.Tainted, Tainted: j.Tainted}
		if j.ContributorID == q.state.ContributorID {
			marks[i].WasTainted = !taint
		}
	}
	plan := quality.PlanRepair(unit.State, unit.Golden, unit.JudgmentsPerUnit, jpu, marks)
	if plan.Action == quality.RepairRetarget && plan.Target < unit.SlotsTaken {
		// A forgiveness lowers the target by the judgments it cleans, but
		// slots handed out meanwhile (taken while they were tainted) are
		// not taken back: the unit keeps every judgment they bring, and
		// its target never falls under its slots taken (the chaos run's
		// slot_over_assigned caught a unit at 4 slots and target 3).
		plan.Target = unit.SlotsTaken
		plan.Reason += fmt.Sprintf(", kept at its %d slots taken", unit.SlotsTaken)
	}
	rp := &store.UnitRepairParams{ID: unitID, Action: plan.Action, Target: plan.Target, Now: now}
	switch plan.Action {
	case quality.RepairNone:
		return nil, nil
	case quality.RepairRetarget:
		fixed, err := tx.UnitRepair(ctx, rp)
		if err != nil {
			return nil, err
		}
		if plan.Evaluate && fixed.State == crowd.UnitJudgable && fixed.JudgmentCount >= fixed.JudgmentsPerUnit {
			// No judgment to come would decide it: decided now, as the
			// judgment that reaches a unit's target does.
			fin, err := c.unitTargetReached(ctx, tx, q.pool, q.ct, q.models, &store.JudgedUnit{ID: fixed.ID, RunID: fixed.RunID,
				State: fixed.State, JudgmentCount: fixed.JudgmentCount, JudgmentsPerUnit: fixed.JudgmentsPerUnit}, nil, nil)
			if err != nil || fin == nil {
				return fixed, err
			}
			return fin, nil
		}
		return fixed, nil
	case quality.RepairRecompute:
		rp.Result, rp.Confidence, err = aggregateUnitWith(q.ct, js, q.models)
		if err != nil {
			return nil, fmt.Errorf("aggregate unit %s: %w", unitID, err)
		}
	}
	fixed, err := tx.UnitRepair(ctx, rp)
	if err != nil {
		return nil, err
	}
	before := quality.Result{Value: unit.Result, Confidence: unit.Confidence}
	after := quality.Result{Value: fixed.Result, Confidence: fixed.Confidence}
	audit, changed := quality.NewAudit(before, after, plan, cause)
	if !changed {
		return fixed, nil
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	if _, err := tx.UnitAuditInsert(ctx, &store.UnitAuditInsertParams{ID: id, UnitID: unitID, PoolID: unit.PoolID, Audit: audit, Now: now}); err != nil {
		return nil, err
	}
	return fixed, writeEvents(ctx, tx, now, quality.Event{Type: quality.EventUnitResultChanged,
		Data: quality.UnitResultChangedData{UnitID: unitID, PoolID: unit.PoolID, Audit: audit}})
}

// ContributorForgive is an admin lifting a contributor's flag in a pool
// (quality.Settings.Forgive): the flag goes (contributor.unflagged), their
// test counts restart from zero (the trust history keeps the old ones),
// their too-fast count too, and every judgment of theirs in the pool is
// un-tainted, with the units they judged repaired again — recomputed,
// retargeted or finalized, each change of a finalized result audited
// (unit.result_changed) — all in one transaction. by names who forgave.
// A contributor who is not flagged is left as they are (the state is
// returned). ErrNotFound when the pool or the contributor does not exist;
// a *ValidationError when by is not text (CheckText).
func (c *Client) ContributorForgive(ctx context.Context, poolID, contributorID uuid.UUID, by string) (*ContributorQuality, error) {
	if err := CheckText("by", by); err != nil {
		return nil, err // it is written in the trust history and an event
	}
	if contributorID == uuid.Nil {
		// No contributor has it (ContributorQualityGet answers so too),
		// not a missing parameter.
		return nil, fmt.Errorf("contributor %s: %w", contributorID, ErrNotFound)
	}
	pool, err := c.poolSettings(ctx, poolID)
	if err != nil {
		return nil, err
	}
	ct, err := c.CompiledTask(ctx, pool.Task, pool.TaskVersion)
	if err != nil {
		return nil, err
	}
	models, err := c.poolModels(ctx, pool, ct)
	if err != nil {
		return nil, err
	}
	var out *ContributorQuality
	err = c.store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		now := c.cfg.Now()
		q, err := c.qualityLock(ctx, tx, pool, ct, contributorID, now)
		if err != nil {
			return err
		}
		q.models = models
		st := q.state
		out = st
		if !st.Standing.Flagged {
			return nil
		}
		trust, d := q.settings.Forgive(poolID, contributorID, st.Trust, st.Standing, now, by)
		if err := appendTrust(ctx, tx, st, trust); err != nil {
			return err
		}
		st.TooFast, st.ForgivenAt = 0, now
		return c.applyDecision(ctx, tx, q, d, nil, uuid.Nil, now)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkTaskQuality adds the problems of the template's quality settings
// (its "quality" object, decoded strictly by quality.Decode) to err, the
// template's own validation error or nil, each under "quality.<key>", so
// that one answer names every bad field.
func checkTaskQuality(t *TaskTemplate, err error) error {
	if t.Quality == nil {
		return err
	}
	_, qerr := quality.Decode(t.Quality)
	var qve *task.ValidationError
	if !errors.As(qerr, &qve) {
		if qerr != nil {
			return qerr
		}
		return err
	}
	var ve *task.ValidationError
	if err != nil && !errors.As(err, &ve) {
		return err
	}
	if ve == nil {
		ve = &task.ValidationError{Subject: "task template"}
	}
	for _, fe := range qve.Errors {
		field := "quality"
		if fe.Field != "" {
			field += "." + fe.Field
		}
		ve.Errors = append(ve.Errors, task.FieldError{Field: field, Message: fe.Message})
	}
	return ve
}

// goldenRecheck: how long a node believes a pool it found without golden
// units still has none. Golden units added through this client count at
// once; added through another node, within this long.
const goldenRecheck = 2 * time.Second

// poolHasGolden tells whether pool id has judgable golden units (through
// docket_units_golden, an index of those alone), from the cache
// (Client.golden, a refreshCache of goldenRecheck on the wall clock, not
// Config.Now) or by reading one. A pool seen with golden units has them
// for good (a test take that finds none left falls back to a regular
// one); one seen without, for goldenRecheck. A take in a pool without
// test questions then reads and writes no quality state: the quiz and the
// one in K have nothing to schedule (a read of the contributor's state
// and a transaction of its own per take, about a third of a hot pool's
// throughput).
//
// One take reads at a time: while it rereads a pool seen without golden
// units, the others keep that answer (it is at most goldenRecheck old
// plus the read); before the first answer they wait for it. (Every take
// of a hot pool reread it at once before, each walking the pool's units:
// at 5,000 units about a millisecond each and a thousand reads a run.)
func (c *Client) poolHasGolden(ctx context.Context, id uuid.UUID) (bool, error) {
	return c.golden.get(ctx, id, func(ctx context.Context, had bool) (bool, error) {
		if had {
			return true, nil // for good: not read again
		}
		yes := true
		units, err := c.store.UnitList(ctx, &store.UnitListParams{PoolID: id, Golden: &yes,
			States: []crowd.UnitState{crowd.UnitJudgable}, Limit: 1})
		return len(units) > 0, err
	})
}
