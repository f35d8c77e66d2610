package docket

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/quality"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// qualityFixture is a client with a movable clock, the same-product task
// and one pool per step of a workflow, each with the quality settings a
// test gives (the store's PoolCreate: the API has no such knob yet).
type qualityFixture struct {
	c   *Client
	now *atomic.Int64
}

func newQualityFixture(t *testing.T, backend testdb.Backend, steps ...string) *qualityFixture {
	t.Helper()
	ctx := context.Background()
	now := &atomic.Int64{}
	now.Store(time.Now().UnixNano())
	c, err := NewClient(ctx, Config{DatabaseURL: backend.URL(t), AutoMigrate: true, TakeStrategy: TakeOrdered,
		Now: func() time.Time { return time.Unix(0, now.Load()) }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	tmpl, err := ParseTask([]byte(crowdTemplate))
	require.NoError(t, err)
	_, _, err = c.TaskPut(ctx, "same-product", tmpl)
	require.NoError(t, err)
	def := `{"name": "wf", "steps": [`
	for i, s := range steps {
		if i > 0 {
			def += ","
		}
		def += `{"name": "` + s + `", "human": {"task": "same-product"}}`
	}
	wf, err := DecodeWorkflow([]byte(def + `]}`))
	require.NoError(t, err)
	_, _, err = c.WorkflowPut(ctx, wf)
	require.NoError(t, err)
	return &qualityFixture{c: c, now: now}
}

// pool creates the pool of step with settings and inserts golden units
// (answer {"same": "yes"}) and regular units of no run.
func (f *qualityFixture) pool(t *testing.T, step, settings string, golden, regular int) (*Pool, []uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	_, err := quality.Decode([]byte(settings))
	require.NoError(t, err)
	pool, created, err := f.c.store.PoolCreate(ctx, &store.PoolCreateParams{ID: uuid.Must(uuid.NewV7()), Workflow: "wf", WorkflowVersion: 1,
		Step: step, Task: "same-product", TaskVersion: 1, JudgmentsPerUnit: 3, AssignmentSeconds: 600,
		Settings: json.RawMessage(settings), Now: f.c.cfg.Now()})
	require.NoError(t, err)
	require.True(t, created)
	if golden > 0 {
		var gs []*store.UnitInsertParams
		for range golden {
			gs = append(gs, &store.UnitInsertParams{ID: uuid.Must(uuid.NewV7()), Input: json.RawMessage(`{}`), Golden: true, Answer: json.RawMessage(`{"same": "yes"}`)})
		}
		_, err = f.c.store.UnitInsertMany(ctx, &store.UnitInsertManyParams{PoolID: pool.ID, State: crowd.UnitJudgable, Units: gs, Now: f.c.cfg.Now()})
		require.NoError(t, err)
	}
	var ids []uuid.UUID
	if regular > 0 {
		var us []*store.UnitInsertParams
		for range regular {
			id := uuid.Must(uuid.NewV7())
			ids = append(ids, id)
			us = append(us, &store.UnitInsertParams{ID: id, Input: json.RawMessage(`{}`)})
		}
		_, err = f.c.store.UnitInsertMany(ctx, &store.UnitInsertManyParams{PoolID: pool.ID, State: crowd.UnitJudgable, Units: us, Now: f.c.cfg.Now()})
		require.NoError(t, err)
	}
	return pool, ids
}

func (f *qualityFixture) contributor(t *testing.T) uuid.UUID {
	t.Helper()
	who, err := f.c.ContributorCreate(context.Background(), ContributorCreateParams{ExternalID: uuid.NewString()})
	require.NoError(t, err)
	return who.ID
}

// work takes one assignment and judges it: golden units get golden, the
// others regular. It returns the assignment's unit.
func (f *qualityFixture) work(t *testing.T, pool uuid.UUID, who uuid.UUID, golden, regular string) *Unit {
	t.Helper()
	ctx := context.Background()
	taken, err := f.c.AssignmentTake(ctx, pool, who)
	require.NoError(t, err)
	answer := regular
	if taken.Unit.Golden {
		answer = golden
	}
	f.now.Add(int64(10 * time.Second))
	_, err = f.c.JudgmentSubmit(ctx, taken.Assignment.ID, who, json.RawMessage(answer))
	require.NoError(t, err)
	return taken.Unit
}

// events counts the outbox rows by type.
func (f *qualityFixture) events(t *testing.T) map[string][]json.RawMessage {
	t.Helper()
	rows, err := f.c.store.OutboxList(context.Background(), &store.OutboxListParams{Limit: 100000})
	require.NoError(t, err)
	out := map[string][]json.RawMessage{}
	for _, r := range rows {
		out[r.Type] = append(out[r.Type], r.Data)
	}
	return out
}

// TestQualitySpammerFlaggedAndRepaired: test questions are mixed in one
// in four; a spammer who judged three regular units answers the fourth
// wrong, is suspect from then on (every assignment a test question) and is
// flagged at the third (0 of 3: under 0.6 with probability 0.99), their
// judgments tainted: the finalized unit they decided is
// reopened (audit + unit.result_changed) and re-decided by a clean
// judgment, the open ones get a slot back; they get no more work. An
// admin's forgiveness un-taints them and recomputes the finalized unit
// (audited again). Every event exactly once.
func TestQualitySpammerFlaggedAndRepaired(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newQualityFixture(t, backend, "label")
			pool, units := f.pool(t, "label", `{"quizSize": 0, "testEvery": 4, "minTests": 3, "minTrust": 0.6}`, 5, 3)
			r1, r2, r3 := units[0], units[1], units[2]
			g1, g2, honestNo, spammer := f.contributor(t), f.contributor(t), f.contributor(t), f.contributor(t)
			const yes, no = `{"same": "yes"}`, `{"same": "no"}`

			// Assignment 1 of each is regular (the 4th is the first test
			// question): R1 gets no, yes, no.
			require.Equal(t, r1, f.work(t, pool.ID, spammer, no, no).ID)
			require.Equal(t, r1, f.work(t, pool.ID, g1, yes, yes).ID)
			require.Equal(t, r1, f.work(t, pool.ID, honestNo, yes, no).ID)
			u1, err := f.c.UnitGet(ctx, r1)
			require.NoError(t, err)
			require.Equal(t, UnitFinalized, u1.State)
			require.JSONEq(t, `{"same": "no"}`, string(u1.Result))

			// The spammer: R2, R3, test (wrong: suspect), test, test →
			// flagged at the third.
			seen := map[uuid.UUID]bool{}
			for i, want := range []uuid.UUID{r2, r3, uuid.Nil, uuid.Nil, uuid.Nil} {
				got := f.work(t, pool.ID, spammer, no, no)
				if want == uuid.Nil {
					require.True(t, got.Golden, "assignment %d is a test question", i+2)
					require.False(t, seen[got.ID], "a test question twice")
					seen[got.ID] = true
				} else {
					require.Equal(t, want, got.ID)
				}
			}
			st, err := f.c.ContributorQualityGet(ctx, pool.ID, spammer)
			require.NoError(t, err)
			require.True(t, st.Standing.Flagged)
			require.Equal(t, quality.CheckTrust, st.Standing.Check)
			require.Equal(t, 3, st.Trust.TestsAnswered)
			require.Equal(t, 0, st.Trust.TestsCorrect)
			require.Equal(t, quality.Counts{Taken: 6, TestsTaken: 3}, st.Counts)
			hist, err := f.c.TrustHistory(ctx, pool.ID, spammer)
			require.NoError(t, err)
			require.Len(t, hist, 3)
			// The assignments' golden flag was written: 3 test questions.
			require.NoError(t, f.c.store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
				n, err := tx.AssignmentCountGolden(ctx, pool.ID, spammer)
				require.Equal(t, 3, n)
				return err
			}))

			// No more work for them, refused as other refusals are.
			_, err = f.c.AssignmentTake(ctx, pool.ID, spammer)
			var ne *NotEligibleError
			require.True(t, errors.As(err, &ne), "%v", err)

			// Every judgment of theirs is tainted, none of the others'.
			js, err := f.c.store.JudgmentList(ctx, &store.JudgmentListParams{PoolID: pool.ID})
			require.NoError(t, err)
			for _, j := range js {
				require.Equal(t, j.ContributorID == spammer, j.Tainted, "judgment %s of %s", j.ID, j.ContributorID)
			}
			// R1 was FINALIZED with 2 clean judgments left: reopened, audited.
			u1, err = f.c.UnitGet(ctx, r1)
			require.NoError(t, err)
			require.Equal(t, UnitJudgable, u1.State)
			require.Nil(t, u1.Result)
			require.Equal(t, 4, u1.JudgmentsPerUnit)
			audits, err := f.c.UnitAudits(ctx, r1)
			require.NoError(t, err)
			require.Len(t, audits, 1)
			require.Equal(t, quality.RepairReopen, audits[0].Action)
			require.Equal(t, spammer, audits[0].Cause.ContributorID)
			require.JSONEq(t, `{"same": "no"}`, string(audits[0].Old.Value))
			require.Nil(t, audits[0].New.Value)
			// The open ones get their slot back.
			for _, id := range []uuid.UUID{r2, r3} {
				u, err := f.c.UnitGet(ctx, id)
				require.NoError(t, err)
				require.Equal(t, UnitJudgable, u.State)
				require.Equal(t, 4, u.JudgmentsPerUnit)
				audits, err := f.c.UnitAudits(ctx, id)
				require.NoError(t, err)
				require.Empty(t, audits, "an open unit has no result to audit")
			}

			// A clean judgment re-decides R1: yes, no, yes.
			require.Equal(t, r1, f.work(t, pool.ID, g2, yes, yes).ID)
			u1, err = f.c.UnitGet(ctx, r1)
			require.NoError(t, err)
			require.Equal(t, UnitFinalized, u1.State)
			require.JSONEq(t, `{"same": "yes"}`, string(u1.Result))

			ev := f.events(t)
			require.Len(t, ev[quality.EventTestJudgmentEvaluated], 3)
			require.Len(t, ev[quality.EventContributorFlagged], 1)
			require.Len(t, ev[quality.EventUnitResultChanged], 1)
			var flagged quality.ContributorFlaggedData
			require.NoError(t, json.Unmarshal(ev[quality.EventContributorFlagged][0], &flagged))
			require.Equal(t, spammer, flagged.ContributorID)
			require.Equal(t, pool.ID, flagged.PoolID)
			var evaluated map[string]any
			require.NoError(t, json.Unmarshal(ev[quality.EventTestJudgmentEvaluated][0], &evaluated))
			require.Equal(t, false, evaluated["correct"])
			for _, k := range []string{"judgmentId", "contributorId", "poolId"} {
				require.NotEmpty(t, evaluated[k], k)
			}

			// R2's freed slot and two more are handed out before the
			// forgiveness (taken, not yet submitted): 4 slots of its target 4.
			for _, who := range []uuid.UUID{g1, g2, honestNo} {
				tk, err := f.c.AssignmentTake(ctx, pool.ID, who)
				require.NoError(t, err)
				require.Equal(t, r2, tk.Unit.ID)
			}

			// Forgiven: un-tainted; R1 has 4 clean judgments now (2 yes,
			// 2 no): recomputed, its confidence changes, audited again.
			st, err = f.c.ContributorForgive(ctx, pool.ID, spammer, "admin-key")
			require.NoError(t, err)
			require.False(t, st.Standing.Flagged)
			require.Equal(t, 0, st.Trust.TestsAnswered)
			js, err = f.c.store.JudgmentList(ctx, &store.JudgmentListParams{PoolID: pool.ID})
			require.NoError(t, err)
			for _, j := range js {
				require.False(t, j.Tainted)
			}
			audits, err = f.c.UnitAudits(ctx, r1)
			require.NoError(t, err)
			require.Len(t, audits, 2)
			require.Equal(t, quality.RepairRecompute, audits[1].Action)
			require.True(t, audits[1].Cause.Untaint)
			require.Equal(t, quality.CheckForgiven, audits[1].Cause.Check)
			u1, err = f.c.UnitGet(ctx, r1)
			require.NoError(t, err)
			require.Equal(t, UnitFinalized, u1.State)
			require.InDelta(t, 0.5, *u1.Confidence, 1e-9)
			u3, err := f.c.UnitGet(ctx, r3)
			require.NoError(t, err)
			require.Equal(t, 3, u3.JudgmentsPerUnit, "back to the target of a unit with no taint")
			u2, err := f.c.UnitGet(ctx, r2)
			require.NoError(t, err)
			require.Equal(t, 4, u2.SlotsTaken)
			require.Equal(t, 4, u2.JudgmentsPerUnit, "never under the slots already handed out")
			// Forgiving again does nothing.
			_, err = f.c.ContributorForgive(ctx, pool.ID, spammer, "admin-key")
			require.NoError(t, err)
			ev = f.events(t)
			require.Len(t, ev[quality.EventContributorUnflagged], 1)
			require.Len(t, ev[quality.EventUnitResultChanged], 2)
			// And they may work again (nothing is left for them here).
			_, err = f.c.AssignmentTake(ctx, pool.ID, spammer)
			require.True(t, IsNoUnit(err), "%v", err)
		})
	}
}

// TestQualityBehaviourChecks: too-fast judgments (judgment.check_failed
// each) flag at the limit; one answer for everything flags once the
// window is full. Both taint, both are per pool.
func TestQualityBehaviourChecks(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newQualityFixture(t, backend, "fast", "pattern")
			fast, _ := f.pool(t, "fast", `{"quizSize": 0, "testEvery": 0, "minSeconds": 5, "tooFastLimit": 2}`, 0, 5)
			pattern, _ := f.pool(t, "pattern", `{"quizSize": 0, "testEvery": 0, "patternWindow": 3, "patternMaxShare": 0.7}`, 0, 5)

			// Too fast: submitted at once (the clock does not move).
			quick := f.contributor(t)
			for i := range 2 {
				taken, err := f.c.AssignmentTake(ctx, fast.ID, quick)
				require.NoError(t, err, "take %d", i)
				_, err = f.c.JudgmentSubmit(ctx, taken.Assignment.ID, quick, json.RawMessage(`{"same": "yes"}`))
				require.NoError(t, err)
			}
			st, err := f.c.ContributorQualityGet(ctx, fast.ID, quick)
			require.NoError(t, err)
			require.True(t, st.Standing.Flagged)
			require.Equal(t, quality.CheckTooFast, st.Standing.Check)
			require.Equal(t, 2, st.TooFast)
			// A patient one is not flagged (10 s per judgment).
			patient := f.contributor(t)
			f.work(t, fast.ID, patient, `{"same": "yes"}`, `{"same": "yes"}`)
			f.work(t, fast.ID, patient, `{"same": "yes"}`, `{"same": "yes"}`)
			st, err = f.c.ContributorQualityGet(ctx, fast.ID, patient)
			require.NoError(t, err)
			require.False(t, st.Standing.Flagged)
			// Not flagged in the other pool.
			st, err = f.c.ContributorQualityGet(ctx, pattern.ID, quick)
			require.NoError(t, err)
			require.False(t, st.Standing.Flagged)

			// One answer for everything: flagged at the third (window 3).
			same := f.contributor(t)
			for i := range 3 {
				f.work(t, pattern.ID, same, `{"same": "no"}`, `{"same": "no"}`)
				st, err = f.c.ContributorQualityGet(ctx, pattern.ID, same)
				require.NoError(t, err)
				require.Equal(t, i == 2, st.Standing.Flagged, "after judgment %d", i+1)
			}
			require.Equal(t, quality.CheckSameAnswer, st.Standing.Check)
			varied := f.contributor(t)
			for _, a := range []string{`{"same": "no"}`, `{"same": "yes"}`, `{"same": "no"}`} {
				f.work(t, pattern.ID, varied, a, a)
			}
			st, err = f.c.ContributorQualityGet(ctx, pattern.ID, varied)
			require.NoError(t, err)
			require.False(t, st.Standing.Flagged)

			ev := f.events(t)
			require.Len(t, ev[quality.EventJudgmentCheckFailed], 2)
			require.Len(t, ev[quality.EventContributorFlagged], 2)
			js, err := f.c.store.JudgmentList(ctx, &store.JudgmentListParams{PoolID: fast.ID, ContributorID: quick})
			require.NoError(t, err)
			require.Len(t, js, 2)
			for _, j := range js {
				require.True(t, j.Tainted)
			}
		})
	}
}

// TestQualityTakeWritesMissedFlag: a judgment committed whose review did
// not (the process died between the two) leaves a trust under the
// minimum unflagged; the contributor's next take writes the flag, with
// its taint, before refusing them — once.
func TestQualityTakeWritesMissedFlag(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newQualityFixture(t, backend, "label")
			// One golden unit: a pool without any schedules no test
			// question and reads no quality state on a take.
			pool, units := f.pool(t, "label", `{"quizSize": 0, "testEvery": 5, "minTests": 3, "minTrust": 0.6}`, 1, 2)
			who := f.contributor(t)
			require.Equal(t, units[0], f.work(t, pool.ID, who, `{"same": "no"}`, `{"same": "no"}`).ID)
			// What the lost review would have acted on: 3 test questions, none right.
			require.NoError(t, f.c.store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
				st, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: pool.ID, ContributorID: who, Now: f.c.cfg.Now()})
				require.NoError(t, err)
				qs := quality.Defaults()
				for range 3 {
					st.Trust = qs.ScoreTest(st.Trust, false, f.c.cfg.Now(), "test")
				}
				st.Trust.History = nil
				return putQualityState(ctx, tx, st, f.c.cfg.Now())
			}))
			for range 2 {
				_, err := f.c.AssignmentTake(ctx, pool.ID, who)
				var ne *NotEligibleError
				require.True(t, errors.As(err, &ne), "%v", err)
			}
			st, err := f.c.ContributorQualityGet(ctx, pool.ID, who)
			require.NoError(t, err)
			require.True(t, st.Standing.Flagged)
			js, err := f.c.store.JudgmentList(ctx, &store.JudgmentListParams{PoolID: pool.ID, ContributorID: who})
			require.NoError(t, err)
			require.Len(t, js, 1)
			require.True(t, js[0].Tainted)
			require.Len(t, f.events(t)[quality.EventContributorFlagged], 1)
		})
	}
}

// TestQualityGoldenLate: a pool without golden units counts nothing on a
// take; its first golden unit, added through this client, is the next
// take's test question (the quiz starts then), with no wait for the
// node's cache of pools without test questions.
func TestQualityGoldenLate(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newQualityFixture(t, backend, "label")
			pool, _ := f.pool(t, "label", `{"quizSize": 1, "testEvery": 0}`, 0, 3)
			who := f.contributor(t)
			require.False(t, f.work(t, pool.ID, who, `{"same": "yes"}`, `{"same": "yes"}`).Golden)
			st, err := f.c.store.QualityStateGet(ctx, pool.ID, who)
			require.NoError(t, err)
			require.Zero(t, st.Counts.Taken, "no golden unit: the take is not counted")
			_, err = f.c.GoldenAdd(ctx, pool.ID, []GoldenUnit{{Input: json.RawMessage(`{}`), Answer: json.RawMessage(`{"same": "yes"}`)}})
			require.NoError(t, err)
			require.True(t, f.work(t, pool.ID, who, `{"same": "yes"}`, `{"same": "yes"}`).Golden, "the quiz starts with the pool's first golden unit")
			require.False(t, f.work(t, pool.ID, who, `{"same": "yes"}`, `{"same": "yes"}`).Golden, "a quiz of one")
		})
	}
}

// TestQualityFlaggedJudgmentReachingTarget: a contributor flagged while
// holding an assignment submits the judgment that brings its unit to its
// target: tainted at once, it does not count, so the unit, with two clean
// judgments of the three it needs, stays open for one more, though with
// the three alike it would finalize — and the judgment's first statements
// read the unit's judgments before the taint (JudgmentBegun.UnitJudgments),
// which no decision may use (the retaint moves the unit's target past its
// count first; JudgmentSubmit drops them after a retaint besides).
func TestQualityFlaggedJudgmentReachingTarget(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newQualityFixture(t, backend, "label")
			pool, units := f.pool(t, "label", `{}`, 0, 1)
			const yes = `{"same": "yes"}`
			for range 2 {
				require.Equal(t, units[0], f.work(t, pool.ID, f.contributor(t), yes, yes).ID)
			}
			late := f.contributor(t)
			taken, err := f.c.AssignmentTake(ctx, pool.ID, late)
			require.NoError(t, err)
			require.Equal(t, units[0], taken.Unit.ID)
			_, err = f.c.store.PoolContributorPut(ctx, &store.PoolContributorPutParams{PoolID: pool.ID, ContributorID: late,
				Flagged: true, FlagReason: "a test", Now: f.c.cfg.Now()})
			require.NoError(t, err)
			f.now.Add(int64(10 * time.Second))
			sub, err := f.c.JudgmentSubmit(ctx, taken.Assignment.ID, late, json.RawMessage(yes)) // three alike: clean, it would finalize
			require.NoError(t, err)
			require.True(t, sub.Created)
			require.Nil(t, sub.Finalized, "finalized with a tainted judgment")
			u, err := f.c.UnitGet(ctx, units[0])
			require.NoError(t, err)
			require.Equal(t, UnitJudgable, u.State)
			require.Equal(t, 3, u.JudgmentCount)
			require.Equal(t, 4, u.JudgmentsPerUnit, "one more clean judgment wanted")
		})
	}
}

// TestQualityForgiveByNotText: who forgave is text the databases store
// (it goes into the trust history's reason and the contributor.unflagged
// event); a NUL or bytes that are not UTF-8 are a *ValidationError naming
// "by", on both backends, before anything is read.
func TestQualityForgiveByNotText(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			f := newCrowdFixture(t, backend)
			who := f.contributor(t)
			for _, by := range []string{"a\x00b", "a\xffb"} {
				_, err := f.c.ContributorForgive(context.Background(), f.pool.ID, who, by)
				var ve *ValidationError
				require.ErrorAs(t, err, &ve, "%q", by)
				require.Equal(t, "by", ve.Field)
			}
		})
	}
}
