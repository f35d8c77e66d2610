package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// The group judgment: concurrent judgments of one pool (JudgmentInTx)
// share one transaction, queued and led as the group take's takes are
// (crowd_group.go). A leader sends, in one pipeline:
//
//   - BEGIN;
//   - the quality states of all the batch's contributors locked in one
//     statement, in contributor order, and those not there yet (a
//     contributor's first judgment in the pool) made in it
//     (judgmentStatesLockSQL);
//   - the runs of the batch's units (pools with a workflow) locked in one
//     statement, in run order (judgmentRunsLockSQL);
//   - one statement for all the batch's judgments, in the batch's order:
//     unit order, then assignment order (judgmentInsertBatchSQL): what
//     each judgment's own statement (judgmentInsertPipedSQL) does, with
//     one row back per judgment that inserted, and the batch's judgments
//     added to one counter shard, the shard drawn once for the batch
//     (it was a statement per judgment and one for the counter: each
//     statement's executor start-up and constraint set-up were a fifth
//     and more of PostgreSQL's CPU per judgment);
//   - one statement that reads the judgments of the batch's units that
//     are now at their target (judgmentsReachedSQL): what the judgment
//     that brought each there finalizes it with (UnitJudgments).
//
// Then, on that transaction, each judgment's fn in turn, in the
// statements' order, with the batch's shard in its context; then COMMIT.
// Each judgment gets its own answer. One round trip and one commit (and
// one WAL flush and counter row update) for up to judgeGroupMax
// judgments, where each had its own. A batch of one is today's
// transaction (judgmentInTxPiped).
//
// The batch holds its locks while its fns run one after another, so
// their round trips are every waiting judgment's: a finalizing fn needs
// none to read its unit's judgments (they came with the pipeline), and
// its finalization (UnitFinalizeLater) is queued on the batch's
// countingTx, which sends the queue in one pipeline before the
// transaction's next statement — a later fn's, the reread below — or
// before COMMIT. A queued finalization that fails (its unit refused it,
// or any error) rolls the batch back: each judgment runs alone, where
// nothing is queued and its fn gets the error itself.
//
// What a judgment sees is what it would have seen had the batch's
// judgments run one after another, in the batch's order: the statement
// gives each judgment of a unit its count as of its own place in that
// order (the second of a unit counts after the first: its judgment_count
// includes it; a judgment whose assignment was refused takes no place),
// and the unit as it stands once locked (what any statement of it after
// the first would have seen too: the batch holds the unit from then on),
// and a fn sees what the fns and the statement before it wrote. Two things a
// batch changes, and how they are kept right:
//
//   - a contributor's state is locked once, before any fn: a batch takes
//     at most one judgment of each contributor (judgeJoins; another waits
//     for a later batch), so a fn that changes its contributor's state
//     (a test question's trust, the too-fast count) changes no state a
//     later judgment of the batch has read;
//   - a judgment's statement ran before the fns of the judgments before
//     it: when one of those fns ran any statement (it may have changed
//     its unit: finalized it, retargeted it; or, for a unit of a run,
//     another: finalizing may end the unit's run and cancel the run's
//     other units), the units of the judgments after it that it may have
//     changed (of its unit; of every later judgment, for a unit of a run)
//     are read again, in one statement, before the next fn; if one's state, count or target differ from what the
//     batch's statements left it at (what the last of the unit's
//     statements returned: not a judgment's own count, which the unit's
//     later statements passed), the batch rolls back and each judgment
//     runs alone. (A unit reaches its target on the last judgment its
//     slots allow, so this is a guard, not a path: the usual batch with
//     a unit judged three times finalizes it in the third judgment's fn,
//     the last.)
//
// Exactly-once finalization follows: only the fn of the judgment whose
// statement brought the count to the target finalizes (the caller's
// rule, unchanged), in the one transaction that commits all of them or
// none.
//
// Any error — a statement's ERROR, any fn's error (a judgment of a
// CANCELED unit, which rolls its judgment back), COMMIT's ERROR — rolls
// the whole batch back, and each judgment runs again alone (today's
// path; it gets its own true answer there). Only an error of the
// connection at COMMIT (the outcome unknown) is every judgment's answer,
// as a single judgment's would be. A judgment whose contributor has no
// quality state (another transaction was making it, so the batch made
// none: errNoQualityState) is answered that, and takes the one-by-one
// path, when its statement wrote nothing (the EXISTS guard of
// judgmentInsertPipedSQL); when it did (the state committed between the
// lock and the statement) the batch rolls back; so does a batch that
// made a state for a judgment that then wrote nothing (refused: alone,
// it is refused and makes no state). A judgment that inserted nothing
// (the same data sent again, or a refused assignment) is answered by
// judgmentNotInserted on the batch's transaction, as alone; a refusal or
// a conflict leaves the batch without it (it wrote nothing).
//
// Locks, and why a batch adds no deadlock. Every writer locks in the
// order quality state → run → unit → counter row (lockRun's comment in
// crowd_work.go, docs/quality.md; the group take's comment for the
// take's side). A batch locks the same kinds in the same order, each kind
// as a set in one global order: states by contributor id (those that
// exist, then those it makes: a batch that waits at an insert for
// another's insert of the same state holds states only, and the other
// inserts in the same order, so no cycle goes through the made ones
// either; judgmentStatesLockSQL), runs by run id
// (ORDER BY under FOR UPDATE locks rows in the sorted order), then in
// the one judgment statement its assignments in the batch's order (a
// nested loop from the arrays into the primary key), then its units by
// unit id (a locking subquery, l, sorted, that the unit update joins
// to), its one counter row last, and the fns' statements after, as a
// single judgment's fn runs after its counter row (TestTakePlan checks
// the plan, custom and generic). Two batches, or a batch and a single
// judgment, take overlapping locks in one order and cannot wait for each
// other in a cycle. Assignments come before units, as every writer of
// human work takes them (crowd_assignment.go's reaper comment): a batch
// waiting for an assignment holds none of its units yet, and what holds
// an assignment waits only for that assignment's unit, so a release or
// expiry racing a submit of the batch closes no cycle with it (with a
// statement per judgment, one did: a later judgment's assignment was
// locked after an earlier one's unit). PostgreSQL's deadlock detection
// would break any cycle; the batch then rolls back and each judgment
// runs alone. The cost of a batch otherwise: its locks are held until
// its last fn ends, so a take or judgment that needs one of its units or
// states waits that long; judgeGroupMax keeps batches short.
const (
	// judgeGroupMax is the most judgments one batch sends.
	judgeGroupMax = 32
	// judgeGroupLeaders is the most batches of one pool in flight at once.
	judgeGroupLeaders = 2
	// judgeBatchTimeout bounds one batch.
	judgeBatchTimeout = 30 * time.Second
)

// judgeCall is one queued judgment: JudgmentInTx's arguments.
type judgeCall struct {
	p  *store.JudgmentInTxParams
	fn func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error
}

type (
	// judgeGroup is a Store's queues of judgments waiting for a batch.
	judgeGroup = group[judgeCall, struct{}]
	// judgeQueued is one queued judgment.
	judgeQueued = groupCall[judgeCall, struct{}]
)

// judgeSpec is the group judgment.
var judgeSpec = &groupSpec[judgeCall, struct{}]{max: judgeGroupMax, leaders: judgeGroupLeaders,
	timeout: judgeBatchTimeout, joins: judgeJoins, send: (*Store).judgeSend}

// judgeJoins: a batch takes one judgment of each contributor.
func judgeJoins(batch []*judgeQueued, c *judgeQueued) bool {
	for _, b := range batch {
		if b.c.p.Insert.ContributorID == c.c.p.Insert.ContributorID {
			return false
		}
	}
	return true
}

// judgmentStatesLockSQL locks the quality states of contributors @ids in
// pool @pool, in contributor order, and makes, in contributor order, those
// of the contributors who have none yet (their first judgment in the
// pool; updated_at the judgment's time, @nows[i] for @ids[i]), as
// qualityStateLock makes one: what a first judgment needs is in the
// statement that locks the others', not a transaction of its own
// (errNoQualityState, JudgmentInTxSerial: five more round trips, and a
// wasted place in the batch). The rows it makes are the transaction's
// own until it commits, held as a lock holds them. Each row comes with
// made: true for a row this statement inserted. A state that another
// transaction makes meanwhile (not yet committed when this one locked)
// is waited for by the insert and then not returned (ON CONFLICT DO
// NOTHING): that judgment has no state, as before (errNoQualityState).
// The pool and the contributor are checked first, as in qualityStateLock,
// so that an unknown one makes no row and no foreign key violation; and
// a state is made only for a contributor whose assignment of the batch
// (@assignments[i], the one judgment of @ids[i] the batch takes) the
// judgment's statement will accept — ACTIVE, the contributor's, in the
// pool, not expired at the judgment's time — so a judgment refused for
// those reasons (a released or expired assignment submitted again and
// again) makes no state and does not roll the batch back.
//
// The locks of existing rows are all taken (locked, read whole by made's
// NOT IN before its first insert) before any row is inserted, each set in
// contributor order: a batch that waits in its inserts for another's
// insert of the same row holds states only, and the one it waits for
// inserts in the same order (see the lock order in judgeBatch's comment).
var judgmentStatesLockSQL = compileNamed(`WITH locked AS (
	SELECT ` + qualityStateColumns + ` FROM docket_pool_contributors
	WHERE pool_id = @pool AND contributor_id = ANY(@ids::uuid[]) ORDER BY contributor_id FOR UPDATE
), made AS (
	INSERT INTO docket_pool_contributors (pool_id, contributor_id, updated_at)
	SELECT @pool, n.id, n.at FROM unnest(@ids::uuid[], @nows::timestamptz[], @assignments::uuid[]) AS n (id, at, assignment)
	WHERE n.id NOT IN (SELECT contributor_id FROM locked)
		AND EXISTS (SELECT 1 FROM docket_pools WHERE id = @pool)
		AND EXISTS (SELECT 1 FROM docket_contributors k WHERE k.id = n.id)
		AND EXISTS (SELECT 1 FROM docket_assignments a WHERE a.id = n.assignment AND a.contributor_id = n.id
			AND a.pool_id = @pool AND a.` + assignmentActive + ` AND a.expires_at >= n.at)
	ORDER BY n.id
	ON CONFLICT (pool_id, contributor_id) DO NOTHING
	RETURNING ` + qualityStateColumns + `
)
SELECT ` + qualityStateColumns + `, false FROM locked
UNION ALL
SELECT ` + qualityStateColumns + `, true FROM made`)

// judgmentStateLockOneSQL is judgmentStatesLockSQL for one contributor
// (@id, their judgment's time @now, its assignment @assignment), as the piped transaction of a
// judgment alone sends it: scalars, not arrays, so that no custom plan
// sees a count and PostgreSQL keeps the cached generic plan whatever the
// pool's size (with arrays it planned at every execution once the pool
// held a few thousand states: TestBatchStateLockPlansCached). Its rows
// are judgmentStatesLockSQL's (scanQualityStates).
var judgmentStateLockOneSQL = compileNamed(`WITH locked AS (
	SELECT ` + qualityStateColumns + ` FROM docket_pool_contributors
	WHERE pool_id = @pool AND contributor_id = @id FOR UPDATE
), made AS (
	INSERT INTO docket_pool_contributors (pool_id, contributor_id, updated_at)
	SELECT @pool::uuid, @id::uuid, @now::timestamptz
	WHERE NOT EXISTS (SELECT 1 FROM locked)
		AND EXISTS (SELECT 1 FROM docket_pools WHERE id = @pool)
		AND EXISTS (SELECT 1 FROM docket_contributors k WHERE k.id = @id)
		AND EXISTS (SELECT 1 FROM docket_assignments a WHERE a.id = @assignment AND a.contributor_id = @id
			AND a.pool_id = @pool AND a.` + assignmentActive + ` AND a.expires_at >= @now)
	ON CONFLICT (pool_id, contributor_id) DO NOTHING
	RETURNING ` + qualityStateColumns + `
)
SELECT ` + qualityStateColumns + `, false FROM locked
UNION ALL
SELECT ` + qualityStateColumns + `, true FROM made`)

// scanQualityStates reads judgmentStatesLockSQL's rows: the states by
// contributor, and the contributors whose state it made.
func scanQualityStates(rows pgx.Rows) (states map[uuid.UUID]*store.QualityState, made map[uuid.UUID]bool, err error) {
	defer rows.Close()
	states = map[uuid.UUID]*store.QualityState{}
	for rows.Next() {
		var isNew bool
		st, err := scanQualityState(madeScanner{rows, &isNew})
		if err != nil {
			return nil, nil, err
		}
		states[st.ContributorID] = st
		if isNew {
			if made == nil {
				made = map[uuid.UUID]bool{}
			}
			made[st.ContributorID] = true
		}
	}
	return states, made, rows.Err()
}

// madeScanner scans a quality state row followed by its made column.
type madeScanner struct {
	r    rowScanner
	made *bool
}

func (m madeScanner) Scan(dest ...any) error { return m.r.Scan(append(dest, m.made)...) }

// judgmentRunsLockSQL locks runs @runs and the runs of units @units, in
// run order (none for a unit of no run, or a run gone).
var judgmentRunsLockSQL = compileNamed(`SELECT id FROM docket_runs
	WHERE id = ANY(@runs::uuid[]) OR id IN (SELECT run_id FROM docket_units WHERE id = ANY(@units::uuid[]))
	ORDER BY id FOR UPDATE`)

// judgmentInsertBatchSQL is the intake of a batch's judgments in one
// statement: for each judgment (the arrays' elements, in the batch's order:
// by unit, then assignment), what judgmentInsertPipedSQL does for it alone,
// and it returns, by the judgment's place in the arrays (ord), what that
// statement would have returned had the judgments run one after another in
// that order; one counter shard (@shard) moves by the judgments it stored.
// Each judgment has its own time (@now), as its own statement had; a unit
// is updated at its last judgment's.
//
//   - a: each assignment (ACTIVE, the contributor's, not expired, its
//     contributor with a quality state in the pool) becomes SUBMITTED; a
//     judgment whose assignment does not qualify changes nothing here or
//     after (every later part reaches its rows through a).
//   - l: the units of those assignments, locked in unit order (ORDER BY
//     under FOR UPDATE locks in the sorted order), after every assignment
//     of the batch (l reads a), before any is updated: the batch locks
//     assignments then units, each kind in one global order (the header's
//     lock order), whatever plan the update gets; with each unit, how many
//     of the batch's judgments it counts (n).
//   - u: each unit counts its n judgments at once (one row is updated once
//     per statement). Its row is locked, so its state is the latest
//     committed, as a single statement's.
//   - ja: each judgment's count is the one it would have seen alone: the
//     unit's count before the batch plus its rank among the unit's
//     judgments in the batch's order (the first of a unit judged twice
//     sees c+1, the second c+2; the last the count u left).
//   - j, o: the judgments, and one judgment.received per judgment with
//     that count, inserted in the batch's order.
//   - c: the pool's counter shard, by the judgments stored (none: no
//     update), last, as a single judgment's statement moves it.
//
// Every array is passed as (SELECT @x) so the planner assumes a handful
// of rows and reaches each assignment through its primary key from the
// unnest, in the arrays' order (as finishSQL; TestTakePlan).
var judgmentInsertBatchSQL = compileNamed(`
WITH i AS (
	SELECT * FROM unnest((SELECT @ids::uuid[]), (SELECT @assignments::uuid[]), (SELECT @contributors::uuid[]),
		(SELECT @data::text[]), (SELECT @now::timestamptz[])) WITH ORDINALITY
		AS i(id, assignment_id, contributor_id, data, now, ord)
),
a AS (
	UPDATE docket_assignments s SET state = 'SUBMITTED', finished_at = i.now
	FROM i
	WHERE s.id = i.assignment_id AND s.contributor_id = i.contributor_id AND s.` + assignmentActive + `
		AND s.expires_at >= i.now
		AND EXISTS (SELECT 1 FROM docket_pool_contributors pc
			WHERE pc.pool_id = s.pool_id AND pc.contributor_id = i.contributor_id)
	RETURNING s.id, s.unit_id, s.pool_id, s.contributor_id, s.started_at, i.id AS judgment_id, i.data, i.now, i.ord
),
l AS (
	SELECT u.id, n.n, n.now FROM docket_units u
	JOIN (SELECT unit_id, count(*) AS n, (array_agg(now ORDER BY ord DESC))[1] AS now FROM a GROUP BY unit_id) n
		ON n.unit_id = u.id
	ORDER BY u.id FOR UPDATE OF u
),
u AS (
	UPDATE docket_units u SET judgment_count = u.judgment_count + l.n, updated_at = l.now
	FROM l WHERE u.id = l.id
	RETURNING u.id, u.run_id, u.state, u.golden, u.judgment_count, u.judgments_per_unit, l.n
),
ja AS (
	SELECT a.*, u.run_id, u.state, u.golden, u.judgments_per_unit,
		(u.judgment_count - u.n + row_number() OVER (PARTITION BY a.unit_id ORDER BY a.ord))::integer AS judgment_count
	FROM a JOIN u ON u.id = a.unit_id
),
j AS (
	INSERT INTO docket_judgments (id, assignment_id, unit_id, pool_id, contributor_id, data, trust, golden,
		started_at, submitted_at)
	SELECT ja.judgment_id, ja.id, ja.unit_id, ja.pool_id, ja.contributor_id, ja.data::jsonb,
		(SELECT pc.trust FROM docket_pool_contributors pc
			WHERE pc.pool_id = ja.pool_id AND pc.contributor_id = ja.contributor_id),
		ja.golden, ja.started_at, ja.now
	FROM ja ORDER BY ja.ord
	RETURNING *
),
o AS (
	INSERT INTO docket_outbox (event_type, data, created_at)
	SELECT 'judgment.received', json_build_object('judgmentId', j.id, 'assignmentId', j.assignment_id,
		'unitId', j.unit_id, 'poolId', j.pool_id, 'contributorId', j.contributor_id, 'golden', j.golden,
		'judgmentCount', ja.judgment_count, 'judgmentsPerUnit', ja.judgments_per_unit), ja.now
	FROM j JOIN ja ON ja.judgment_id = j.id ORDER BY ja.ord
),
c AS (
	UPDATE docket_pool_counters pc SET judgments = pc.judgments + n.n, active_assignments = pc.active_assignments - n.n
	FROM (SELECT count(*) AS n FROM j) n WHERE pc.pool_id = @pool AND pc.shard = @shard AND n.n > 0
)
SELECT ja.ord, j.id, j.assignment_id, j.unit_id, j.pool_id, j.contributor_id, j.data, j.trust, j.golden, j.tainted,
	j.started_at, j.submitted_at, ja.run_id, ja.state, ja.judgment_count, ja.judgments_per_unit
FROM j JOIN ja ON ja.judgment_id = j.id ORDER BY ja.ord`)

// judgmentsReachedSQL lists, newest first by unit, the judgments of those
// of units @units that are regular, JUDGABLE and at or over their target:
// what a judgment that brought its unit to its target finalizes it with
// (JudgmentBegun.UnitJudgments), read with the batch's statements, after
// them, instead of in that judgment's fn.
//
// @units is read through a scalar subquery — ANY((SELECT @units::uuid[])::uuid[]),
// not ANY(@units::uuid[]); the cast keeps it an array, not ANY over a
// subquery's rows — so that no plan knows how many units there are. A
// custom plan that saw fewer than ten cost less than the generic one
// (planned for ten), and under plan_cache_mode auto PostgreSQL planned
// the statement anew at every small batch, about a third of its
// executions in the crowd benchmark; now it runs on the connection's
// cached generic plan after its first five (TestBatchPlansCached;
// docs/benchmarks.md, "Seventh round: PostgreSQL's executor per
// judgment"). The locks of the quality states and runs keep a plain
// array: through a subquery the benchmark planned the quality states'
// at every execution, where with the plain array it ran on its generic
// plan in the benchmark's pool of 500 states (in a pool of thousands it
// is planned at every execution either way; the judgment alone sends a
// scalar statement instead: TestBatchStateLockPlansCached).
var judgmentsReachedSQL = compileNamed(`SELECT ` + judgmentColumns + ` FROM docket_judgments
	WHERE unit_id IN (SELECT id FROM docket_units WHERE id = ANY((SELECT @units::uuid[])::uuid[]) AND state = 'JUDGABLE' AND NOT golden
		AND judgment_count >= judgments_per_unit)
	ORDER BY unit_id, id DESC`)

// judgmentInTxGrouped is JudgmentInTx in a batch with the pool's
// concurrent judgments; errGroupAlone when it must run alone.
func (s *Store) judgmentInTxGrouped(ctx context.Context, p *store.JudgmentInTxParams, fn func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error) error {
	_, err := s.judges.do(s, judgeSpec, ctx, &judgeQueued{pool: p.PoolID, c: judgeCall{p: p, fn: fn}})
	return err
}

// errBatchRollBack: the batch rolls back and each judgment runs alone.
var errBatchRollBack = errors.New("the batch rolls back")

// rollBack is err, which rolls its batch back before COMMIT: nothing of
// the batch is written, so each judgment runs alone.
func rollBack(err error) error { return fmt.Errorf("%w: %w", errBatchRollBack, err) }

// judgeSend sends one batch of judgments of one pool and answers each.
func (s *Store) judgeSend(ctx context.Context, batch []*judgeQueued) {
	// A fn runs on the leader's goroutine, whose own judgment may not be
	// in this batch: a panic must not go on there (the leader would leave
	// its judgment queued, and the pool's lead with it). The judgment whose
	// fn panicked is answered the panic, which goes on on its own
	// goroutine (crowd_group.go's do); the batch rolled back, so the others
	// run alone. A panic outside any fn is every judgment's.
	answered, running := false, -1
	defer func() {
		if r := recover(); r != nil {
			if answered {
				panic(r)
			}
			for i, c := range batch {
				if running < 0 || running == i {
					c.done <- groupAnswer[struct{}]{panicked: r}
				} else {
					c.done <- groupAnswer[struct{}]{alone: true}
				}
			}
		}
	}()
	if len(batch) == 1 {
		// Nothing to combine: the judgment's own transaction, with its
		// own context (it is the only one waiting for it).
		c := batch[0]
		err := s.judgmentInTxPiped(c.ctx, c.c.p, c.c.fn)
		answered = true
		c.done <- groupAnswer[struct{}]{err: err}
		return
	}
	errs, err := s.judgeBatch(ctx, batch, &running)
	answered = true
	for i, c := range batch {
		c.done <- judgeAnswer(errs[i], err)
	}
}

// judgeAnswer is a batched judgment's answer given its own error (own)
// and the batch's outcome (err, judgeBatch's). Only a PostgreSQL ERROR at
// COMMIT rolled the batch back (as in the group take): a FATAL, like a
// broken connection, leaves the outcome unknown, and is the answer.
func judgeAnswer(own, err error) groupAnswer[struct{}] {
	var pgErr *pgconn.PgError
	switch {
	case err == nil || own != nil:
		return groupAnswer[struct{}]{err: own}
	case errors.Is(err, errBatchRollBack) || errors.As(err, &pgErr) && pgErr.Severity == "ERROR":
		return groupAnswer[struct{}]{alone: true}
	default:
		return groupAnswer[struct{}]{err: err}
	}
}

// judgeBatch runs a batch in one transaction: errs[i] is batch[i]'s own
// answer when it is not the batch's (a judgment answered before the fns:
// errNoQualityState, a refusal, a conflict); err is the batch's outcome
// for the others — nil (committed), errBatchRollBack or a PostgreSQL
// ERROR (rolled back: they run alone), or any other error of COMMIT's
// (the outcome unknown: their answer). Before COMMIT is sent every error
// is the batch's rolling back. *running is the index in batch of the
// judgment whose fn runs, -1 between fns.
func (s *Store) judgeBatch(ctx context.Context, batch []*judgeQueued, running *int) (errs []error, err error) {
	errs = make([]error, len(batch))
	// The statements' order: by unit, then by assignment.
	order := make([]int, len(batch))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		pa, pb := batch[a].c.p, batch[b].c.p
		if c := bytes.Compare(pa.UnitID[:], pb.UnitID[:]); c != 0 {
			return c
		}
		return bytes.Compare(pa.Insert.AssignmentID[:], pb.Insert.AssignmentID[:])
	})
	pool := batch[0].pool
	shardN := rand.IntN(poolShards)
	ctx = context.WithValue(ctx, txShardKey{}, shardN)
	var (
		contributors, stateAssignments, runs, units, judged []uuid.UUID
		stateNows                                           []time.Time
	)
	for _, i := range order {
		p := batch[i].c.p
		contributors = append(contributors, p.Insert.ContributorID)
		stateAssignments = append(stateAssignments, p.Insert.AssignmentID)
		stateNows = append(stateNows, dbTime(p.Insert.Now))
		if len(judged) == 0 || judged[len(judged)-1] != p.UnitID {
			judged = append(judged, p.UnitID)
		}
		if p.RunID != uuid.Nil {
			runs = append(runs, p.RunID)
		} else if p.RunOfUnit != uuid.Nil {
			units = append(units, p.RunOfUnit)
		}
	}
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return errs, rollBack(fmt.Errorf("begin transaction: %w", err)) // nothing sent: each runs alone
	}
	defer pc.Release() // a connection left in a transaction is closed, not reused
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(judgmentStatesLockSQL.sql, judgmentStatesLockSQL.args(pgx.NamedArgs{"pool": pool, "ids": contributors, "nows": stateNows,
		"assignments": stateAssignments})...)
	lockRuns := len(runs) > 0 || len(units) > 0
	if lockRuns {
		b.Queue(judgmentRunsLockSQL.sql, judgmentRunsLockSQL.args(pgx.NamedArgs{"runs": runs, "units": units})...)
	}
	inserts := make([]store.JudgmentInsertParams, len(batch))
	var (
		insIDs      = make(array[pgtype.UUID], len(order))
		assignments = make(array[pgtype.UUID], len(order))
		insContribs = make(array[pgtype.UUID], len(order))
		data        = make(array[pgtype.Text], len(order))
		nows        = make(array[pgtype.Timestamptz], len(order))
	)
	for k, i := range order {
		ins := batch[i].c.p.Insert
		ins.Trust = nil // the statement reads the locked state's
		inserts[i] = ins
		insIDs[k] = pgtype.UUID{Bytes: ins.ID, Valid: true}
		assignments[k] = pgtype.UUID{Bytes: ins.AssignmentID, Valid: true}
		insContribs[k] = pgtype.UUID{Bytes: ins.ContributorID, Valid: true}
		data[k] = pgtype.Text{String: string(ins.Data), Valid: true}
		nows[k] = pgtype.Timestamptz{Time: dbTime(ins.Now), Valid: true}
	}
	b.Queue(judgmentInsertBatchSQL.sql, judgmentInsertBatchSQL.args(pgx.NamedArgs{"ids": insIDs,
		"assignments": assignments, "contributors": insContribs, "data": data, "now": nows,
		"pool": pool, "shard": shardN})...)
	b.Queue(judgmentsReachedSQL.sql, judgmentsReachedSQL.args(pgx.NamedArgs{"units": judged})...)
	br := pc.SendBatch(ctx, b)
	ptx := br.Tx()
	defer func() { _ = ptx.Rollback(context.WithoutCancel(ctx)) }()
	begun, made, err := readJudgeBatch(br, lockRuns, batch, order)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return errs, rollBack(fmt.Errorf("judgments of pool %s: %w", pool, err))
	}
	// Those answered before any fn: no state yet, or nothing inserted.
	for _, i := range order {
		bg := begun[i]
		if bg.State == nil {
			if bg.Inserted != nil {
				return errs, errBatchRollBack // a state made meanwhile: its lock was not taken
			}
			errs[i] = errNoQualityState
			continue
		}
		if bg.Inserted != nil {
			continue
		}
		if made[batch[i].c.p.Insert.ContributorID] {
			// A state made for a judgment that wrote nothing (refused):
			// alone, it is answered as before, and makes no state.
			return errs, errBatchRollBack
		}
		bg.Inserted, err = judgmentNotInserted(ctx, ptx, &inserts[i])
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) || ctx.Err() != nil {
			return errs, rollBack(err) // the transaction is aborted
		}
		errs[i] = err // a refusal or a conflict: it wrote nothing
	}
	// What the batch's statements left each unit at: the last statement
	// of the unit that inserted (the statements only count; each returns
	// the count after itself).
	left := map[uuid.UUID]unitLeft{}
	for _, i := range order {
		if errs[i] == nil && begun[i].Inserted.Created {
			u := begun[i].Inserted.Unit
			left[u.ID] = unitLeft{string(u.State), u.JudgmentCount, u.JudgmentsPerUnit}
		}
	}
	// The fns, in the statements' order.
	counted := &countingTx{Tx: ptx}
	// A fn that ran a statement may have changed its own unit (finalized,
	// retargeted it) and, when the unit is of a run, any unit: finalizing
	// it may end its run and cancel the run's other units (workflow's
	// cancelNotStarted), or move a parent run. Before the next fn, the
	// units of the later judgments it may have changed are read again, in
	// one statement: every later one after a fn of a unit of a run
	// (wroteRun), else those of the units such fns judged (wroteUnits). A
	// unit of no run is changed by nothing but its own judgments' fns
	// (quality control's flag and repair run after the commit).
	//
	// The judgments read for a judgment that brought its unit to its
	// target (UnitJudgments) were read after all the batch's statements,
	// as its fn would read them had no fn run before it; they are dropped
	// (its fn reads them itself) once an earlier fn that may have changed
	// them ran any statement: by the same rule, one of a unit of a run, or
	// one of the same unit (staleRun, staleUnits: since the batch began).
	var (
		wroteRun, staleRun     bool
		wroteUnits, staleUnits map[uuid.UUID]bool
	)
	deadline, bounded := ctx.Deadline()
	for pos, i := range order {
		if errs[i] != nil {
			continue
		}
		bg := begun[i]
		if wroteRun || wroteUnits != nil {
			only := wroteUnits
			if wroteRun {
				only = nil
			}
			if err := checkUnitsLeft(ctx, counted, left, order[pos:], errs, begun, only); err != nil {
				return errs, err
			}
			wroteRun, wroteUnits = false, nil
		}
		if bg.UnitJudgments != nil && (staleRun || staleUnits[bg.Inserted.Unit.ID]) {
			bg.UnitJudgments = nil
		}
		// The judgment's own context (its values), bounded by the batch.
		fctx, cancel := context.WithoutCancel(batch[i].ctx), context.CancelFunc(func() {})
		if bounded {
			fctx, cancel = context.WithDeadline(fctx, deadline)
		}
		fctx = context.WithValue(fctx, txShardKey{}, shardN)
		before := counted.n
		*running = i
		err := func() error {
			// Each fn its own Tx: one kept past its fn must not reach the
			// connection, in a later fn's turn or after.
			t := &storeTx{s: s, tx: counted}
			defer func() { t.tx = nil }()
			return batch[i].c.fn(fctx, t, bg)
		}()
		*running = -1
		cancel()
		if err != nil {
			return errs, errBatchRollBack
		}
		if counted.err != nil {
			return errs, rollBack(counted.err) // a queued finalization failed
		}
		if counted.n != before {
			if u := bg.Inserted.Unit; u.RunID != uuid.Nil {
				wroteRun, staleRun = true, true
			} else {
				if wroteUnits == nil {
					wroteUnits = map[uuid.UUID]bool{}
				}
				if staleUnits == nil {
					staleUnits = map[uuid.UUID]bool{}
				}
				wroteUnits[u.ID], staleUnits[u.ID] = true, true
			}
		}
	}
	// The fns' finalizations still queued, then COMMIT.
	if err := counted.flush(ctx); err != nil {
		return errs, rollBack(err)
	}
	if err := ptx.Commit(ctx); err != nil {
		return errs, fmt.Errorf("commit transaction: %w", err)
	}
	return errs, nil
}

// unitLeft is what a batch's statements left a unit at.
type unitLeft struct {
	state        string
	count, limit int
}

// checkUnitsLeft reads again the units of the judgments order names (those
// answered before the fns aside, those that inserted nothing, and, when
// only is not nil, those of units not in only) and rolls the batch back
// when one is no longer what the batch's statements left it at (left): an
// earlier fn changed it. Nothing to read is no statement.
func checkUnitsLeft(ctx context.Context, tx pgx.Tx, left map[uuid.UUID]unitLeft, order []int, errs []error, begun []*store.JudgmentBegun, only map[uuid.UUID]bool) error {
	var ids []uuid.UUID
	for _, i := range order {
		if errs[i] == nil && begun[i].Inserted.Created {
			if id := begun[i].Inserted.Unit.ID; (only == nil || only[id]) && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT id, state, judgment_count, judgments_per_unit FROM docket_units WHERE id = ANY($1)`, ids)
	if err != nil {
		return rollBack(err)
	}
	n := 0
	for rows.Next() {
		var (
			id  uuid.UUID
			now unitLeft
		)
		if err := rows.Scan(&id, &now.state, &now.count, &now.limit); err != nil {
			rows.Close()
			return rollBack(err)
		}
		if now != left[id] {
			rows.Close()
			return errBatchRollBack // an earlier fn changed the unit
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return rollBack(err)
	}
	if n != len(ids) {
		return errBatchRollBack // a unit gone
	}
	return nil
}

// readJudgeBatch reads a batch's pipeline: what each judgment's first
// statements did, by its index in batch (State nil: no quality state),
// and the contributors whose state the batch made.
func readJudgeBatch(br pgx.BatchResults, lockRuns bool, batch []*judgeQueued, order []int) (begun []*store.JudgmentBegun, made map[uuid.UUID]bool, err error) {
	if _, err := br.Exec(); err != nil {
		return nil, nil, fmt.Errorf("begin transaction: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("lock quality states: %w", err)
	}
	states, made, err := scanQualityStates(rows)
	if err != nil {
		return nil, nil, fmt.Errorf("lock quality states: %w", err)
	}
	if lockRuns {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, fmt.Errorf("lock runs: %w", err)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("lock runs: %w", err)
		}
	}
	begun = make([]*store.JudgmentBegun, len(batch))
	for _, i := range order {
		begun[i] = &store.JudgmentBegun{State: states[batch[i].c.p.Insert.ContributorID]}
	}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("insert judgments: %w", err)
	}
	for rows.Next() {
		var ord int
		ins, err := scanJudgmentInserted(rows, &ord)
		if err == nil && (ord < 1 || ord > len(order) || begun[order[ord-1]].Inserted != nil) {
			err = fmt.Errorf("row %d of %d judgments", ord, len(order))
		}
		if err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("insert judgments: %w", err)
		}
		begun[order[ord-1]].Inserted = ins
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("insert judgments: %w", err)
	}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("list judgments: %w", err)
	}
	reached, err := collect(rows, scanJudgment)
	if err != nil {
		return nil, nil, fmt.Errorf("list judgments: %w", err)
	}
	for len(reached) > 0 {
		u := reached[0].UnitID
		n := 1
		for n < len(reached) && reached[n].UnitID == u {
			n++
		}
		for _, i := range order {
			if ins := begun[i].Inserted; ins != nil && ins.Created && ins.Unit.ID == u && ins.Unit.TargetReached() {
				begun[i].UnitJudgments = slices.Clip(reached[:n])
			}
		}
		reached = reached[n:]
	}
	return begun, made, nil
}

// countingTx is a judgment batch's pgx.Tx: it counts the statements sent
// through it, and holds the fns' queued finalizations (UnitFinalizeLater),
// which it sends in one round trip before any other statement of the
// batch's transaction and before its COMMIT (judgeBatch's flush), in the
// order they were queued: a later statement sees them as it would have
// had each gone at once. The first to fail fails the batch (err): the
// transaction is aborted, and the batch rolls back. What goes through
// Conn() (the COPYs of unit and job inserts) is neither flushed before
// nor counted: the store's methods that COPY send a statement through
// the Tx first (unitInsertMany's pool lock; a run's step completion
// follows its unit's own UnitFinalize), which flushes.
type countingTx struct {
	pgx.Tx
	n      int
	queued []queuedFinalize
	err    error
}

// queuedFinalize is one queued UnitFinalizeLater.
type queuedFinalize struct {
	id   uuid.UUID
	args pgx.NamedArgs
	done func(*crowd.Unit)
}

// queueFinalize queues p's finalization (a statement of the fn's).
func (t *countingTx) queueFinalize(ctx context.Context, p *store.UnitFinalizeParams, done func(*crowd.Unit)) error {
	args, err := unitFinalizeArgs(ctx, p)
	if err != nil {
		return err
	}
	t.n++
	t.queued = append(t.queued, queuedFinalize{id: p.ID, args: args, done: done})
	return nil
}

// flush sends the queued finalizations, one round trip for all, and
// gives each its unit; the batch's error when one failed (or one before).
func (t *countingTx) flush(ctx context.Context) error {
	if t.err != nil || len(t.queued) == 0 {
		return t.err
	}
	q := t.queued
	t.queued = nil
	b := &pgx.Batch{}
	for _, f := range q {
		b.Queue(unitFinalizeStmt.sql, unitFinalizeStmt.args(f.args)...)
	}
	br := t.Tx.SendBatch(ctx, b)
	units := make([]*crowd.Unit, len(q))
	for i, f := range q {
		u, err := scanUnit(br.QueryRow())
		if err != nil {
			_ = br.Close()
			// %v: the batch rolls back whatever a later fn makes of this
			// (another unit's no rows must not read as its own row's);
			// alone, its fn is told why
			t.err = fmt.Errorf("finalize unit %s: %v", f.id, err)
			return t.err
		}
		units[i] = u
	}
	if err := br.Close(); err != nil {
		t.err = fmt.Errorf("finalize units: %w", err)
		return t.err
	}
	// Only once all of them ran: a failed one rolls the others back.
	for i, f := range q {
		f.done(units[i])
	}
	return nil
}

func (t *countingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t.n++
	if err := t.flush(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.Tx.Exec(ctx, sql, args...)
}

func (t *countingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	t.n++
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t *countingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	t.n++
	if err := t.flush(ctx); err != nil {
		return errRow{err}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

func (t *countingTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	t.n++
	// A failed flush (an error, or a refused finalization) rolls the
	// batch back before COMMIT whatever b does: t.err is checked after
	// every fn.
	_ = t.flush(ctx)
	return t.Tx.SendBatch(ctx, b)
}

func (t *countingTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	t.n++
	if err := t.flush(ctx); err != nil {
		return 0, err
	}
	return t.Tx.CopyFrom(ctx, table, columns, src)
}

// errRow is a pgx.Row whose statement was not sent: err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
