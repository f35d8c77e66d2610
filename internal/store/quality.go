package store

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
)

// QualityTx is the store of quality control (internal/quality,
// docs/quality.md), for the transactions that act on its decisions: the
// judgment of a test question (trust and its history), a flag or an
// un-flag (taint, repair, audit) and the take of a test question. Its
// methods run in a caller's transaction (Tx); the reads also run on their
// own (QualityStore).
//
// Lock order. A contributor's quality state in a pool comes first, before
// everything else of human work:
//
//	quality state → runs → assignment → units → judgments → pool counter row
//
// and several states in (pool, contributor) order. The state is keyed by
// what a transaction knows before it reads anything (the contributor and
// the pool of the assignment being taken or judged), and a flag holds it
// while it taints and repairs units of many runs: a transaction that took
// it after a run, a unit or a counter row would close a cycle with a
// repair holding it and waiting for that run. A transaction that must
// change the state of several contributors (the agreement of each judge
// of a finalized unit) therefore does so in its own transaction, off the
// outbox, not in the one holding the unit.
//
// Runs and units come in id order when a transaction takes several
// (a flag's repair, a sweep), and a unit's judgments change taint only
// under the unit's lock (after its run's): a flag's repair lists the
// units first (JudgmentTaintUnits, no lock), locks their runs, then the
// units (UnitLock), and only then taints (JudgmentTaintMany with Units);
// a QA review's reject (UnitRedo) taints the judgments of the unit it
// holds, under its run. Before, the repair tainted first and locked the
// runs after, and a reject holding a run while it tainted the judgments
// of its unit deadlocked with it on PostgreSQL
// (TestQualityReviewLockOrder). Trust history rows are written only
// under their contributor's state, so they take no place of their own.
type QualityTx interface {
	// QualityStateLock reads a contributor's quality state in a pool and
	// locks it until the transaction ends (FOR UPDATE; SQLite's write
	// transaction holds everything). The row is created on first use, in
	// the state of a contributor the pool has not met (quality.NewTrust,
	// not flagged, every count 0). ErrNotFound when the pool or the
	// contributor does not exist.
	QualityStateLock(ctx context.Context, p *QualityStateLockParams) (*QualityState, error)
	// QualityStatePut writes a contributor's whole quality state in a
	// pool (creating the row when there is none): the caller locked it
	// and changed it by the rules of package quality.
	QualityStatePut(ctx context.Context, p *QualityStatePutParams) (*QualityState, error)
	// TrustHistoryAppend adds one change of a contributor's trust in a
	// pool, after the ones there, and deletes the oldest beyond
	// quality.MaxTrustHistory. The caller holds the state
	// (QualityStateLock), which must exist.
	TrustHistoryAppend(ctx context.Context, p *TrustHistoryAppendParams) error
	// TrustHistoryList lists a contributor's trust changes in a pool,
	// oldest first (at most quality.MaxTrustHistory).
	TrustHistoryList(ctx context.Context, poolID, contributorID uuid.UUID) ([]quality.TrustEntry, error)
	// JudgmentTaintUnits lists the units JudgmentTaintMany with the same
	// params would change, each once, by unit id, with
	// how many of the contributor's judgments there differ in taint. It
	// locks nothing: the repair locks their runs and the units from it,
	// then taints (see the lock order above).
	JudgmentTaintUnits(ctx context.Context, p *JudgmentTaintManyParams) ([]TaintedUnit, error)
	// JudgmentTaintMany taints (p.Tainted) or un-taints every judgment
	// of a contributor in a pool whose taint differs — only those on
	// p.Units when it is not nil —, and returns how many changed and the
	// units they belong to, each once, by unit id, split by the unit's
	// state. Un-tainting leaves a judgment a QA review rejected
	// (UnitRedo) tainted. The caller holds the contributor's state and, for the lock
	// order, the units' runs and the units (UnitLock) already.
	JudgmentTaintMany(ctx context.Context, p *JudgmentTaintManyParams) (*JudgmentTaintResult, error)
	// UnitAuditInsert writes the audit record of a change of a finalized
	// unit's result (quality.NewAudit).
	UnitAuditInsert(ctx context.Context, p *UnitAuditInsertParams) (*UnitAudit, error)
	// UnitAuditList lists a unit's audit records, oldest first.
	UnitAuditList(ctx context.Context, unitID uuid.UUID) ([]*UnitAudit, error)
	// AssignmentCountGolden counts a contributor's test questions in a
	// pool: their assignments of golden units in any state (ACTIVE,
	// SUBMITTED, EXPIRED, RELEASED), by the assignments' golden flag and
	// its partial index.
	AssignmentCountGolden(ctx context.Context, poolID, contributorID uuid.UUID) (int, error)
	// UnitPickGolden returns a golden unit of the pool, JUDGABLE, that
	// the contributor never had an assignment for, in any state
	// (quality.TestExcludedStates): the oldest (StrategyOrdered) or the
	// first at or after a random key, wrapping around (StrategyRandom, so
	// that contributors do not all get the same test questions first);
	// crowd.ErrNoUnit when none is left. One indexed statement; it locks
	// nothing (the take does, and the UNIQUE (unit, contributor) of the
	// assignments refuses a second one).
	UnitPickGolden(ctx context.Context, p *UnitPickGoldenParams) (uuid.UUID, error)
	// UnitLock reads a unit and locks it until the transaction ends (FOR
	// UPDATE; SQLite's write transaction holds everything), so that the
	// repair plans on the unit as it is, judgments included, and no
	// judgment finalizes it meanwhile. The caller holds the unit's run
	// lock first (when it has a run). ErrNotFound when there is none.
	UnitLock(ctx context.Context, id uuid.UUID) (*crowd.Unit, error)
	// UnitRepair applies one repair plan to one regular unit (see
	// UnitRepairParams). The caller holds the unit's run lock (when it has
	// a run) and the flagged contributor's state.
	UnitRepair(ctx context.Context, p *UnitRepairParams) (*crowd.Unit, error)
	// QualityEventInsert writes one event of quality control
	// (test_judgment.evaluated, contributor.flagged, contributor.unflagged,
	// judgment.check_failed, unit.result_changed) to the outbox.
	QualityEventInsert(ctx context.Context, p *QualityEventInsertParams) error
}

// QualityStore is the part of QualityTx that reads on its own, outside a
// caller's transaction: what the API shows of quality control.
type QualityStore interface {
	// TrustHistoryList is QualityTx.TrustHistoryList.
	TrustHistoryList(ctx context.Context, poolID, contributorID uuid.UUID) ([]quality.TrustEntry, error)
	// UnitAuditList is QualityTx.UnitAuditList.
	UnitAuditList(ctx context.Context, unitID uuid.UUID) ([]*UnitAudit, error)
	// QualityStateGet reads a contributor's quality state in a pool
	// without creating or locking it; one the pool has not met reads as
	// new (not stored).
	QualityStateGet(ctx context.Context, poolID, contributorID uuid.UUID) (*QualityState, error)
}

// QualityState is what a pool knows of one contributor for quality
// control: their trust (the counts and value, without the history, which
// TrustHistoryList reads), their standing, and the counts the scheduling
// and the behaviour checks need.
type QualityState struct {
	PoolID        uuid.UUID
	ContributorID uuid.UUID
	// Trust: History is left empty.
	Trust    quality.Trust
	Standing quality.Standing
	// FlagReason says why they were flagged (when Standing.Flagged).
	FlagReason string
	FlaggedAt  time.Time // zero unless flagged
	ForgivenAt time.Time // the last time an admin forgave them; zero for never
	// Counts of the scheduling: assignments taken in the pool, test
	// questions among them.
	Counts quality.Counts
	// TooFast counts the judgments that failed the too-fast check.
	TooFast   int
	UpdatedAt time.Time
}

// QualityStateLockParams names the state to lock.
type QualityStateLockParams struct {
	PoolID        uuid.UUID
	ContributorID uuid.UUID
	Now           time.Time // updated_at of a row created here
}

// Validate names every invalid field.
func (p *QualityStateLockParams) Validate() error {
	pr := problemsOf("lock quality state")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	pr.Check(p.ContributorID == uuid.Nil, "contributorId", "is required")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// QualityStatePutParams writes a contributor's quality state in a pool.
// FlaggedAt is kept from the stored row while the contributor stays
// flagged, set to Now when they become flagged, and cleared when not.
type QualityStatePutParams struct {
	PoolID        uuid.UUID
	ContributorID uuid.UUID
	Trust         quality.Trust // History is ignored (TrustHistoryAppend)
	Standing      quality.Standing
	FlagReason    string
	ForgivenAt    time.Time // zero for never
	Counts        quality.Counts
	TooFast       int
	Now           time.Time
}

// Validate names every invalid field.
func (p *QualityStatePutParams) Validate() error {
	pr := problemsOf("put quality state")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	pr.Check(p.ContributorID == uuid.Nil, "contributorId", "is required")
	t := p.Trust
	pr.Check(!(t.Value >= 0 && t.Value <= 1), "trust.value", "must be between 0 and 1")
	pr.Check(t.TestsAnswered < 0, "trust.testsAnswered", "must not be negative")
	pr.Check(t.TestsCorrect < 0 || t.TestsCorrect > t.TestsAnswered, "trust.testsCorrect", "must be between 0 and testsAnswered")
	pr.Check(p.Standing.Flagged && p.Standing.Check == "", "standing.check", "a flag needs the check that caused it")
	pr.Check(!p.Standing.Flagged && p.Standing.Check != "", "standing.check", "only a flag has a check")
	pr.Check(p.Counts.Taken < 0, "counts.taken", "must not be negative")
	pr.Check(p.Counts.TestsTaken < 0 || p.Counts.TestsTaken > p.Counts.Taken, "counts.testsTaken", "must be between 0 and taken")
	pr.Check(p.TooFast < 0, "tooFast", "must not be negative")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// TrustHistoryAppendParams adds one change of trust.
type TrustHistoryAppendParams struct {
	PoolID        uuid.UUID
	ContributorID uuid.UUID
	Entry         quality.TrustEntry
}

// Validate names every invalid field.
func (p *TrustHistoryAppendParams) Validate() error {
	pr := problemsOf("append trust history")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	pr.Check(p.ContributorID == uuid.Nil, "contributorId", "is required")
	e := p.Entry
	pr.Check(e.At.IsZero(), "entry.at", "is required")
	pr.Check(e.TestsAnswered < 0, "entry.testsAnswered", "must not be negative")
	pr.Check(e.TestsCorrect < 0 || e.TestsCorrect > e.TestsAnswered, "entry.testsCorrect", "must be between 0 and testsAnswered")
	pr.Check(!(e.Value >= 0 && e.Value <= 1), "entry.value", "must be between 0 and 1")
	pr.Check(e.Reason == "", "entry.reason", "is required")
	return pr.Err()
}

// JudgmentTaintManyParams taints or un-taints a contributor's judgments
// in a pool.
type JudgmentTaintManyParams struct {
	PoolID        uuid.UUID
	ContributorID uuid.UUID
	Tainted       bool // true: taint (a flag); false: un-taint (an un-flag)
	// Units, when not nil, limits the change to the judgments on these
	// units: the ones the caller locked (JudgmentTaintUnits, then
	// UnitLock). An empty, non-nil list changes nothing.
	Units []uuid.UUID
}

// Validate names every invalid field.
func (p *JudgmentTaintManyParams) Validate() error {
	pr := problemsOf("taint judgments")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	pr.Check(p.ContributorID == uuid.Nil, "contributorId", "is required")
	return pr.Err()
}

// TaintedUnit is a unit one of whose judgments changed taint.
type TaintedUnit struct {
	UnitID uuid.UUID
	RunID  uuid.UUID // uuid.Nil for a unit of no run
	State  crowd.UnitState
	Golden bool
	// Judgments of the unit that changed taint (one per contributor, so
	// 1, unless the store ever allows more).
	Judgments int
}

// JudgmentTaintResult is what JudgmentTaintMany changed: the judgments,
// and their units by what the repair does to them (quality.PlanRepair),
// each list by unit id.
type JudgmentTaintResult struct {
	// Judgments is how many judgments changed taint.
	Judgments int
	// Finalized are the regular FINALIZED units: recompute or reopen,
	// with an audit record when the result changes.
	Finalized []TaintedUnit
	// Open are the regular NEW, JUDGABLE and PAUSED units: retarget.
	Open []TaintedUnit
	// Other are golden and CANCELED units: nothing to repair.
	Other []TaintedUnit
}

// UnitPickGoldenParams asks for a test question for a contributor.
type UnitPickGoldenParams struct {
	PoolID        uuid.UUID
	ContributorID uuid.UUID
	// Strategy is crowd.StrategyOrdered or crowd.StrategyRandom.
	Strategy crowd.Strategy
	// RandomKey is where StrategyRandom starts (0 lets the store draw
	// one); tests pass it to be reproducible.
	RandomKey int64
}

// Validate names every invalid field.
func (p *UnitPickGoldenParams) Validate() error {
	pr := problemsOf("pick test question")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	pr.Check(p.ContributorID == uuid.Nil, "contributorId", "is required")
	pr.Check(p.Strategy != crowd.StrategyOrdered && p.Strategy != crowd.StrategyRandom, "strategy",
		"must be ordered or random, not %q", p.Strategy)
	pr.Check(p.Strategy != crowd.StrategyRandom && p.RandomKey != 0, "randomKey", "only the random strategy takes a key")
	return pr.Err()
}

// UnitAuditInsertParams writes one audit record.
type UnitAuditInsertParams struct {
	ID     uuid.UUID // UUIDv7, made by the caller
	UnitID uuid.UUID
	PoolID uuid.UUID
	Audit  quality.Audit
	Now    time.Time
}

// Validate names every invalid field.
func (p *UnitAuditInsertParams) Validate() error {
	pr := problemsOf("insert unit audit")
	pr.Check(p.ID == uuid.Nil, "auditId", "is required")
	pr.Check(p.UnitID == uuid.Nil, "unitId", "is required")
	pr.Check(p.PoolID == uuid.Nil, "poolId", "is required")
	a := p.Audit
	for _, r := range []struct {
		field string
		res   quality.Result
	}{{"audit.old", a.Old}, {"audit.new", a.New}} {
		if r.res.Value != nil {
			checkJSON(pr, r.field+".result", r.res.Value)
		}
		c := r.res.Confidence
		pr.Check(c != nil && !(*c >= 0 && *c <= 1), r.field+".confidence", "must be between 0 and 1")
	}
	pr.Check(a.Action != quality.RepairRecompute && a.Action != quality.RepairReopen, "audit.action",
		"must be %s or %s, not %q", quality.RepairRecompute, quality.RepairReopen, a.Action)
	pr.Check(a.Cause.ContributorID == uuid.Nil, "audit.cause.contributorId", "is required")
	pr.Check(a.Cause.Check == "", "audit.cause.check", "is required")
	pr.Check(a.Why == "", "audit.why", "is required")
	pr.Check(p.Now.IsZero(), "now", "is required")
	return pr.Err()
}

// UnitAudit is one stored audit record of a unit.
type UnitAudit struct {
	ID     uuid.UUID
	UnitID uuid.UUID
	PoolID uuid.UUID
	quality.Audit
	At time.Time
}

// SplitTaintedUnits sorts the units of JudgmentTaintMany (in unit id
// order) by what the repair does to them; both backends answer with it.
func SplitTaintedUnits(units []TaintedUnit) *JudgmentTaintResult {
	r := &JudgmentTaintResult{}
	for _, u := range units {
		r.Judgments += u.Judgments
		switch {
		case u.Golden || u.State == crowd.UnitCanceled:
			r.Other = append(r.Other, u)
		case u.State == crowd.UnitFinalized:
			r.Finalized = append(r.Finalized, u)
		default:
			r.Open = append(r.Open, u)
		}
	}
	return r
}
