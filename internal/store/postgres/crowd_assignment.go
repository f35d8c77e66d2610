package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

const assignmentColumns = `id, unit_id, pool_id, contributor_id, state, started_at, expires_at, heartbeat_at, finished_at`

func scanAssignment(r rowScanner) (*crowd.Assignment, error) {
	var (
		a        crowd.Assignment
		state    string
		finished *time.Time
	)
	if err := r.Scan(&a.ID, &a.UnitID, &a.PoolID, &a.ContributorID, &state, &a.StartedAt, &a.ExpiresAt,
		&a.HeartbeatAt, &finished); err != nil {
		return nil, err
	}
	a.State = crowd.AssignmentState(state)
	a.StartedAt = a.StartedAt.UTC()
	a.ExpiresAt = a.ExpiresAt.UTC()
	a.HeartbeatAt = a.HeartbeatAt.UTC()
	a.FinishedAt = utcOrZero(finished)
	return &a, nil
}

// AssignmentGet implements store.Store.
func (s *Store) AssignmentGet(ctx context.Context, id uuid.UUID) (*crowd.Assignment, error) {
	return assignmentGet(ctx, s.pool, id)
}

func assignmentGet(ctx context.Context, c conn, id uuid.UUID) (*crowd.Assignment, error) {
	a, err := scanAssignment(c.QueryRow(ctx, `SELECT `+assignmentColumns+` FROM docket_assignments WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("get assignment %s: %w", id, notFound(err))
	}
	return a, nil
}

// assignmentActive is "state = 'ACTIVE'" for a statement that changes
// one assignment by id, in words the planner cannot match to the partial
// index docket_assignments_active_expiry (the reaper's, WHERE state =
// 'ACTIVE'): with it, PostgreSQL may read the assignment through that
// index — every ACTIVE assignment not yet expired, plus the dead entries
// of those submitted since the last vacuum, each checked against the id —
// because a freshly vacuumed partial index looks empty and cheaper than
// the primary key. The CHECK on state makes the two the same.
const assignmentActive = `state NOT IN ('SUBMITTED', 'EXPIRED', 'RELEASED')`

// takeGuards are the CTEs of what a take requires of the pool and the
// contributor (pool, who); pickWhere reads them.
const takeGuards = `pool AS (
	SELECT skills, channels FROM docket_pools WHERE id = @pool AND status = 'OPEN'
),
who AS (
	SELECT 1 FROM docket_contributors k, pool p WHERE k.id = @contributor AND k.state = 'active'
		AND k.skills @> p.skills AND (cardinality(p.channels) = 0 OR k.channels && p.channels)
		AND NOT EXISTS (SELECT 1 FROM docket_pool_contributors pc
			WHERE pc.pool_id = @pool AND pc.contributor_id = @contributor AND pc.flagged)
)`

// takeSQL takes one slot of one unit in one statement: pick (one of the
// strategies' pick CTEs: an available unit, locked, skipping rows another
// taker holds), slots_taken + 1, the assignment, the pool's counter. The
// pool must be OPEN and the contributor active, holding every skill the
// pool requires and a channel of it (if it names any), and not flagged in
// the pool; %s is the pick.
const takeSQL = `
WITH ` + takeGuards + `,
pick AS (%s),
taken AS (
	UPDATE docket_units u SET slots_taken = u.slots_taken + 1, updated_at = @now
	FROM pick WHERE u.id = pick.id
	RETURNING u.*
),
a AS (
	INSERT INTO docket_assignments (id, unit_id, pool_id, contributor_id, state, started_at, expires_at, heartbeat_at, golden)
	SELECT @id, taken.id, @pool, @contributor, 'ACTIVE', @now, @expires, @now, taken.golden FROM taken
	RETURNING id
)` + takeCountCTE + `
SELECT ` + unitColumns + ` FROM taken`

// takeCountCTE is the take's count in its pool's counter shard; a batched
// take's statement goes without it (uncounted), and its batch counts all
// its takes at once (crowd_take_group.go).
const takeCountCTE = `,
c AS (
	UPDATE docket_pool_counters SET active_assignments = active_assignments + 1
	WHERE pool_id = @pool AND shard = @shard AND EXISTS (SELECT 1 FROM a)
)`

// uncounted is a take statement without its count.
func uncounted(tmpl string) string { return mustReplace(tmpl, takeCountCTE, "") }

// pickWhere is what every pick requires of a unit, but the golden or open
// condition.
//
// Whether the contributor had the unit is one index probe per unit the
// pick walks (usually one or two): OFFSET 0 keeps the NOT EXISTS a
// subplan, which PostgreSQL cannot turn into an anti-join. As a join,
// the planner was free to read the contributor's whole history instead —
// every assignment they ever had, a heap page each, materialized or
// merged by unit — and did whenever the statistics said the pool had few
// open units left (seen after an autovacuum analyze in the middle of a
// run: 36 buffers per take growing to 110 as the contributors' histories
// grew; a contributor with thousands of assignments would pay thousands).
const pickWhere = `u.pool_id = @pool AND EXISTS (SELECT 1 FROM pool) AND EXISTS (SELECT 1 FROM who)
	AND NOT EXISTS (SELECT 1 FROM docket_assignments x WHERE x.unit_id = u.id AND x.contributor_id = @contributor OFFSET 0)`

// The picks. ordered: the oldest available unit. random: the first by
// random key at or after @key, else (wrapping around) the first from the
// smallest key; coalesce runs the second scan only when the first found
// nothing, so this stays one statement. Its one row is NULL when both
// found nothing, which taken's join drops. (It was wrapped as "SELECT id
// FROM (SELECT coalesce(…) AS id) r WHERE id IS NOT NULL": PostgreSQL
// pulls r up and copies coalesce(…) into the WHERE, so every take ran
// each scan — index walk, anti-join probes, row locks — twice.)
// candidates: the first of @candidates still available. %[1]s is the
// golden or open condition.
var (
	takeOrderedSQL = fmt.Sprintf(takeSQL, `SELECT u.id FROM docket_units u WHERE `+pickWhere+` AND %[1]s
		ORDER BY u.id LIMIT 1 FOR UPDATE OF u SKIP LOCKED`)
	takeRandomSQL = fmt.Sprintf(takeSQL, `SELECT coalesce(
			(SELECT u.id FROM docket_units u WHERE `+pickWhere+` AND %[1]s AND u.pick_key >= @key
				ORDER BY u.pick_key LIMIT 1 FOR UPDATE OF u SKIP LOCKED),
			(SELECT u.id FROM docket_units u WHERE `+pickWhere+` AND %[1]s AND u.pick_key < @key
				ORDER BY u.pick_key LIMIT 1 FOR UPDATE OF u SKIP LOCKED)) AS id`)
	takeCandidatesSQL = fmt.Sprintf(takeSQL, `SELECT u.id FROM unnest(@candidates::uuid[]) WITH ORDINALITY AS cand(id, n)
		JOIN docket_units u ON u.id = cand.id WHERE `+pickWhere+` AND %[1]s
		ORDER BY cand.n LIMIT 1 FOR UPDATE OF u SKIP LOCKED`)
	// takeWaitSQL is the ordered pick waiting for row locks instead of
	// skipping them: the take's last word when the others found nothing
	// but a unit is available (see AssignmentTake).
	takeWaitSQL = mustReplace(takeOrderedSQL, " SKIP LOCKED", "")
	// takeBatchSQL: the statement of a pick's first try in a batch
	// (crowd_take_group.go), by the pick's statement.
	takeBatchSQL = map[string]string{
		takeOrderedSQL:    uncounted(takeOrderedSQL),
		takeRandomSQL:     uncounted(takeRandomSQL),
		takeCandidatesSQL: uncounted(takeCandidatesSQL),
	}
)

// takeAvailableSQL: is a unit available to the contributor, locked or
// not (%s is the golden or open condition)?
const takeAvailableSQL = `WITH ` + takeGuards + `
SELECT EXISTS (SELECT 1 FROM docket_units u WHERE ` + pickWhere + ` AND %s)`

// takeKind is one take statement: a pick template and the golden or
// open condition.
type takeKind struct{ tmpl, cond string }

// takeStatements are the take statements, compiled once.
var takeStatements = func() map[takeKind]positional {
	m := map[takeKind]positional{}
	for _, tmpl := range []string{takeOrderedSQL, takeRandomSQL, takeCandidatesSQL, takeWaitSQL, takeAvailableSQL,
		takeBatchSQL[takeOrderedSQL], takeBatchSQL[takeRandomSQL], takeBatchSQL[takeCandidatesSQL]} {
		for _, cond := range []string{openUnit, pickGolden} {
			m[takeKind{tmpl, cond}] = compileNamed(fmt.Sprintf(tmpl, cond))
		}
	}
	return m
}()

// takeRetries bounds the re-runs of a take refused by the UNIQUE (unit,
// contributor) rule (see AssignmentTake).
const takeRetries = 5

// assignmentUnitContributorKey is the name PostgreSQL gave the UNIQUE
// (unit_id, contributor_id) rule of docket_assignments.
const assignmentUnitContributorKey = "docket_assignments_unit_id_contributor_id_key"

// pickGolden is the condition of a golden unit a take may pick: golden
// units have no slot limit.
const pickGolden = `u.state = 'JUDGABLE' AND u.golden`

// AssignmentTake implements store.Store.
func (s *Store) AssignmentTake(ctx context.Context, p *store.AssignmentTakeParams) (*crowd.Taken, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	cond := openUnit
	if p.Golden {
		cond = pickGolden
	}
	now := dbTime(p.Now)
	args := pgx.NamedArgs{
		"id": p.ID, "pool": p.PoolID, "contributor": p.ContributorID, "now": now,
		"expires": dbTime(p.Now.Add(p.Duration)), "shard": shard(ctx),
	}
	var tmpl string
	switch p.Strategy {
	case crowd.StrategyOrdered:
		tmpl = takeOrderedSQL
	case crowd.StrategyRandom:
		tmpl = takeRandomSQL
		args["key"] = p.RandomKey
		if p.RandomKey == 0 {
			args["key"] = rand.Int64()
		}
	case crowd.StrategyCandidates:
		tmpl = takeCandidatesSQL
		args["candidates"] = p.Candidates
	}
	stmt := takeStatements[takeKind{tmpl, cond}]
	sql, pargs := stmt.sql, stmt.args(args)
	// Two takes of one contributor at once can both pick one unit: the
	// second re-checks the unit row the first committed, but its NOT EXISTS
	// over the assignments still reads the statement's older snapshot, so
	// the UNIQUE (unit, contributor) rule refuses its insert. The statement
	// rolled back whole (no slot taken), and run again it sees the first
	// take's assignment and picks another unit.
	var (
		u   *crowd.Unit
		err error
	)
	//
	// SKIP LOCKED passes over the units other transactions hold at that
	// moment (another take, a judgment counting on its unit): near the end
	// of a pool that can be every unit still available to the contributor,
	// and "none left" would be false. So a take that found nothing asks
	// whether a unit is available at all, and if so takes again, waiting
	// for the locks this time (the ordered pick without SKIP LOCKED). Not
	// for StrategyCandidates: its "none" is about the candidates only, and
	// the client's last try is a random take, which waits.
	//
	// The first try goes in a batch with the takes of the pool that come
	// meanwhile (crowd_take_group.go); the tries after it, alone.
	batched := takeStatements[takeKind{takeBatchSQL[tmpl], cond}]
	for try := 0; ; try++ {
		err = errGroupAlone
		if try == 0 {
			u, err = s.takeBatched(ctx, &takeCall{pool: p.PoolID, c: takeStmt{id: p.ID, sql: batched.sql,
				args: batched.args(args), aloneSQL: sql, aloneArgs: pargs}})
		}
		if errors.Is(err, errGroupAlone) {
			u, err = scanUnit(s.pool.QueryRow(ctx, sql, pargs...))
		}
		if try < takeRetries && isConstraintViolation(err, assignmentUnitContributorKey) {
			continue
		}
		if try < takeRetries && errors.Is(err, pgx.ErrNoRows) && p.Strategy != crowd.StrategyCandidates {
			avail := takeStatements[takeKind{takeAvailableSQL, cond}]
			var found bool
			if err := s.pool.QueryRow(ctx, avail.sql, avail.args(args)...).Scan(&found); err != nil {
				return nil, fmt.Errorf("take assignment in pool %s: %w", p.PoolID, err)
			}
			if found {
				wait := takeStatements[takeKind{takeWaitSQL, cond}]
				sql, pargs = wait.sql, wait.args(args)
				continue
			}
		}
		break
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, takeRefused(ctx, s.pool, p)
	}
	if err != nil {
		return nil, fmt.Errorf("take assignment in pool %s: %w", p.PoolID, err)
	}
	return &crowd.Taken{
		Assignment: &crowd.Assignment{
			ID: p.ID, UnitID: u.ID, PoolID: p.PoolID, ContributorID: p.ContributorID, State: crowd.AssignmentActive,
			StartedAt: now, ExpiresAt: dbTime(p.Now.Add(p.Duration)), HeartbeatAt: now,
		},
		Unit: u,
	}, nil
}

// takeRefused explains a take that found nothing.
func takeRefused(ctx context.Context, c conn, p *store.AssignmentTakeParams) error {
	var (
		status, state  *string
		flagged, match *bool
	)
	err := c.QueryRow(ctx, `SELECT (SELECT status FROM docket_pools WHERE id = $1),
		(SELECT state FROM docket_contributors WHERE id = $2),
		(SELECT flagged FROM docket_pool_contributors WHERE pool_id = $1 AND contributor_id = $2),
		(SELECT k.skills @> p.skills AND (cardinality(p.channels) = 0 OR k.channels && p.channels)
			FROM docket_pools p, docket_contributors k WHERE p.id = $1 AND k.id = $2)`,
		p.PoolID, p.ContributorID).Scan(&status, &state, &flagged, &match)
	if err != nil {
		return fmt.Errorf("take assignment in pool %s: %w", p.PoolID, err)
	}
	return refusal(p, status, state, flagged, match != nil && *match)
}

// refusal is the error of a take that found nothing, from what the pool
// and the contributor are (nil: no such row; match: the contributor has
// the pool's skills and a channel of it).
func refusal(p *store.AssignmentTakeParams, status, state *string, flagged *bool, match bool) error {
	switch {
	case status == nil:
		return fmt.Errorf("take assignment: pool %s: %w", p.PoolID, store.ErrNotFound)
	case state == nil:
		return fmt.Errorf("take assignment: contributor %s: %w", p.ContributorID, store.ErrNotFound)
	case !match:
		return &crowd.NotEligibleError{ContributorID: p.ContributorID, PoolID: p.PoolID, Reason: crowd.ReasonMissingSkill}
	case crowd.PoolStatus(*status) != crowd.PoolOpen:
		return &crowd.PoolNotOpenError{PoolID: p.PoolID, Status: crowd.PoolStatus(*status)}
	case crowd.ContributorState(*state) != crowd.ContributorActive:
		return &crowd.NotEligibleError{ContributorID: p.ContributorID, PoolID: p.PoolID, Reason: "the contributor is " + *state}
	case flagged != nil && *flagged:
		return &crowd.NotEligibleError{ContributorID: p.ContributorID, PoolID: p.PoolID, Reason: "the contributor is flagged in the pool"}
	}
	return crowd.ErrNoUnit
}

// assignmentRefused explains a fenced change of an assignment that
// matched no row: ErrNotFound, or the *crowd.AssignmentError of what the
// assignment is.
func assignmentRefused(ctx context.Context, c conn, id, contributor uuid.UUID, now time.Time, expiredToo bool) error {
	a, err := assignmentGet(ctx, c, id)
	if err != nil {
		return err
	}
	if err := store.RefuseAssignment(a, contributor, now, expiredToo); err != nil {
		return err
	}
	return fmt.Errorf("assignment %s changed meanwhile; try again", id)
}

// AssignmentExtend implements store.Store.
func (s *Store) AssignmentExtend(ctx context.Context, p *store.AssignmentExtendParams) (*crowd.Assignment, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := dbTime(p.Now)
	a, err := scanAssignment(s.pool.QueryRow(ctx, `UPDATE docket_assignments
		SET expires_at = least(greatest(expires_at, $4), started_at + $5 * interval '1 microsecond'), heartbeat_at = $3
		WHERE id = $1 AND contributor_id = $2 AND `+assignmentActive+` AND expires_at >= $3
		RETURNING `+assignmentColumns, p.ID, p.ContributorID, now, dbTime(p.Now.Add(p.Duration)), crowd.AssignmentMaxHold.Microseconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, assignmentRefused(ctx, s.pool, p.ID, p.ContributorID, now, true)
	}
	if err != nil {
		return nil, fmt.Errorf("extend assignment %s: %w", p.ID, err)
	}
	return a, nil
}

// AssignmentRelease implements store.Store: the release, the slot and the
// counter in one statement.
func (s *Store) AssignmentRelease(ctx context.Context, p *store.AssignmentReleaseParams) (*crowd.Assignment, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := dbTime(p.Now)
	a, err := scanAssignment(s.pool.QueryRow(ctx, `
		WITH r AS (
			UPDATE docket_assignments SET state = 'RELEASED', finished_at = $3
			WHERE id = $1 AND contributor_id = $2 AND `+assignmentActive+`
			RETURNING *
		),
		u AS (
			UPDATE docket_units u SET slots_taken = u.slots_taken - 1, updated_at = $3
			FROM r WHERE u.id = r.unit_id
			RETURNING r.pool_id
		),
		c AS (
			-- FROM u: the unit is locked before the counter row (the
			-- unreferenced CTEs run after the main query, the later first)
			UPDATE docket_pool_counters pc SET active_assignments = pc.active_assignments - 1
			FROM u WHERE pc.pool_id = u.pool_id AND pc.shard = $4
		)
		SELECT `+assignmentColumns+` FROM r`, p.ID, p.ContributorID, now, shard(ctx)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, assignmentRefused(ctx, s.pool, p.ID, p.ContributorID, now, false)
	}
	if err != nil {
		return nil, fmt.Errorf("release assignment %s: %w", p.ID, err)
	}
	return a, nil
}

// The expiry reaper never waits for a lock, so it can be in no deadlock.
// Every other writer of human work locks in the order run → assignment →
// unit → pool counter row, but not all of them in that order alone: an
// advancement may hold a counter row (it added a unit to a pool) and then
// lock another unit of the pool (it cancels or pauses it), and a
// statement with several data-modifying parts has no order PostgreSQL
// promises. A reaper that waited — holding units while it waited for a
// counter row, as one statement did — could close a cycle (it did:
// TestReaperNeverWaits). So each batch takes its rows with SKIP LOCKED,
// in order: the lapsed ACTIVE assignments, their units, and for each
// pool one free counter shard; what it could not take (a unit or every
// shard of a pool held by another transaction) waits for the next batch
// or tick. Then one statement changes only rows it holds.

// expireLockAssignmentsSQL takes up to @max lapsed ACTIVE assignments.
const expireLockAssignmentsSQL = `
SELECT id, unit_id, pool_id FROM docket_assignments
WHERE state = 'ACTIVE' AND expires_at < @now
ORDER BY expires_at LIMIT @max
FOR UPDATE SKIP LOCKED`

// expireLockUnitsSQL takes the units of those assignments no other
// transaction holds.
const expireLockUnitsSQL = `
SELECT id FROM docket_units WHERE id = ANY(@units::uuid[]) ORDER BY id FOR UPDATE SKIP LOCKED`

// expireLockShardsSQL takes, for each pool, one counter shard no other
// transaction holds (none when all are held).
const expireLockShardsSQL = `
SELECT p.pool_id, s.shard FROM unnest(@pools::uuid[]) AS p(pool_id)
CROSS JOIN LATERAL (
	SELECT shard FROM docket_pool_counters c WHERE c.pool_id = p.pool_id
	ORDER BY shard LIMIT 1 FOR UPDATE SKIP LOCKED
) s`

// assignmentExpireSQL expires the assignments @ids, all of whose rows —
// the assignments, their units, the counter shards @pools/@shards — the
// transaction holds already: their slots, the pools' counters and one
// assignment.expired outbox row.
const assignmentExpireSQL = `
WITH e AS (
	UPDATE docket_assignments a SET state = 'EXPIRED', finished_at = @now
	WHERE a.id = ANY(@ids::uuid[]) AND a.state = 'ACTIVE'
	RETURNING a.id, a.unit_id, a.pool_id, a.contributor_id
),
u AS (
	UPDATE docket_units u SET slots_taken = u.slots_taken - x.n, updated_at = @now
	FROM (SELECT unit_id, count(*) AS n FROM e GROUP BY unit_id) x
	WHERE u.id = x.unit_id
),
c AS (
	UPDATE docket_pool_counters pc SET active_assignments = pc.active_assignments - x.n
	FROM (SELECT pool_id, count(*) AS n FROM e GROUP BY pool_id) x
	JOIN unnest(@pools::uuid[], @shards::int[]) AS sh(pool_id, shard) ON sh.pool_id = x.pool_id
	WHERE pc.pool_id = x.pool_id AND pc.shard = sh.shard
),
o AS (
	INSERT INTO docket_outbox (event_type, data, created_at)
	SELECT 'assignment.expired', json_build_object('assignments', json_agg(json_build_object(
		'assignmentId', id, 'unitId', unit_id, 'poolId', pool_id, 'contributorId', contributor_id))), @now
	FROM e HAVING count(*) > 0
)
SELECT count(*) FROM e`

// AssignmentExpire implements store.Store: one transaction of four
// statements, none of which waits for a lock (see above).
func (s *Store) AssignmentExpire(ctx context.Context, p *store.AssignmentExpireParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	now := dbTime(p.Now)
	var n int
	err := s.withTx(ctx, func(c pgx.Tx) error {
		type lapsed struct{ id, unit, pool uuid.UUID }
		rs, err := c.Query(ctx, expireLockAssignmentsSQL, pgx.NamedArgs{"now": now, "max": p.Max})
		if err != nil {
			return err
		}
		as, err := collect(rs, func(r rowScanner) (lapsed, error) {
			var l lapsed
			return l, r.Scan(&l.id, &l.unit, &l.pool)
		})
		if err != nil || len(as) == 0 {
			return err
		}
		units := make([]uuid.UUID, 0, len(as))
		for _, a := range as {
			units = append(units, a.unit)
		}
		rs, err = c.Query(ctx, expireLockUnitsSQL, pgx.NamedArgs{"units": units})
		if err != nil {
			return err
		}
		held, err := collect(rs, func(r rowScanner) (uuid.UUID, error) {
			var id uuid.UUID
			return id, r.Scan(&id)
		})
		if err != nil {
			return err
		}
		heldUnit := make(map[uuid.UUID]bool, len(held))
		for _, id := range held {
			heldUnit[id] = true
		}
		var pools []uuid.UUID
		seen := map[uuid.UUID]bool{}
		for _, a := range as {
			if heldUnit[a.unit] && !seen[a.pool] {
				seen[a.pool] = true
				pools = append(pools, a.pool)
			}
		}
		if len(pools) == 0 {
			return nil
		}
		rs, err = c.Query(ctx, expireLockShardsSQL, pgx.NamedArgs{"pools": pools})
		if err != nil {
			return err
		}
		type poolShard struct {
			pool  uuid.UUID
			shard int32
		}
		shards, err := collect(rs, func(r rowScanner) (poolShard, error) {
			var ps poolShard
			return ps, r.Scan(&ps.pool, &ps.shard)
		})
		if err != nil {
			return err
		}
		shardPools, shardNums := make([]uuid.UUID, len(shards)), make([]int32, len(shards))
		heldPool := map[uuid.UUID]bool{}
		for i, ps := range shards {
			shardPools[i], shardNums[i] = ps.pool, ps.shard
			heldPool[ps.pool] = true
		}
		var ids []uuid.UUID
		for _, a := range as {
			if heldUnit[a.unit] && heldPool[a.pool] {
				ids = append(ids, a.id)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		return c.QueryRow(ctx, assignmentExpireSQL, pgx.NamedArgs{
			"ids": ids, "pools": shardPools, "shards": shardNums, "now": now,
		}).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("expire assignments: %w", err)
	}
	return n, nil
}

// AssignmentHeartbeat implements store.Store.
func (s *Store) AssignmentHeartbeat(ctx context.Context, p *store.AssignmentHeartbeatParams) (*crowd.Assignment, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := dbTime(p.Now)
	a, err := scanAssignment(s.pool.QueryRow(ctx, `UPDATE docket_assignments SET heartbeat_at = $3
		WHERE id = $1 AND contributor_id = $2 AND `+assignmentActive+` AND expires_at >= $3
		RETURNING `+assignmentColumns, p.ID, p.ContributorID, now))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, assignmentRefused(ctx, s.pool, p.ID, p.ContributorID, now, true)
	}
	if err != nil {
		return nil, fmt.Errorf("heartbeat assignment %s: %w", p.ID, err)
	}
	return a, nil
}
