package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// CrowdRaceConfig sizes RunCrowdRace.
type CrowdRaceConfig struct {
	Units            int
	JudgmentsPerUnit int
	Contributors     int // goroutines, one contributor each
	// AbandonEvery: every AbandonEvery-th take of a contributor is
	// abandoned (taken for a second and never submitted), for the reaper
	// to expire.
	AbandonEvery int
	Timeout      time.Duration
	// Strategies the contributors use, in turn; nil: all three.
	Strategies []crowd.Strategy
}

// RunCrowdRace drives one pool of cfg.Units units × cfg.JudgmentsPerUnit
// judgments with cfg.Contributors concurrent contributors, each a
// goroutine looping take → judgment (a third of them per strategy), some
// abandoning assignments that a reaper goroutine expires meanwhile, until
// every slot is judged. It checks the outcome through the store (each unit
// judged exactly JudgmentsPerUnit times by as many contributors, the
// pool's counters) and returns the pool, for the backend's test to check
// the tables with SQL (CrowdRaceChecks).
func RunCrowdRace(t *testing.T, s store.Store, cfg CrowdRaceConfig) uuid.UUID {
	t.Helper()
	b := &bundle{ctx: t.Context(), s: s}
	p := b.pool(t, cfg.JudgmentsPerUnit)
	ps := make([]*store.UnitInsertParams, cfg.Units)
	for i := range ps {
		ps[i] = newUnit(i)
	}
	_, err := s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable, Units: ps, Now: base})
	require.NoError(t, err)
	want := cfg.Units * cfg.JudgmentsPerUnit

	ctx, cancel := context.WithTimeout(b.ctx, cfg.Timeout)
	defer cancel()
	var (
		judged, abandoned, expired, refused atomic.Int64
		wg                                  sync.WaitGroup
		errs                                = make(chan error, cfg.Contributors+1)
	)
	done := func() bool { return judged.Load() >= int64(want) }
	// The reaper: its now is past the abandoned assignments' second and
	// long before the others' hour.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done() && ctx.Err() == nil {
			n, err := s.AssignmentExpire(ctx, &store.AssignmentExpireParams{Now: base.Add(time.Minute), Max: 50})
			if err != nil {
				errs <- fmt.Errorf("reaper: %w", err)
				return
			}
			expired.Add(int64(n))
			if n == 0 {
				wait(ctx, time.Millisecond)
			}
		}
	}()
	start := time.Now()
	strategies := cfg.Strategies
	if len(strategies) == 0 {
		strategies = crowd.Strategies
	}
	perStrategy := make([]atomic.Int64, len(strategies))
	for i := range cfg.Contributors {
		c, err := s.ContributorCreate(b.ctx, &store.ContributorCreateParams{ID: newID(), ExternalID: fmt.Sprintf("race-%d-%s", i, uuid.NewString()),
			Skills: p.Skills, Channels: p.Channels, Now: base})
		require.NoError(t, err)
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			if err := raceContributor(ctx, s, p.ID, c.ID, strategies[k], cfg.AbandonEvery, done,
				&raceCounts{judged: &judged, abandoned: &abandoned, refused: &refused, byStrategy: &perStrategy[k]}); err != nil {
				errs <- fmt.Errorf("contributor %s (%s): %w", c.ID, strategies[k], err)
			}
		}(i % len(strategies))
	}
	wg.Wait()
	elapsed := time.Since(start)
	byStrategy := make([]int64, len(strategies))
	for k := range perStrategy {
		byStrategy[k] = perStrategy[k].Load()
	}
	t.Logf("%s %v: %d judgments (%v by strategy; %d abandoned assignments, %d expired; %d takes found no unit) by %d contributors in %v: %.0f judgments/s",
		s.Backend(), strategies, judged.Load(), byStrategy, abandoned.Load(), expired.Load(), refused.Load(), cfg.Contributors,
		elapsed.Round(time.Millisecond), float64(judged.Load())/elapsed.Seconds())
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, ctx.Err(), "the race did not finish: %d of %d judgments", judged.Load(), want)
	require.EqualValues(t, want, judged.Load(), "judgments accepted")
	// Every strategy raced the others (a race too small for that would
	// prove one strategy against itself).
	for k, n := range byStrategy {
		require.Positive(t, n, "no judgment through strategy %s", strategies[k])
	}
	if cfg.AbandonEvery > 0 {
		require.Positive(t, abandoned.Load(), "some assignments were abandoned")
		require.Equal(t, abandoned.Load(), expired.Load(), "the reaper expired every abandoned assignment")
	}

	// Through the store: every unit judged exactly JudgmentsPerUnit times
	// by as many contributors; the counters agree.
	pool, err := s.PoolGet(b.ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, crowd.PoolCounts{Judgable: cfg.Units, Judgments: want}, pool.Counts)
	units, err := s.UnitList(b.ctx, &store.UnitListParams{PoolID: p.ID})
	require.NoError(t, err)
	require.Len(t, units, cfg.Units)
	for _, u := range units {
		require.Equal(t, cfg.JudgmentsPerUnit, u.JudgmentCount, "unit %s", u.ID)
		require.Equal(t, cfg.JudgmentsPerUnit, u.SlotsTaken, "unit %s", u.ID)
	}
	js, err := s.JudgmentList(b.ctx, &store.JudgmentListParams{PoolID: p.ID})
	require.NoError(t, err)
	require.Len(t, js, want)
	perUnit := map[uuid.UUID]map[uuid.UUID]bool{}
	assignments := map[uuid.UUID]bool{}
	for _, j := range js {
		if perUnit[j.UnitID] == nil {
			perUnit[j.UnitID] = map[uuid.UUID]bool{}
		}
		require.False(t, perUnit[j.UnitID][j.ContributorID], "contributor %s judged unit %s twice", j.ContributorID, j.UnitID)
		perUnit[j.UnitID][j.ContributorID] = true
		require.False(t, assignments[j.AssignmentID], "two judgments through assignment %s", j.AssignmentID)
		assignments[j.AssignmentID] = true
	}
	require.Len(t, perUnit, cfg.Units)
	return p.ID
}

// raceCounts are what raceContributor counts: judgments accepted,
// assignments abandoned, takes that found no unit, and the judgments of
// the contributor's strategy.
type raceCounts struct {
	judged, abandoned, refused, byStrategy *atomic.Int64
}

// raceContributor loops take → judgment until every slot of the pool is
// judged.
func raceContributor(ctx context.Context, s store.Store, poolID, contributorID uuid.UUID, strategy crowd.Strategy,
	abandonEvery int, done func() bool, n *raceCounts) error {
	var cache []uuid.UUID
	for take := 1; !done(); take++ {
		if ctx.Err() != nil {
			return nil // RunCrowdRace reports the timeout
		}
		abandon := abandonEvery > 0 && take%abandonEvery == 0
		p := &store.AssignmentTakeParams{ID: newID(), PoolID: poolID, ContributorID: contributorID,
			Duration: time.Hour, Strategy: strategy, Now: base}
		if abandon {
			p.Duration = time.Second
		}
		if strategy == crowd.StrategyCandidates {
			if len(cache) == 0 {
				var err error
				cache, err = s.UnitListAvailable(ctx, &store.UnitListAvailableParams{PoolID: poolID, Limit: 16})
				if err != nil {
					return err
				}
				if len(cache) == 0 {
					wait(ctx, time.Millisecond)
					continue
				}
			}
			p.Candidates = cache
		}
		tk, err := s.AssignmentTake(ctx, p)
		if errors.Is(err, crowd.ErrNoUnit) {
			n.refused.Add(1)
			cache = nil // stale: refill
			wait(ctx, time.Millisecond)
			continue
		}
		if err != nil {
			return fmt.Errorf("take: %w", err)
		}
		if len(cache) > 0 {
			// Drop what was tried up to the unit taken.
			for i, id := range cache {
				if id == tk.Unit.ID {
					cache = cache[i+1:]
					break
				}
			}
		}
		if abandon {
			n.abandoned.Add(1)
			continue
		}
		// As JudgmentSubmit sends it (the unit known: on PostgreSQL the
		// pool's concurrent judgments share transactions).
		var ins *store.JudgmentInserted
		err = s.JudgmentInTx(ctx, &store.JudgmentInTxParams{PoolID: poolID, UnitID: tk.Unit.ID, RunOfUnit: tk.Unit.ID,
			Insert: store.JudgmentInsertParams{ID: newID(), AssignmentID: tk.Assignment.ID, ContributorID: contributorID,
				Data: []byte(`{"same":"yes"}`), Now: base.Add(time.Second)}},
			func(_ context.Context, _ store.Tx, begun *store.JudgmentBegun) error {
				ins = begun.Inserted
				return nil
			})
		if err != nil {
			return fmt.Errorf("judgment: %w", err)
		}
		if !ins.Created {
			return fmt.Errorf("judgment through a fresh assignment %s was a repeat", tk.Assignment.ID)
		}
		n.judged.Add(1)
		n.byStrategy.Add(1)
	}
	return nil
}

// wait pauses a moment between polls, returning early when ctx ends.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// CrowdRaceChecks are SQL queries over the tables, each counting
// violations of an invariant after RunCrowdRace on poolID: every one must
// count 0. The pool id is inlined (a uuid), so the queries run unchanged
// on both backends.
func CrowdRaceChecks(poolID uuid.UUID, judgmentsPerUnit int) map[string]string {
	pool := "'" + poolID.String() + "'"
	return map[string]string{
		"units without exactly the target of judgments": fmt.Sprintf(`SELECT count(*) FROM docket_units u
			WHERE u.pool_id = %s AND (u.judgment_count <> %d
				OR (SELECT count(*) FROM docket_judgments j WHERE j.unit_id = u.id) <> %d)`, pool, judgmentsPerUnit, judgmentsPerUnit),
		"units whose slots_taken is not their ACTIVE and SUBMITTED assignments": `SELECT count(*) FROM docket_units u
			WHERE u.pool_id = ` + pool + ` AND u.slots_taken <> (SELECT count(*) FROM docket_assignments a
				WHERE a.unit_id = u.id AND a.state IN ('ACTIVE', 'SUBMITTED'))`,
		"slots over-assigned": `SELECT count(*) FROM docket_units u WHERE u.pool_id = ` + pool + `
			AND (SELECT count(*) FROM docket_assignments a WHERE a.unit_id = u.id AND a.state IN ('ACTIVE', 'SUBMITTED')) > u.judgments_per_unit`,
		"contributors twice on one unit": `SELECT count(*) FROM (SELECT unit_id, contributor_id FROM docket_assignments
			WHERE pool_id = ` + pool + ` GROUP BY unit_id, contributor_id HAVING count(*) > 1) x`,
		"judgments not tied to one SUBMITTED assignment of their unit and contributor": `SELECT count(*) FROM docket_judgments j
			WHERE j.pool_id = ` + pool + ` AND NOT EXISTS (SELECT 1 FROM docket_assignments a WHERE a.id = j.assignment_id
				AND a.state = 'SUBMITTED' AND a.unit_id = j.unit_id AND a.contributor_id = j.contributor_id)`,
		"SUBMITTED assignments without a judgment": `SELECT count(*) FROM docket_assignments a
			WHERE a.pool_id = ` + pool + ` AND a.state = 'SUBMITTED'
				AND NOT EXISTS (SELECT 1 FROM docket_judgments j WHERE j.assignment_id = a.id)`,
		"ACTIVE assignments left": `SELECT count(*) FROM docket_assignments WHERE pool_id = ` + pool + ` AND state = 'ACTIVE'`,
		"counters that differ from the tables": `SELECT
			CASE WHEN (SELECT sum(judgments) FROM docket_pool_counters WHERE pool_id = ` + pool + `)
				= (SELECT count(*) FROM docket_judgments WHERE pool_id = ` + pool + `) THEN 0 ELSE 1 END
			+ CASE WHEN (SELECT sum(active_assignments) FROM docket_pool_counters WHERE pool_id = ` + pool + `)
				= (SELECT count(*) FROM docket_assignments WHERE pool_id = ` + pool + ` AND state = 'ACTIVE') THEN 0 ELSE 1 END
			+ CASE WHEN (SELECT sum(units_judgable) FROM docket_pool_counters WHERE pool_id = ` + pool + `)
				= (SELECT count(*) FROM docket_units WHERE pool_id = ` + pool + ` AND state = 'JUDGABLE' AND NOT golden) THEN 0 ELSE 1 END`,
		"no assignment expired (the reaper path was not exercised)": `SELECT CASE WHEN count(*) > 0 THEN 0 ELSE 1 END
			FROM docket_assignments WHERE pool_id = ` + pool + ` AND state = 'EXPIRED'`,
	}
}
