package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// takeParams asks for one assignment of pool for c, ordered, for 10
// minutes from base.
func takeParams(poolID, c uuid.UUID) *store.AssignmentTakeParams {
	return &store.AssignmentTakeParams{ID: newID(), PoolID: poolID, ContributorID: c, Duration: 10 * time.Minute,
		Strategy: crowd.StrategyOrdered, Now: base}
}

// take takes one assignment and checks what comes back.
func (b *bundle) take(t *testing.T, p *store.AssignmentTakeParams) *crowd.Taken {
	t.Helper()
	tk, err := b.s.AssignmentTake(b.ctx, p)
	require.NoError(t, err)
	require.Equal(t, p.ID, tk.Assignment.ID)
	require.Equal(t, tk.Unit.ID, tk.Assignment.UnitID)
	require.Equal(t, crowd.AssignmentActive, tk.Assignment.State)
	got, err := b.s.AssignmentGet(b.ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, tk.Assignment, got, "as returned and as read")
	return tk
}

func requireRefused(t *testing.T, err error, reason crowd.Refusal) {
	t.Helper()
	var ae *crowd.AssignmentError
	require.ErrorAs(t, err, &ae, "want *crowd.AssignmentError, got %T: %v", err, err)
	require.Equal(t, reason, ae.Reason, "%v", err)
}

func testAssignments(t *testing.T, open opener) {
	t.Run("JudgeAndFinalizeConcurrently", func(t *testing.T) {
		// Transactions that each store a judgment and finalize its unit —
		// two counting statements — run at once: none may fail (on
		// PostgreSQL each holds one counter row, so none deadlocks).
		t.Parallel()
		b := setup(t, open)
		const n = 400 // without one counter row per transaction, PostgreSQL deadlocked in most runs
		p := b.pool(t, 1)
		b.units(t, p.ID, n, crowd.UnitJudgable)
		taken := make([]*crowd.Taken, n)
		for i := range taken {
			taken[i] = b.take(t, takeParams(p.ID, b.contributor(t).ID))
		}
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for _, tk := range taken {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
					if _, err := tx.JudgmentInsert(ctx, &store.JudgmentInsertParams{ID: newID(), AssignmentID: tk.Assignment.ID,
						ContributorID: tk.Assignment.ContributorID, Data: json.RawMessage(`{"same":"yes"}`), Now: base}); err != nil {
						return err
					}
					_, err := tx.UnitFinalize(ctx, &store.UnitFinalizeParams{ID: tk.Unit.ID, Result: json.RawMessage(`{"same":"yes"}`), Now: base})
					return err
				})
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		c := b.counts(t, p.ID)
		require.Equal(t, n, c.Finalized)
		require.Equal(t, n, c.Judgments)
		require.Zero(t, c.ActiveAssignments)
	})

	t.Run("PoolListEligible", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		// pool makes an OPEN pool of one judgment per unit requiring
		// skills and channels, with n regular units.
		pool := func(skills, channels []string, priority int, age time.Duration, n int) *crowd.Pool {
			t.Helper()
			pp := b.poolParams(t, 1)
			pp.Skills, pp.Channels, pp.Priority, pp.Now = skills, channels, priority, base.Add(-age)
			p, _, err := b.s.PoolCreate(b.ctx, pp)
			require.NoError(t, err)
			if n > 0 {
				b.units(t, p.ID, n, crowd.UnitJudgable)
			}
			return p
		}
		who := func(skills, channels []string) *crowd.Contributor {
			t.Helper()
			c, err := b.s.ContributorCreate(b.ctx, &store.ContributorCreateParams{ID: newID(), ExternalID: "ext-" + uuid.NewString(),
				Skills: skills, Channels: channels, Now: base})
			require.NoError(t, err)
			return c
		}
		list := func(c uuid.UUID, limit int) []uuid.UUID {
			t.Helper()
			ps, err := b.s.PoolListEligible(b.ctx, &store.PoolListEligibleParams{ContributorID: c, Limit: limit})
			require.NoError(t, err)
			ids := make([]uuid.UUID, len(ps))
			for i, p := range ps {
				ids[i] = p.ID
				require.Equal(t, crowd.PoolOpen, p.Status)
				require.Positive(t, p.Counts.Judgable, "counters come with the pools")
			}
			return ids
		}
		// Sorted by priority, then age (oldest first).
		any0 := pool(nil, nil, 5, 0, 2)                          // no skill, no channel: anyone's
		en := pool([]string{"en"}, nil, 5, time.Hour, 1)         // older, same priority
		enFr := pool([]string{"en", "fr"}, nil, 5, 0, 1)         // both skills needed
		web := pool(nil, []string{"web", "app"}, 1, 0, 1)        // a channel in common needed
		urgent := pool([]string{"en"}, []string{"app"}, 0, 0, 1) // both
		flagged := pool(nil, nil, 5, 2*time.Hour, 1)             // flagged there
		paused := pool(nil, nil, 5, 0, 1)                        // not OPEN
		goldenOnly := pool(nil, nil, 5, 0, 0)                    // golden units are no work
		empty := pool(nil, nil, 5, 0, 0)                         // no unit
		_, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: goldenOnly.ID, State: crowd.UnitJudgable,
			Units: []*store.UnitInsertParams{newGolden(0)}, Now: base})
		require.NoError(t, err)
		_, err = b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: paused.ID, From: crowd.PoolOpen, To: crowd.PoolPaused, Now: base})
		require.NoError(t, err)
		_ = empty

		ada := who([]string{"en", "de"}, []string{"app"})
		bob := who([]string{"fr", "en"}, []string{"mail"})
		cy := who(nil, nil)
		_, err = b.s.PoolContributorPut(b.ctx, &store.PoolContributorPutParams{PoolID: flagged.ID, ContributorID: ada.ID,
			Flagged: true, FlagReason: "too fast", Now: base})
		require.NoError(t, err)

		require.Equal(t, []uuid.UUID{urgent.ID, web.ID, en.ID, any0.ID}, list(ada.ID, 100),
			"ada: no fr (enFr), flagged in one, a paused, an empty and a golden-only pool")
		require.Equal(t, []uuid.UUID{flagged.ID, en.ID, any0.ID, enFr.ID}, list(bob.ID, 100),
			"bob: no channel app or web; flagged nowhere; ties of priority and age by id")
		require.Equal(t, []uuid.UUID{flagged.ID, any0.ID}, list(cy.ID, 100), "no skill: only pools requiring none")
		require.Equal(t, []uuid.UUID{urgent.ID, web.ID}, list(ada.ID, 2), "cut at the limit, after sorting")

		// Units assigned to ada are no longer work for her; units with no
		// free slot are no work for anyone.
		b.take(t, takeParams(urgent.ID, ada.ID))
		b.take(t, takeParams(any0.ID, ada.ID))
		require.Equal(t, []uuid.UUID{web.ID, en.ID, any0.ID}, list(ada.ID, 100), "any0 has one unit she never had")
		b.take(t, takeParams(any0.ID, ada.ID))
		require.Equal(t, []uuid.UUID{web.ID, en.ID}, list(ada.ID, 100))
		require.Equal(t, []uuid.UUID{flagged.ID, en.ID, enFr.ID}, list(bob.ID, 100), "any0's two slots are taken")

		// A banned contributor gets none (only an active one gets work;
		// "flagged" can no longer be set: Contributors/Validate); an
		// unknown one none.
		banned := crowd.ContributorBanned
		_, err = b.s.ContributorUpdate(b.ctx, &store.ContributorUpdateParams{ID: bob.ID, State: &banned, Now: base})
		require.NoError(t, err)
		require.Empty(t, list(bob.ID, 100), "banned")
		require.Empty(t, list(newID(), 100))

		_, err = b.s.PoolListEligible(b.ctx, &store.PoolListEligibleParams{Limit: 0})
		requireFields(t, err, "contributorId", "limit")
		_, err = b.s.PoolListEligible(b.ctx, &store.PoolListEligibleParams{ContributorID: ada.ID, Limit: store.PoolListEligibleLimitMax + 1})
		requireFields(t, err, "limit")
	})
	t.Run("OneContributorTakesAtOnce", func(t *testing.T) {
		// A double click, a retry: takes of one contributor racing each
		// other each get a unit of their own or ErrNoUnit, never an error,
		// and no unit twice.
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		const units, takers, rounds = 40, 8, 5 // 120 slots for at most 80 takes
		b.units(t, p.ID, units, crowd.UnitJudgable)
		for _, strategy := range []crowd.Strategy{crowd.StrategyOrdered, crowd.StrategyRandom} {
			for round := 0; round < rounds; round++ {
				c := b.contributor(t)
				var (
					wg   sync.WaitGroup
					mu   sync.Mutex
					got  = map[uuid.UUID]int{}
					errs []error
				)
				for i := 0; i < takers; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						tp := takeParams(p.ID, c.ID)
						tp.Strategy = strategy
						tk, err := b.s.AssignmentTake(b.ctx, tp)
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil:
							got[tk.Unit.ID]++
						case !errors.Is(err, crowd.ErrNoUnit):
							errs = append(errs, err)
						}
					}()
				}
				wg.Wait()
				require.Empty(t, errs, "%s round %d", strategy, round)
				for u, n := range got {
					require.Equal(t, 1, n, "unit %s went twice to one contributor", u)
				}
			}
		}
	})

	t.Run("TakeBurst", func(t *testing.T) {
		// Many takes at once on one pool — every strategy, several takes
		// of one contributor at a time, some whose context ends before or
		// while they run — as PostgreSQL's group take combines them
		// (crowd_take_group.go). Each take either took a slot or failed
		// with ErrNoUnit or its context's error and left nothing behind;
		// no slot is over-assigned, no contributor twice on a unit, and
		// the counter, the units' slots and the assignments agree.
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		const units, contributors, each = 30, 40, 4 // 90 slots for 160 takes
		us := b.units(t, p.ID, units, crowd.UnitJudgable)
		candidates := make([]uuid.UUID, len(us))
		for i, u := range us {
			candidates[i] = u.ID
		}
		type outcome struct {
			p   *store.AssignmentTakeParams
			tk  *crowd.Taken
			err error
		}
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			outcomes []outcome
		)
		start := make(chan struct{})
		for i := range contributors {
			c := b.contributor(t)
			for j := range each {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tp := takeParams(p.ID, c.ID)
					tp.Strategy = crowd.Strategies[(i+j)%len(crowd.Strategies)]
					if tp.Strategy == crowd.StrategyCandidates {
						tp.Candidates = candidates[(i*7)%units:]
					}
					ctx := b.ctx
					switch (i*each + j) % 10 {
					case 3: // ended before the take
						c, cancel := context.WithCancel(ctx)
						cancel()
						ctx = c
					case 7: // ends while it queues or runs
						c, cancel := context.WithTimeout(ctx, time.Duration(j)*time.Millisecond)
						defer cancel()
						ctx = c
					}
					<-start
					tk, err := b.s.AssignmentTake(ctx, tp)
					mu.Lock()
					outcomes = append(outcomes, outcome{tp, tk, err})
					mu.Unlock()
				}()
			}
		}
		close(start)
		wg.Wait()
		perUnit := map[uuid.UUID]int{}
		had := map[[2]uuid.UUID]bool{}
		taken := 0
		for _, o := range outcomes {
			if o.err != nil {
				require.True(t, errors.Is(o.err, crowd.ErrNoUnit) || errors.Is(o.err, context.Canceled) ||
					errors.Is(o.err, context.DeadlineExceeded), "a take failed for another reason than its context: %v", o.err)
				_, err := b.s.AssignmentGet(b.ctx, o.p.ID)
				require.ErrorIs(t, err, store.ErrNotFound, "a failed take left its assignment: %v", o.err)
				continue
			}
			taken++
			require.Equal(t, o.p.ID, o.tk.Assignment.ID)
			key := [2]uuid.UUID{o.tk.Unit.ID, o.p.ContributorID}
			require.False(t, had[key], "contributor %s twice on unit %s", o.p.ContributorID, o.tk.Unit.ID)
			had[key] = true
			perUnit[o.tk.Unit.ID]++
			got, err := b.s.AssignmentGet(b.ctx, o.p.ID)
			require.NoError(t, err)
			require.Equal(t, o.tk.Unit.ID, got.UnitID)
		}
		require.Positive(t, taken)
		listed, err := b.s.UnitList(b.ctx, &store.UnitListParams{PoolID: p.ID})
		require.NoError(t, err)
		slots := 0
		for _, u := range listed {
			require.LessOrEqual(t, u.SlotsTaken, u.JudgmentsPerUnit, "unit %s over-assigned", u.ID)
			require.Equal(t, perUnit[u.ID], u.SlotsTaken, "unit %s: slots taken against takes answered", u.ID)
			slots += u.SlotsTaken
		}
		require.Equal(t, taken, slots)
		pool, err := b.s.PoolGet(b.ctx, p.ID)
		require.NoError(t, err)
		require.Equal(t, taken, pool.Counts.ActiveAssignments, "the pool's counter")
	})

	t.Run("JudgmentBurst", func(t *testing.T) {
		// Many judgments at once on one pool, three of each unit among
		// them — as PostgreSQL's group judgment combines them into shared
		// transactions (crowd_judgment_group.go) — with the unit known or
		// not, some contributors with no quality state yet, some data sent
		// twice (the same or other), some contexts ended before or while
		// they run, and a fn that finalizes the unit whose count reaches
		// its target. Afterwards: a unit judged three times was finalized
		// exactly once (by a committed fn), every judgment answered was
		// stored once, a failed one left nothing, and the counter, the
		// units' counts and the assignments agree.
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		const units = 12
		b.units(t, p.ID, units, crowd.UnitJudgable)
		type judging struct {
			a          *crowd.Assignment
			data       string
			ctx        context.Context
			unitKnown  bool
			err        error
			created    bool
			finalized  bool
			judgmentID uuid.UUID
		}
		var js []*judging
		for i := range units * 3 {
			c := b.contributor(t)
			if i%4 != 0 { // the others' first judgment makes their state
				_, err := b.s.PoolContributorPut(b.ctx, &store.PoolContributorPutParams{PoolID: p.ID, ContributorID: c.ID, Now: base})
				require.NoError(t, err)
			}
			a := b.take(t, takeParams(p.ID, c.ID)).Assignment
			ctx := b.ctx
			switch i % 9 {
			case 5: // ended before
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			case 8: // ends while it queues or runs
				c, cancel := context.WithTimeout(ctx, time.Duration((i/9)%3)*time.Millisecond) // 0, 1 or 2 ms (i%3 is 2 for every i%9 == 8)
				t.Cleanup(cancel)
				ctx = c
			}
			js = append(js, &judging{a: a, data: `{"same":"yes"}`, ctx: ctx, unitKnown: i%5 != 0})
			switch i % 7 {
			case 2: // the same data twice at once
				js = append(js, &judging{a: a, data: `{"same":"yes"}`, ctx: b.ctx, unitKnown: true})
			case 4: // other data at once: one of the two is stored
				js = append(js, &judging{a: a, data: `{"same":"no"}`, ctx: b.ctx, unitKnown: true})
			}
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, j := range js {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tp := judgmentTxParams(p.ID, j.a, j.data, newID(), j.unitKnown)
				<-start
				j.err = b.s.JudgmentInTx(j.ctx, tp, func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error {
					ins := begun.Inserted
					j.created, j.finalized, j.judgmentID = ins.Created, false, ins.Judgment.ID // this try's
					if !ins.Created || ins.Unit.State != crowd.UnitJudgable || ins.Unit.JudgmentCount < ins.Unit.JudgmentsPerUnit {
						return nil
					}
					// The unit's judgments came with the first statements
					// (no fn before this one changed them), as listed now.
					listed, err := tx.JudgmentList(ctx, &store.JudgmentListParams{UnitID: ins.Unit.ID})
					if err != nil {
						return err
					}
					if !reflect.DeepEqual(listed, begun.UnitJudgments) {
						return fmt.Errorf("unit %s: its judgments with the first statements %v, listed %v", ins.Unit.ID, begun.UnitJudgments, listed)
					}
					fp := &store.UnitFinalizeParams{ID: ins.Unit.ID, Result: json.RawMessage(`{}`), Now: sinceBase(time.Minute)}
					if i%2 == 0 {
						_, err = tx.UnitFinalize(ctx, fp)
						j.finalized = err == nil
						return err
					}
					// Or later (a batch sends it with the others, before
					// its COMMIT): finalized once it ran.
					return tx.UnitFinalizeLater(ctx, fp, func(u *crowd.Unit) { j.finalized = u.State == crowd.UnitFinalized })
				})
			}()
		}
		close(start)
		wg.Wait()
		created, finalized := map[uuid.UUID]int{}, map[uuid.UUID]int{}
		stored := map[uuid.UUID]uuid.UUID{} // assignment → judgment
		for _, j := range js {
			if j.err != nil {
				var conflict *crowd.JudgmentConflictError
				require.True(t, errors.Is(j.err, context.Canceled) || errors.Is(j.err, context.DeadlineExceeded) ||
					errors.As(j.err, &conflict), "a judgment failed for another reason than its context: %v", j.err)
				continue
			}
			if j.created {
				created[j.a.UnitID]++
				require.Zero(t, stored[j.a.ID], "assignment %s judged twice", j.a.ID)
				stored[j.a.ID] = j.judgmentID
			}
			if j.finalized {
				finalized[j.a.UnitID]++
			}
		}
		for _, j := range js { // the same data again answers the stored judgment
			if j.err == nil && !j.created {
				require.Equal(t, stored[j.a.ID], j.judgmentID)
			}
		}
		listed, err := b.s.UnitList(b.ctx, &store.UnitListParams{PoolID: p.ID})
		require.NoError(t, err)
		judged, full := 0, 0
		for _, u := range listed {
			require.Equal(t, created[u.ID], u.JudgmentCount, "unit %s: its count against its judgments answered", u.ID)
			all, err := b.s.JudgmentList(b.ctx, &store.JudgmentListParams{UnitID: u.ID})
			require.NoError(t, err)
			require.Len(t, all, u.JudgmentCount, "unit %s", u.ID)
			judged += u.JudgmentCount
			if u.JudgmentCount == 3 {
				full++
				require.Equal(t, crowd.UnitFinalized, u.State, "unit %s", u.ID)
				require.Equal(t, 1, finalized[u.ID], "unit %s finalized once", u.ID)
			} else {
				require.Equal(t, crowd.UnitJudgable, u.State, "unit %s", u.ID)
				require.Zero(t, finalized[u.ID], "unit %s", u.ID)
			}
		}
		require.Positive(t, full)
		counts := b.counts(t, p.ID)
		require.Equal(t, judged, counts.Judgments, "the pool's counter of judgments")
		require.Equal(t, units*3-judged, counts.ActiveAssignments, "the pool's counter of active assignments")
		require.Equal(t, full, counts.Finalized)
	})

	t.Run("TakeOrdered", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 2)
		us := b.units(t, p.ID, 3, crowd.UnitJudgable)
		c1, c2, c3 := b.contributor(t), b.contributor(t), b.contributor(t)

		tk := b.take(t, takeParams(p.ID, c1.ID))
		require.Equal(t, us[0].ID, tk.Unit.ID, "the oldest unit")
		require.Equal(t, 1, tk.Unit.SlotsTaken)
		require.JSONEq(t, `{"n":0}`, string(tk.Unit.Input))
		a := tk.Assignment
		require.Equal(t, p.ID, a.PoolID)
		require.Equal(t, c1.ID, a.ContributorID)
		requireTime(t, base, a.StartedAt)
		requireTime(t, base.Add(10*time.Minute), a.ExpiresAt)
		requireTime(t, base, a.HeartbeatAt)
		require.True(t, a.FinishedAt.IsZero())

		// Never the same unit twice to one person: c1 gets the next one.
		require.Equal(t, us[1].ID, b.take(t, takeParams(p.ID, c1.ID)).Unit.ID)
		require.Equal(t, us[0].ID, b.take(t, takeParams(p.ID, c2.ID)).Unit.ID, "a second slot of the first unit")
		// us[0] is full (2 of 2): c3 starts at us[1].
		require.Equal(t, us[1].ID, b.take(t, takeParams(p.ID, c3.ID)).Unit.ID)
		require.Equal(t, us[2].ID, b.take(t, takeParams(p.ID, c1.ID)).Unit.ID)
		_, err := b.s.AssignmentTake(b.ctx, takeParams(p.ID, c1.ID))
		require.ErrorIs(t, err, crowd.ErrNoUnit, "c1 has judged every unit")
		require.Equal(t, us[2].ID, b.take(t, takeParams(p.ID, c2.ID)).Unit.ID)
		_, err = b.s.AssignmentTake(b.ctx, takeParams(p.ID, c3.ID))
		require.ErrorIs(t, err, crowd.ErrNoUnit, "every slot is taken")

		for _, u := range us {
			got, err := b.s.UnitGet(b.ctx, u.ID)
			require.NoError(t, err)
			require.Equal(t, 2, got.SlotsTaken)
		}
		require.Equal(t, 6, b.counts(t, p.ID).ActiveAssignments)
	})

	t.Run("TakeRandomAndCandidates", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		us := b.units(t, p.ID, 20, crowd.UnitJudgable)
		seen := map[uuid.UUID]bool{}
		for i := range 10 {
			c := b.contributor(t)
			tp := takeParams(p.ID, c.ID)
			tp.Strategy = crowd.StrategyRandom
			tp.RandomKey = int64(i+1) * 1e17
			tk := b.take(t, tp)
			require.False(t, seen[tk.Unit.ID], "one slot per unit")
			seen[tk.Unit.ID] = true
		}
		avail, err := b.s.UnitListAvailable(b.ctx, &store.UnitListAvailableParams{PoolID: p.ID, Limit: 100})
		require.NoError(t, err)
		require.Len(t, avail, 10, "the units with a free slot")
		for _, id := range avail {
			require.False(t, seen[id])
		}
		few, err := b.s.UnitListAvailable(b.ctx, &store.UnitListAvailableParams{PoolID: p.ID, Limit: 3, RandomKey: 1})
		require.NoError(t, err)
		require.Len(t, few, 3)

		// Candidates: the taken ones are stale and missed; the first free
		// one is taken.
		c := b.contributor(t)
		tp := takeParams(p.ID, c.ID)
		tp.Strategy = crowd.StrategyCandidates
		var stale []uuid.UUID
		for id := range seen {
			stale = append(stale, id)
		}
		tp.Candidates = append(stale[:3:3], avail[4], avail[5])
		require.Equal(t, avail[4], b.take(t, tp).Unit.ID)
		tp = takeParams(p.ID, c.ID)
		tp.Strategy, tp.Candidates = crowd.StrategyCandidates, stale
		_, err = b.s.AssignmentTake(b.ctx, tp)
		require.ErrorIs(t, err, crowd.ErrNoUnit, "every candidate is stale")
		// A candidate of another pool is never taken.
		other := b.pool(t, 1)
		ous := b.units(t, other.ID, 1, crowd.UnitJudgable)
		tp = takeParams(p.ID, c.ID)
		tp.Strategy, tp.Candidates = crowd.StrategyCandidates, []uuid.UUID{ous[0].ID}
		_, err = b.s.AssignmentTake(b.ctx, tp)
		require.ErrorIs(t, err, crowd.ErrNoUnit)

		// Random wraps around: from a key past every unit, it still
		// finds the free ones, until none is left.
		for range 9 {
			c := b.contributor(t)
			tp := takeParams(p.ID, c.ID)
			tp.Strategy, tp.RandomKey = crowd.StrategyRandom, 1<<62
			b.take(t, tp)
		}
		tp = takeParams(p.ID, b.contributor(t).ID)
		tp.Strategy = crowd.StrategyRandom
		_, err = b.s.AssignmentTake(b.ctx, tp)
		require.ErrorIs(t, err, crowd.ErrNoUnit)
		require.Equal(t, crowd.PoolCounts{Judgable: 20, ActiveAssignments: 20}, b.counts(t, p.ID))
		_ = us
	})

	t.Run("TakeGoldenOnlyWhenAsked", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		gs, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable,
			Units: []*store.UnitInsertParams{newGolden(1)}, Now: base})
		require.NoError(t, err)
		c1, c2 := b.contributor(t), b.contributor(t)
		_, err = b.s.AssignmentTake(b.ctx, takeParams(p.ID, c1.ID))
		require.ErrorIs(t, err, crowd.ErrNoUnit, "a golden unit is not handed out as regular work")
		for _, c := range []*crowd.Contributor{c1, c2} {
			tp := takeParams(p.ID, c.ID)
			tp.Golden = true
			tk := b.take(t, tp)
			require.Equal(t, gs[0].ID, tk.Unit.ID, "golden units have no slot limit")
		}
		tp := takeParams(p.ID, c1.ID)
		tp.Golden = true
		_, err = b.s.AssignmentTake(b.ctx, tp)
		require.ErrorIs(t, err, crowd.ErrNoUnit, "never the same test question twice")
	})

	t.Run("TakeSkillsAndChannels", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		pp := b.poolParams(t, 3)
		pp.Skills, pp.Channels = []string{"en", "de"}, []string{"web", "app"}
		p, _, err := b.s.PoolCreate(b.ctx, pp)
		require.NoError(t, err)
		b.units(t, p.ID, 2, crowd.UnitJudgable)
		who := func(skills, channels []string) uuid.UUID {
			c, err := b.s.ContributorCreate(b.ctx, &store.ContributorCreateParams{ID: newID(), ExternalID: "ext-" + uuid.NewString(),
				Skills: skills, Channels: channels, Now: base})
			require.NoError(t, err)
			return c.ID
		}
		for name, c := range map[string]uuid.UUID{
			"a skill missing": who([]string{"en"}, []string{"web"}),
			"no channel":      who([]string{"en", "de"}, []string{}),
			"another channel": who([]string{"de", "en", "fr"}, []string{"mail"}),
			"no skill at all": who([]string{}, []string{"app"}),
		} {
			var ne *crowd.NotEligibleError
			_, err := b.s.AssignmentTake(b.ctx, takeParams(p.ID, c))
			require.ErrorAs(t, err, &ne, name)
			require.Equal(t, crowd.ReasonMissingSkill, ne.Reason, name)
		}
		require.Zero(t, b.counts(t, p.ID).ActiveAssignments, "no refused take holds a slot")
		b.take(t, takeParams(p.ID, who([]string{"fr", "de", "en"}, []string{"mail", "app"})))

		// A pool that names no channel takes anyone with its skills.
		pp = b.poolParams(t, 3)
		pp.Skills = []string{}
		free, _, err := b.s.PoolCreate(b.ctx, pp)
		require.NoError(t, err)
		b.units(t, free.ID, 1, crowd.UnitJudgable)
		b.take(t, takeParams(free.ID, who([]string{}, []string{})))
	})

	t.Run("TakeRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		b.units(t, p.ID, 2, crowd.UnitJudgable)
		b.units(t, p.ID, 2, crowd.UnitNew)
		c := b.contributor(t)

		_, err := b.s.AssignmentTake(b.ctx, takeParams(newID(), c.ID))
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.AssignmentTake(b.ctx, takeParams(p.ID, newID()))
		require.ErrorIs(t, err, store.ErrNotFound)

		trust := 0.1
		_, err = b.s.PoolContributorPut(b.ctx, &store.PoolContributorPutParams{PoolID: p.ID, ContributorID: c.ID,
			Trust: &trust, TestsAnswered: 3, Flagged: true, Now: base})
		require.NoError(t, err)
		var ne *crowd.NotEligibleError
		_, err = b.s.AssignmentTake(b.ctx, takeParams(p.ID, c.ID))
		require.ErrorAs(t, err, &ne, "flagged in the pool")
		_, err = b.s.PoolContributorPut(b.ctx, &store.PoolContributorPutParams{PoolID: p.ID, ContributorID: c.ID, Now: base})
		require.NoError(t, err)
		banned := crowd.ContributorBanned
		_, err = b.s.ContributorUpdate(b.ctx, &store.ContributorUpdateParams{ID: c.ID, State: &banned, Now: base})
		require.NoError(t, err)
		_, err = b.s.AssignmentTake(b.ctx, takeParams(p.ID, c.ID))
		require.ErrorAs(t, err, &ne, "banned")

		c2 := b.contributor(t)
		_, err = b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: p.ID, From: crowd.PoolOpen, To: crowd.PoolPaused, Now: base})
		require.NoError(t, err)
		var pno *crowd.PoolNotOpenError
		_, err = b.s.AssignmentTake(b.ctx, takeParams(p.ID, c2.ID))
		require.ErrorAs(t, err, &pno)
		require.Equal(t, crowd.PoolPaused, pno.Status)
		_, err = b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: p.ID, From: crowd.PoolPaused, To: crowd.PoolOpen, Now: base})
		require.NoError(t, err)
		// NEW units are not offered: two JUDGABLE ones, then none.
		b.take(t, takeParams(p.ID, c2.ID))
		b.take(t, takeParams(p.ID, c2.ID))
		_, err = b.s.AssignmentTake(b.ctx, takeParams(p.ID, c2.ID))
		require.ErrorIs(t, err, crowd.ErrNoUnit)
		require.Equal(t, 2, b.counts(t, p.ID).ActiveAssignments, "refusals take nothing")
	})

	t.Run("ExtendCapped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		b.units(t, p.ID, 1, crowd.UnitJudgable)
		c := b.contributor(t)
		a := b.take(t, takeParams(p.ID, c.ID)).Assignment
		capped, err := b.s.AssignmentExtend(b.ctx, &store.AssignmentExtendParams{ID: a.ID, ContributorID: c.ID, Duration: 48 * time.Hour, Now: sinceBase(time.Minute)})
		require.NoError(t, err)
		requireTime(t, a.StartedAt.Add(crowd.AssignmentMaxHold), capped.ExpiresAt, "no one holds a slot past the cap")
		again, err := b.s.AssignmentExtend(b.ctx, &store.AssignmentExtendParams{ID: a.ID, ContributorID: c.ID, Duration: time.Hour, Now: sinceBase(23*time.Hour + 30*time.Minute)})
		require.NoError(t, err)
		requireTime(t, capped.ExpiresAt, again.ExpiresAt, "an extension near the cap stops at it")
	})

	t.Run("HeartbeatExtendReleaseFencing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		us := b.units(t, p.ID, 1, crowd.UnitJudgable)
		c, other := b.contributor(t), b.contributor(t)
		a := b.take(t, takeParams(p.ID, c.ID)).Assignment

		hb, err := b.s.AssignmentHeartbeat(b.ctx, &store.AssignmentHeartbeatParams{ID: a.ID, ContributorID: c.ID, Now: sinceBase(time.Minute)})
		require.NoError(t, err)
		requireTime(t, sinceBase(time.Minute), hb.HeartbeatAt)
		requireTime(t, a.ExpiresAt, hb.ExpiresAt)
		ex, err := b.s.AssignmentExtend(b.ctx, &store.AssignmentExtendParams{ID: a.ID, ContributorID: c.ID, Duration: 30 * time.Minute, Now: sinceBase(2 * time.Minute)})
		require.NoError(t, err)
		requireTime(t, sinceBase(32*time.Minute), ex.ExpiresAt)
		ex, err = b.s.AssignmentExtend(b.ctx, &store.AssignmentExtendParams{ID: a.ID, ContributorID: c.ID, Duration: time.Minute, Now: sinceBase(3 * time.Minute)})
		require.NoError(t, err)
		requireTime(t, sinceBase(32*time.Minute), ex.ExpiresAt, "an extension never shortens")

		// Fencing: another contributor, then a lapsed lease.
		_, err = b.s.AssignmentHeartbeat(b.ctx, &store.AssignmentHeartbeatParams{ID: a.ID, ContributorID: other.ID, Now: sinceBase(4 * time.Minute)})
		requireRefused(t, err, crowd.RefusedNotOwner)
		_, err = b.s.AssignmentExtend(b.ctx, &store.AssignmentExtendParams{ID: a.ID, ContributorID: other.ID, Duration: time.Hour, Now: sinceBase(4 * time.Minute)})
		requireRefused(t, err, crowd.RefusedNotOwner)
		_, err = b.s.AssignmentRelease(b.ctx, &store.AssignmentReleaseParams{ID: a.ID, ContributorID: other.ID, Now: sinceBase(4 * time.Minute)})
		requireRefused(t, err, crowd.RefusedNotOwner)
		_, err = b.s.AssignmentHeartbeat(b.ctx, &store.AssignmentHeartbeatParams{ID: a.ID, ContributorID: c.ID, Now: sinceBase(33 * time.Minute)})
		requireRefused(t, err, crowd.RefusedExpired)
		_, err = b.s.AssignmentExtend(b.ctx, &store.AssignmentExtendParams{ID: a.ID, ContributorID: c.ID, Duration: time.Hour, Now: sinceBase(33 * time.Minute)})
		requireRefused(t, err, crowd.RefusedExpired)
		_, err = b.s.AssignmentHeartbeat(b.ctx, &store.AssignmentHeartbeatParams{ID: newID(), ContributorID: c.ID, Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)

		// Release, even lapsed: the slot is free at once.
		r, err := b.s.AssignmentRelease(b.ctx, &store.AssignmentReleaseParams{ID: a.ID, ContributorID: c.ID, Now: sinceBase(33 * time.Minute)})
		require.NoError(t, err)
		require.Equal(t, crowd.AssignmentReleased, r.State)
		requireTime(t, sinceBase(33*time.Minute), r.FinishedAt)
		u, err := b.s.UnitGet(b.ctx, us[0].ID)
		require.NoError(t, err)
		require.Zero(t, u.SlotsTaken)
		require.Zero(t, b.counts(t, p.ID).ActiveAssignments)
		_, err = b.s.AssignmentRelease(b.ctx, &store.AssignmentReleaseParams{ID: a.ID, ContributorID: c.ID, Now: sinceBase(34 * time.Minute)})
		requireRefused(t, err, crowd.RefusedNotActive)
		_, err = b.s.AssignmentHeartbeat(b.ctx, &store.AssignmentHeartbeatParams{ID: a.ID, ContributorID: c.ID, Now: sinceBase(34 * time.Minute)})
		requireRefused(t, err, crowd.RefusedNotActive)
		_, err = b.s.AssignmentRelease(b.ctx, &store.AssignmentReleaseParams{ID: newID(), ContributorID: c.ID, Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)

		// The freed slot goes to someone else; never back to c.
		_, err = b.s.AssignmentTake(b.ctx, takeParams(p.ID, c.ID))
		require.ErrorIs(t, err, crowd.ErrNoUnit)
		require.Equal(t, us[0].ID, b.take(t, takeParams(p.ID, other.ID)).Unit.ID)
	})

	t.Run("Expire", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		us := b.units(t, p.ID, 5, crowd.UnitJudgable)
		var as []*crowd.Assignment
		for range 5 {
			as = append(as, b.take(t, takeParams(p.ID, b.contributor(t).ID)).Assignment)
		}
		// One is extended past the reaper's now.
		_, err := b.s.AssignmentExtend(b.ctx, &store.AssignmentExtendParams{ID: as[4].ID, ContributorID: as[4].ContributorID,
			Duration: time.Hour, Now: sinceBase(time.Minute)})
		require.NoError(t, err)

		n, err := b.s.AssignmentExpire(b.ctx, &store.AssignmentExpireParams{Now: sinceBase(10 * time.Minute), Max: 10})
		require.NoError(t, err)
		require.Zero(t, n, "not before the expiry")
		mark := b.outboxMark(t)
		now := sinceBase(11 * time.Minute)
		n, err = b.s.AssignmentExpire(b.ctx, &store.AssignmentExpireParams{Now: now, Max: 3})
		require.NoError(t, err)
		require.Equal(t, 3, n, "a batch")
		n, err = b.s.AssignmentExpire(b.ctx, &store.AssignmentExpireParams{Now: now, Max: 3})
		require.NoError(t, err)
		require.Equal(t, 1, n, "the rest; the extended one stays")
		n, err = b.s.AssignmentExpire(b.ctx, &store.AssignmentExpireParams{Now: now, Max: 3})
		require.NoError(t, err)
		require.Zero(t, n)

		ds := decodeEvents[crowd.AssignmentExpiredData](t, b.outboxSince(t, mark), crowd.EventAssignmentExpired)
		require.Len(t, ds, 2, "one row per batch")
		var got []crowd.ExpiredAssignment
		for _, d := range ds {
			got = append(got, d.Assignments...)
		}
		var want []crowd.ExpiredAssignment
		for _, a := range as[:4] {
			want = append(want, crowd.ExpiredAssignment{AssignmentID: a.ID, UnitID: a.UnitID, PoolID: p.ID, ContributorID: a.ContributorID})
		}
		require.ElementsMatch(t, want, got)
		for i, a := range as {
			g, err := b.s.AssignmentGet(b.ctx, a.ID)
			require.NoError(t, err)
			u, err := b.s.UnitGet(b.ctx, us[i].ID)
			require.NoError(t, err)
			if i < 4 {
				require.Equal(t, crowd.AssignmentExpired, g.State)
				requireTime(t, now, g.FinishedAt)
				require.Zero(t, u.SlotsTaken, "the slot is free")
			} else {
				require.Equal(t, crowd.AssignmentActive, g.State)
				require.Equal(t, 1, u.SlotsTaken)
			}
		}
		require.Equal(t, 1, b.counts(t, p.ID).ActiveAssignments)
		_, err = b.s.AssignmentHeartbeat(b.ctx, &store.AssignmentHeartbeatParams{ID: as[0].ID, ContributorID: as[0].ContributorID, Now: now})
		requireRefused(t, err, crowd.RefusedExpired)
	})

	t.Run("Validate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		_, err := b.s.AssignmentTake(b.ctx, &store.AssignmentTakeParams{Strategy: "fifo"})
		requireFields(t, err, "assignmentId", "poolId", "contributorId", "duration", "strategy", "now")
		_, err = b.s.AssignmentTake(b.ctx, &store.AssignmentTakeParams{ID: newID(), PoolID: newID(), ContributorID: newID(),
			Duration: time.Minute, Strategy: crowd.StrategyCandidates, Now: base})
		requireFields(t, err, "candidates")
		_, err = b.s.AssignmentHeartbeat(b.ctx, &store.AssignmentHeartbeatParams{})
		requireFields(t, err, "assignmentId", "contributorId", "now")
		_, err = b.s.AssignmentExtend(b.ctx, &store.AssignmentExtendParams{})
		requireFields(t, err, "assignmentId", "contributorId", "duration", "now")
		_, err = b.s.AssignmentRelease(b.ctx, &store.AssignmentReleaseParams{})
		requireFields(t, err, "assignmentId", "contributorId", "now")
		_, err = b.s.AssignmentExpire(b.ctx, &store.AssignmentExpireParams{})
		requireFields(t, err, "now", "max")
	})
}

// judge submits data through a.
func (b *bundle) judge(t *testing.T, a *crowd.Assignment, data string, now time.Time) (*crowd.Judgment, bool, error) {
	t.Helper()
	trust := 0.8
	ins, err := b.s.JudgmentInsert(b.ctx, &store.JudgmentInsertParams{ID: newID(), AssignmentID: a.ID, ContributorID: a.ContributorID,
		Data: json.RawMessage(data), Trust: &trust, Now: now})
	if err != nil {
		return nil, false, err
	}
	require.Equal(t, ins.Created, ins.Unit != nil, "the unit comes with a new judgment only")
	return ins.Judgment, ins.Created, nil
}

func testJudgments(t *testing.T, open opener) {
	t.Run("InsertReadsTrust", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		b.units(t, p.ID, 1, crowd.UnitJudgable)
		known, unknown := b.contributor(t), b.contributor(t)
		trust := 0.6
		_, err := b.s.PoolContributorPut(b.ctx, &store.PoolContributorPutParams{PoolID: p.ID, ContributorID: known.ID,
			Trust: &trust, TestsAnswered: 5, TestsCorrect: 3, Now: base})
		require.NoError(t, err)
		for _, c := range []*crowd.Contributor{known, unknown} {
			a := b.take(t, takeParams(p.ID, c.ID)).Assignment
			ins, err := b.s.JudgmentInsert(b.ctx, &store.JudgmentInsertParams{ID: newID(), AssignmentID: a.ID,
				ContributorID: c.ID, Data: json.RawMessage(`{"same":"no"}`), Now: sinceBase(time.Minute)})
			require.NoError(t, err)
			if c == known {
				require.NotNil(t, ins.Judgment.Trust, "no trust given: the pool's")
				require.InDelta(t, trust, *ins.Judgment.Trust, 1e-9)
			} else {
				require.Nil(t, ins.Judgment.Trust, "the pool knows no trust of them")
			}
		}
	})

	t.Run("InsertIdempotentConflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 2)
		us := b.units(t, p.ID, 1, crowd.UnitJudgable)
		c := b.contributor(t)
		a := b.take(t, takeParams(p.ID, c.ID)).Assignment

		mark := b.outboxMark(t)
		now := sinceBase(time.Minute)
		j, created, err := b.judge(t, a, `{"same":"yes","note":"x"}`, now)
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, a.ID, j.AssignmentID)
		require.Equal(t, us[0].ID, j.UnitID)
		require.Equal(t, p.ID, j.PoolID)
		require.Equal(t, c.ID, j.ContributorID)
		require.JSONEq(t, `{"same":"yes","note":"x"}`, string(j.Data))
		require.InDelta(t, 0.8, *j.Trust, 1e-9)
		require.False(t, j.Golden)
		require.False(t, j.Tainted)
		requireTime(t, a.StartedAt, j.StartedAt)
		requireTime(t, now, j.SubmittedAt)
		ds := decodeEvents[crowd.JudgmentReceivedData](t, b.outboxSince(t, mark), crowd.EventJudgmentReceived)
		require.Equal(t, []crowd.JudgmentReceivedData{{JudgmentID: j.ID, AssignmentID: a.ID, UnitID: us[0].ID, PoolID: p.ID,
			ContributorID: c.ID, JudgmentCount: 1, JudgmentsPerUnit: 2}}, ds)

		g, err := b.s.AssignmentGet(b.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, crowd.AssignmentSubmitted, g.State)
		requireTime(t, now, g.FinishedAt)
		u, err := b.s.UnitGet(b.ctx, us[0].ID)
		require.NoError(t, err)
		require.Equal(t, 1, u.JudgmentCount)
		require.Equal(t, 1, u.SlotsTaken, "a submitted assignment keeps its slot")
		require.Equal(t, crowd.PoolCounts{Judgable: 1, Judgments: 1}, b.counts(t, p.ID))

		// The same data again (other key order and spacing), even after
		// the lease ran out: the same judgment, nothing written.
		mark = b.outboxMark(t)
		again, created, err := b.judge(t, a, `{ "note":"x", "same":"yes" }`, sinceBase(time.Hour))
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, j, again)
		_, _, err = b.judge(t, a, `{"same":"no"}`, sinceBase(time.Hour))
		var ce *crowd.JudgmentConflictError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, j.ID, ce.JudgmentID)
		b.requireNoOutbox(t, mark)
		require.Equal(t, crowd.PoolCounts{Judgable: 1, Judgments: 1}, b.counts(t, p.ID))

		// Another contributor cannot submit through it.
		other := b.contributor(t)
		_, err = b.s.JudgmentInsert(b.ctx, &store.JudgmentInsertParams{ID: newID(), AssignmentID: a.ID, ContributorID: other.ID,
			Data: json.RawMessage(`{"same":"yes","note":"x"}`), Now: now})
		requireRefused(t, err, crowd.RefusedNotOwner)
		_, err = b.s.JudgmentInsert(b.ctx, &store.JudgmentInsertParams{ID: newID(), AssignmentID: newID(), ContributorID: c.ID,
			Data: json.RawMessage(`{}`), Now: now})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("ExpiredAndReleasedRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		us := b.units(t, p.ID, 3, crowd.UnitJudgable)
		a1 := b.take(t, takeParams(p.ID, b.contributor(t).ID)).Assignment
		a2 := b.take(t, takeParams(p.ID, b.contributor(t).ID)).Assignment
		a3 := b.take(t, takeParams(p.ID, b.contributor(t).ID)).Assignment
		mark := b.outboxMark(t)

		// Lapsed but not reaped yet: refused all the same, nothing written.
		_, _, err := b.judge(t, a1, `{"same":"yes"}`, sinceBase(11*time.Minute))
		requireRefused(t, err, crowd.RefusedExpired)
		b.requireNoOutbox(t, mark)
		// At the expiry instant it is still on time.
		_, created, err := b.judge(t, a3, `{"same":"yes"}`, a3.ExpiresAt)
		require.NoError(t, err)
		require.True(t, created)
		// Reaped.
		n, err := b.s.AssignmentExpire(b.ctx, &store.AssignmentExpireParams{Now: sinceBase(11 * time.Minute), Max: 10})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		mark2 := b.outboxMark(t)
		_, _, err = b.judge(t, a1, `{"same":"yes"}`, sinceBase(12*time.Minute))
		requireRefused(t, err, crowd.RefusedExpired)
		require.Contains(t, err.Error(), "expired")
		b.requireNoOutbox(t, mark2)

		a4 := b.take(t, &store.AssignmentTakeParams{ID: newID(), PoolID: p.ID, ContributorID: b.contributor(t).ID,
			Duration: time.Minute, Strategy: crowd.StrategyOrdered, Now: sinceBase(12 * time.Minute)}).Assignment
		_, err = b.s.AssignmentRelease(b.ctx, &store.AssignmentReleaseParams{ID: a4.ID, ContributorID: a4.ContributorID, Now: sinceBase(12 * time.Minute)})
		require.NoError(t, err)
		_, _, err = b.judge(t, a4, `{"same":"yes"}`, sinceBase(12*time.Minute))
		requireRefused(t, err, crowd.RefusedNotActive)

		for _, u := range us {
			g, err := b.s.UnitGet(b.ctx, u.ID)
			require.NoError(t, err)
			want := 0
			if u.ID == a3.UnitID {
				want = 1
			}
			require.Equal(t, want, g.JudgmentCount)
			require.Equal(t, want, g.SlotsTaken)
		}
		require.Equal(t, crowd.PoolCounts{Judgable: 3, Judgments: 1}, b.counts(t, p.ID))
		_ = a2
	})

	t.Run("ListAndGolden", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		us := b.units(t, p.ID, 2, crowd.UnitJudgable)
		gs, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable,
			Units: []*store.UnitInsertParams{newGolden(1)}, Now: base})
		require.NoError(t, err)
		var js []*crowd.Judgment
		for range 3 {
			c := b.contributor(t)
			for range 2 {
				a := b.take(t, takeParams(p.ID, c.ID)).Assignment
				j, _, err := b.judge(t, a, `{"same":"yes"}`, sinceBase(time.Minute))
				require.NoError(t, err)
				js = append(js, j)
			}
			tp := takeParams(p.ID, c.ID)
			tp.Golden = true
			a := b.take(t, tp).Assignment
			j, _, err := b.judge(t, a, `{"same":"no"}`, sinceBase(time.Minute))
			require.NoError(t, err)
			require.True(t, j.Golden, "an answer to a test question")
			require.Equal(t, gs[0].ID, j.UnitID)
		}
		byUnit, err := b.s.JudgmentList(b.ctx, &store.JudgmentListParams{UnitID: us[0].ID})
		require.NoError(t, err)
		require.Len(t, byUnit, 3)
		for _, j := range byUnit {
			require.Equal(t, us[0].ID, j.UnitID)
		}
		byPool, err := b.s.JudgmentList(b.ctx, &store.JudgmentListParams{PoolID: p.ID})
		require.NoError(t, err)
		require.Len(t, byPool, 9)
		for i := 1; i < len(byPool); i++ {
			require.Equal(t, -1, compareUUID(byPool[i].ID, byPool[i-1].ID), "newest first")
		}
		page, err := b.s.JudgmentList(b.ctx, &store.JudgmentListParams{PoolID: p.ID, BeforeID: byPool[2].ID, Limit: 4})
		require.NoError(t, err)
		require.Len(t, page, 4)
		require.Equal(t, byPool[3].ID, page[0].ID)
		require.Equal(t, crowd.PoolCounts{Judgable: 2, Golden: 1, Judgments: 9}, b.counts(t, p.ID))
		_ = js

		_, err = b.s.JudgmentList(b.ctx, &store.JudgmentListParams{})
		requireFields(t, err, "unitId", "poolId")
		_, err = b.s.JudgmentList(b.ctx, &store.JudgmentListParams{UnitID: newID(), PoolID: newID()})
		requireFields(t, err, "poolId")
		trust := 2.0
		_, err = b.s.JudgmentInsert(b.ctx, &store.JudgmentInsertParams{Data: json.RawMessage(`{`), Trust: &trust})
		requireFields(t, err, "judgmentId", "assignmentId", "contributorId", "data", "trust", "now")
		_, err = b.s.JudgmentInsert(b.ctx, &store.JudgmentInsertParams{ID: newID(), AssignmentID: newID(), ContributorID: newID(),
			Data: json.RawMessage(`{"note":"\u0000"}`), Now: base})
		requireFields(t, err, "data")
	})

	t.Run("JudgmentInTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		us := b.units(t, p.ID, 2, crowd.UnitJudgable)
		fresh, known, late := b.contributor(t), b.contributor(t), b.contributor(t)
		trust := 0.7
		for _, c := range []*crowd.Contributor{known, late} {
			_, err := b.s.PoolContributorPut(b.ctx, &store.PoolContributorPutParams{PoolID: p.ID, ContributorID: c.ID,
				Trust: &trust, TestsAnswered: 5, TestsCorrect: 4, Now: base})
			require.NoError(t, err)
		}
		boom := errors.New("boom")
		var calls int
		judge := func(a *crowd.Assignment, data string, at time.Time, run uuid.UUID, ret error) (*store.JudgmentBegun, error) {
			t.Helper()
			var got *store.JudgmentBegun
			tp := &store.JudgmentInTxParams{PoolID: p.ID, RunID: run, Insert: store.JudgmentInsertParams{ID: newID(),
				AssignmentID: a.ID, ContributorID: a.ContributorID, Data: json.RawMessage(data), Now: at}}
			if run == uuid.Nil {
				tp.RunOfUnit = a.UnitID
			}
			err := b.s.JudgmentInTx(b.ctx, tp, func(ctx context.Context, tx store.Tx, begun *store.JudgmentBegun) error {
				calls++
				got = begun
				// The judgment is the transaction's: its unit lists it.
				js, err := tx.JudgmentList(ctx, &store.JudgmentListParams{UnitID: a.UnitID})
				if err != nil {
					return err
				}
				if !slices.ContainsFunc(js, func(j *crowd.Judgment) bool { return j.ID == begun.Inserted.Judgment.ID }) {
					return errors.New("the judgment is not in its transaction")
				}
				return ret
			})
			return got, err
		}

		// Their first judgment in the pool: the state is made (locked
		// first, then the judgment); fn's error rolls everything back.
		a := b.take(t, takeParams(p.ID, fresh.ID)).Assignment
		mark := b.outboxMark(t)
		got, err := judge(a, `{"same":"yes"}`, sinceBase(time.Minute), uuid.Nil, boom)
		require.ErrorIs(t, err, boom)
		require.Equal(t, fresh.ID, got.State.ContributorID)
		require.Equal(t, p.ID, got.State.PoolID)
		require.Zero(t, got.State.Trust.TestsAnswered)
		require.True(t, got.Inserted.Created)
		require.Nil(t, got.Inserted.Judgment.Trust, "no trust in the state: none recorded")
		require.Equal(t, us[0].ID, got.Inserted.Unit.ID)
		require.Equal(t, 1, got.Inserted.Unit.JudgmentCount)
		b.requireNoOutbox(t, mark)
		require.Equal(t, crowd.PoolCounts{Judgable: 2, ActiveAssignments: 1}, b.counts(t, p.ID), "rolled back")
		got, err = judge(a, `{"same":"yes"}`, sinceBase(time.Minute), uuid.Nil, nil)
		require.NoError(t, err)
		first := got.Inserted.Judgment
		require.Equal(t, crowd.PoolCounts{Judgable: 2, Judgments: 1}, b.counts(t, p.ID))
		st, err := b.s.QualityStateGet(b.ctx, p.ID, fresh.ID)
		require.NoError(t, err)
		require.Equal(t, fresh.ID, st.ContributorID)

		// The same data again: the stored judgment, nothing written;
		// other data: a conflict before fn.
		got, err = judge(a, `{"same":"yes"}`, sinceBase(2*time.Minute), uuid.Nil, nil)
		require.NoError(t, err)
		require.False(t, got.Inserted.Created)
		require.Equal(t, first.ID, got.Inserted.Judgment.ID)
		calls = 0
		_, err = judge(a, `{"same":"no"}`, sinceBase(2*time.Minute), uuid.Nil, nil)
		var conflict *crowd.JudgmentConflictError
		require.ErrorAs(t, err, &conflict)
		require.Zero(t, calls, "fn does not run after a refused insert")

		// A known contributor: the locked state's trust is recorded; a
		// run that does not exist (pruned) locks nothing.
		a = b.take(t, takeParams(p.ID, known.ID)).Assignment
		got, err = judge(a, `{"same":"no"}`, sinceBase(time.Minute), newID(), nil)
		require.NoError(t, err)
		require.InDelta(t, trust, got.State.Trust.Value, 1e-9)
		require.Equal(t, 5, got.State.Trust.TestsAnswered)
		require.NotNil(t, got.Inserted.Judgment.Trust)
		require.InDelta(t, trust, *got.Inserted.Judgment.Trust, 1e-9)
		require.Equal(t, 2, got.Inserted.Unit.JudgmentCount)

		// Expired: refused, the assignment stays as it was, fn not run.
		a = b.take(t, takeParams(p.ID, late.ID)).Assignment
		calls = 0
		_, err = judge(a, `{"same":"no"}`, sinceBase(time.Hour), uuid.Nil, nil)
		var ae *crowd.AssignmentError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, crowd.RefusedExpired, ae.Reason)
		require.Zero(t, calls)
		g, err := b.s.AssignmentGet(b.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, crowd.AssignmentActive, g.State)

		err = b.s.JudgmentInTx(b.ctx, &store.JudgmentInTxParams{RunID: newID(), RunOfUnit: newID()},
			func(context.Context, store.Tx, *store.JudgmentBegun) error { return nil })
		requireFields(t, err, "poolId", "runOfUnit")
	})

	t.Run("JudgmentInTxUnitJudgments", func(t *testing.T) {
		// The judgment that brings its unit to its target gets the unit's
		// judgments with its first statements (what fn would list), the
		// others none: with the unit known or not, for a contributor with
		// a quality state or one whose first judgment makes it; a resend
		// of it none (nothing inserted).
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		b.units(t, p.ID, 1, crowd.UnitJudgable)
		cs := []*crowd.Contributor{b.contributor(t), b.contributor(t), b.contributor(t)}
		for _, c := range []*crowd.Contributor{cs[0], cs[2]} { // cs[1]'s first judgment makes its state
			_, err := b.s.PoolContributorPut(b.ctx, &store.PoolContributorPutParams{PoolID: p.ID, ContributorID: c.ID, Now: base})
			require.NoError(t, err)
		}
		judge := func(a *crowd.Assignment, unitKnown bool, id uuid.UUID) (begun *store.JudgmentBegun, listed []*crowd.Judgment) {
			t.Helper()
			tp := judgmentTxParams(p.ID, a, `{"same":"yes"}`, id, unitKnown)
			require.NoError(t, b.s.JudgmentInTx(b.ctx, tp, func(ctx context.Context, tx store.Tx, bg *store.JudgmentBegun) error {
				begun = bg
				var err error
				listed, err = tx.JudgmentList(ctx, &store.JudgmentListParams{UnitID: a.UnitID})
				return err
			}))
			return begun, listed
		}
		var last *crowd.Assignment
		var lastID uuid.UUID
		for i, c := range cs {
			last, lastID = b.take(t, takeParams(p.ID, c.ID)).Assignment, newID()
			begun, listed := judge(last, i != 0, lastID)
			require.True(t, begun.Inserted.Created)
			require.Equal(t, i+1, begun.Inserted.Unit.JudgmentCount)
			require.Len(t, listed, i+1)
			if i < 2 {
				require.False(t, begun.Inserted.Unit.TargetReached())
				require.Nil(t, begun.UnitJudgments, "judgment %d: its unit is not at its target", i)
				continue
			}
			require.True(t, begun.Inserted.Unit.TargetReached())
			require.Equal(t, listed, begun.UnitJudgments, "the unit's judgments, newest first")
			require.Equal(t, lastID, begun.UnitJudgments[0].ID)
		}
		begun, _ := judge(last, true, newID())
		require.False(t, begun.Inserted.Created)
		require.Nil(t, begun.UnitJudgments, "a resend inserted nothing")
	})

	t.Run("InTxJudgeAndFinalize", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		b.units(t, p.ID, 1, crowd.UnitJudgable)
		c := b.contributor(t)
		a := b.take(t, takeParams(p.ID, c.ID)).Assignment
		boom := errors.New("boom")
		intake := func(ret error) error {
			return b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
				ins, err := tx.JudgmentInsert(ctx, &store.JudgmentInsertParams{ID: newID(), AssignmentID: a.ID,
					ContributorID: c.ID, Data: json.RawMessage(`{"same":"yes"}`), Now: sinceBase(time.Minute)})
				if err != nil {
					return err
				}
				if !ins.Created {
					return errors.New("not created")
				}
				j := ins.Judgment
				u, err := tx.UnitGet(ctx, j.UnitID)
				if err != nil {
					return err
				}
				want := store.JudgedUnit{ID: u.ID, RunID: u.RunID, State: u.State, Golden: u.Golden,
					JudgmentCount: u.JudgmentCount, JudgmentsPerUnit: u.JudgmentsPerUnit}
				if *ins.Unit != want {
					return fmt.Errorf("the insert's unit %+v, read %+v", *ins.Unit, want)
				}
				if u.JudgmentCount < u.JudgmentsPerUnit {
					return errors.New("not complete")
				}
				// A refused change leaves the transaction usable.
				if _, err := tx.UnitTransition(ctx, &store.UnitTransitionParams{ID: u.ID, From: crowd.UnitNew,
					To: crowd.UnitJudgable, Now: sinceBase(time.Minute)}); err == nil {
					return errors.New("transition from the wrong state went through")
				}
				// Finalized later: outside a judgment batch, at once.
				var fin *crowd.Unit
				if err := tx.UnitFinalizeLater(ctx, &store.UnitFinalizeParams{ID: u.ID, Result: json.RawMessage(`"yes"`),
					Now: sinceBase(time.Minute)}, func(u *crowd.Unit) { fin = u }); err != nil {
					return err
				}
				if fin == nil || fin.State != crowd.UnitFinalized {
					return fmt.Errorf("finalized later outside a batch: %+v", fin)
				}
				// Again: refused, the error at once.
				var ite *crowd.InvalidTransitionError
				if err := tx.UnitFinalizeLater(ctx, &store.UnitFinalizeParams{ID: u.ID, Result: json.RawMessage(`"yes"`),
					Now: sinceBase(time.Minute)}, func(*crowd.Unit) {}); !errors.As(err, &ite) {
					return fmt.Errorf("finalized twice: %v", err)
				}
				return ret
			})
		}
		mark := b.outboxMark(t)
		require.ErrorIs(t, intake(boom), boom)
		b.requireNoOutbox(t, mark)
		require.Equal(t, crowd.PoolCounts{Judgable: 1, ActiveAssignments: 1}, b.counts(t, p.ID), "rolled back")

		require.NoError(t, intake(nil))
		require.Equal(t, crowd.PoolCounts{Finalized: 1, Judgments: 1}, b.counts(t, p.ID))
		evs := b.outboxSince(t, mark)
		require.Len(t, evs, 2)
		require.Equal(t, crowd.EventJudgmentReceived, evs[0].Type)
		require.Equal(t, crowd.EventUnitFinalized, evs[1].Type)
	})
}

// judgmentTxParams are JudgmentInTx's parameters for judgment id of
// assignment a with data, a minute after base; the unit is told when
// unitKnown (PostgreSQL may then batch it), else only its run is looked
// up through it.
func judgmentTxParams(pool uuid.UUID, a *crowd.Assignment, data string, id uuid.UUID, unitKnown bool) *store.JudgmentInTxParams {
	tp := &store.JudgmentInTxParams{PoolID: pool, RunOfUnit: a.UnitID, Insert: store.JudgmentInsertParams{ID: id,
		AssignmentID: a.ID, ContributorID: a.ContributorID, Data: json.RawMessage(data), Now: sinceBase(time.Minute)}}
	if unitKnown {
		tp.UnitID = a.UnitID
	}
	return tp
}
