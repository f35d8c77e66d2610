package docket

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/aggregate"
	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

// overlapTemplate is a one-field task with dynamic overlap: 3 to 5
// judgments, target confidence 0.75, aggregated by method.
func overlapTemplate(method string, min, max int, target float64) string {
	return fmt.Sprintf(`{"title": "Same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true, "aggregation": %q,
             "options": [{"value": "yes"}, {"value": "no"}]}],
 "judgmentsPerUnit": {"min": %d, "max": %d, "targetConfidence": %g}, "assignmentSeconds": 60}`, method, min, max, target)
}

// newTaskFixture: a client with a movable clock, the task template tmpl
// as "same-product", a workflow "wf" whose step "label" uses it, and its
// pool.
func newTaskFixture(t *testing.T, backend testdb.Backend, tmpl string) *crowdFixture {
	t.Helper()
	ctx := context.Background()
	now := &atomic.Int64{}
	now.Store(time.Now().UnixNano())
	c, err := NewClient(ctx, Config{DatabaseURL: backend.URL(t), AutoMigrate: true, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	tpl, err := ParseTask([]byte(tmpl))
	require.NoError(t, err)
	_, _, err = c.TaskPut(ctx, "same-product", tpl)
	require.NoError(t, err)
	def, err := DecodeWorkflow([]byte(`{"name": "wf", "steps": [{"name": "label", "human": {"task": "same-product"}}]}`))
	require.NoError(t, err)
	_, _, err = c.WorkflowPut(ctx, def)
	require.NoError(t, err)
	pool, _, err := c.PoolEnsure(ctx, "wf", 1, "label", "same-product")
	require.NoError(t, err)
	return &crowdFixture{c: c, now: now, pool: pool}
}

// finalizedEvents decodes the pool's unit.finalized outbox rows, by unit.
func (f *crowdFixture) finalizedEvents(t *testing.T) map[uuid.UUID][]crowd.UnitFinalizedData {
	t.Helper()
	out := map[uuid.UUID][]crowd.UnitFinalizedData{}
	var after int64
	for {
		evs, err := f.c.store.OutboxList(context.Background(), &store.OutboxListParams{AfterID: after, Limit: 500})
		require.NoError(t, err)
		if len(evs) == 0 {
			return out
		}
		for _, ev := range evs {
			after = ev.ID
			if ev.Type != crowd.EventUnitFinalized {
				continue
			}
			var d crowd.UnitFinalizedData
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			if d.PoolID == f.pool.ID {
				out[d.UnitID] = append(out[d.UnitID], d)
			}
		}
	}
}

// judgeOnly adds one unit to the pool and has a new contributor judge it
// for each answer, in order (the unit is the only one open, so each take
// gets it); it returns the unit and the contributors. After the last
// answer the unit must be final, and a further take find nothing.
func (f *crowdFixture) judgeOnly(t *testing.T, answers ...string) (*Unit, []uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	us, err := f.c.UnitsAdd(ctx, f.pool.ID, []json.RawMessage{json.RawMessage(`{}`)})
	require.NoError(t, err)
	var who []uuid.UUID
	for i, a := range answers {
		c := f.contributor(t)
		who = append(who, c)
		taken, err := f.c.AssignmentTake(ctx, f.pool.ID, c)
		require.NoError(t, err, "judgment %d of %v", i+1, answers)
		require.Equal(t, us[0].ID, taken.Unit.ID)
		sub, err := f.c.JudgmentSubmit(ctx, taken.Assignment.ID, c, json.RawMessage(fmt.Sprintf(`{"same": %q}`, a)))
		require.NoError(t, err)
		require.Equal(t, i == len(answers)-1, sub.Finalized != nil, "judgment %d of %v finalizes only as the last", i+1, answers)
		if i < len(answers)-1 {
			u, err := f.c.UnitGet(ctx, us[0].ID)
			require.NoError(t, err)
			require.Equal(t, UnitJudgable, u.State)
			require.Equal(t, max(3, i+2), u.JudgmentsPerUnit, "after judgment %d of %v: the target", i+1, answers)
		}
	}
	_, err = f.c.AssignmentTake(ctx, f.pool.ID, f.contributor(t))
	require.True(t, IsNoUnit(err), "no slot is left on a final unit: %v", err)
	u, err := f.c.UnitGet(ctx, us[0].ID)
	require.NoError(t, err)
	require.Equal(t, UnitFinalized, u.State)
	require.Equal(t, len(answers), u.JudgmentCount)
	return u, who
}

// requireAgreements asserts the one unit.finalized of u says each of
// who's judgments agreed as want, oldest first.
func requireAgreements(t *testing.T, ev crowd.UnitFinalizedData, who []uuid.UUID, want ...bool) {
	t.Helper()
	require.Len(t, ev.Judgments, len(want))
	for i, j := range ev.Judgments {
		require.Equal(t, who[i], j.ContributorID, "judgment %d", i)
		require.NotEqual(t, uuid.Nil, j.JudgmentID)
		require.Equal(t, want[i], j.Agreed, "judgment %d", i)
	}
}

// TestDynamicOverlap: with 3 to 5 judgments and a target confidence of
// 0.75 (majority vote), agreeing judgments finalize at the minimum; a
// dispute gets one more slot at a time, finalizes when it reaches the
// target, and at the maximum finalizes with low confidence; unit.finalized
// says so, with each judgment's agreement.
func TestDynamicOverlap(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			f := newTaskFixture(t, backend, overlapTemplate("majority", 3, 5, 0.75))

			agree, agreeWho := f.judgeOnly(t, "yes", "yes", "yes")
			require.JSONEq(t, `{"same": "yes"}`, string(agree.Result))
			require.InDelta(t, 1, *agree.Confidence, 1e-9)
			require.Equal(t, 3, agree.JudgmentsPerUnit, "finalized at the minimum")

			// 2 of 3 (0.67): one more; 3 of 4 (0.75) reaches the target.
			won, wonWho := f.judgeOnly(t, "yes", "no", "yes", "yes")
			require.JSONEq(t, `{"same": "yes"}`, string(won.Result))
			require.InDelta(t, 0.75, *won.Confidence, 1e-9)

			// 2 of 3, 2 of 4, 3 of 5 (0.6) at the maximum: low confidence.
			low, lowWho := f.judgeOnly(t, "yes", "no", "no", "yes", "no")
			require.JSONEq(t, `{"same": "no"}`, string(low.Result))
			require.InDelta(t, 0.6, *low.Confidence, 1e-9)
			require.Equal(t, 5, low.JudgmentsPerUnit, "never past the maximum")

			evs := f.finalizedEvents(t)
			require.Len(t, evs, 3)
			for _, u := range []*Unit{agree, won, low} {
				require.Len(t, evs[u.ID], 1, "one unit.finalized per unit")
				ev := evs[u.ID][0]
				require.JSONEq(t, string(u.Result), string(ev.Result))
				require.InDelta(t, *u.Confidence, *ev.Confidence, 1e-9)
				require.Equal(t, u.JudgmentCount, ev.JudgmentCount)
				require.Equal(t, u == low, ev.LowConfidence, "lowConfidence only at the maximum under the target")
				require.Equal(t, u == low, u.LowConfidence, "and on the unit (UnitGet)")
			}
			requireAgreements(t, evs[agree.ID][0], agreeWho, true, true, true)
			requireAgreements(t, evs[won.ID][0], wonWho, true, false, true, true)
			requireAgreements(t, evs[low.ID][0], lowWho, false, true, true, false, true)
		})
	}
}

// TestOverlapWithoutTarget: a task with no target confidence finalizes
// every unit at the minimum, disputed or not (the behaviour before
// dynamic overlap), and not flagged lowConfidence.
func TestOverlapWithoutTarget(t *testing.T) {
	t.Parallel()
	backend := testdb.Backends()[0]
	f := newTaskFixture(t, backend, overlapTemplate("majority", 3, 5, 0))
	u, _ := f.judgeOnly(t, "yes", "no", "no")
	require.InDelta(t, 2.0/3, *u.Confidence, 1e-9)
	ev := f.finalizedEvents(t)[u.ID]
	require.Len(t, ev, 1)
	require.False(t, ev[0].LowConfidence)
}

// TestFinalizeWeighsTrust: the weighted method weighs each judgment by
// its contributor's trust snapshot, and a judgment with none by
// PriorTrust (0.5).
func TestFinalizeWeighsTrust(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			// minTrust 0: the contributor of trust 0.2 is not flagged (and
			// refused work) by quality control.
			tmpl := strings.Replace(overlapTemplate("weighted", 2, 3, 0.7), `"assignmentSeconds": 60}`,
				`"assignmentSeconds": 60, "quality": {"minTrust": 0}}`, 1)
			f := newTaskFixture(t, backend, tmpl)
			trusted := func(trust float64) uuid.UUID {
				c := f.contributor(t)
				_, err := f.c.store.PoolContributorPut(ctx, &store.PoolContributorPutParams{PoolID: f.pool.ID, ContributorID: c,
					Trust: &trust, TestsAnswered: 10, TestsCorrect: int(trust * 10), Now: f.c.cfg.Now()})
				require.NoError(t, err)
				return c
			}
			judge := func(unitID, c uuid.UUID, answer string) *SubmittedJudgment {
				t.Helper()
				taken, err := f.c.AssignmentTake(ctx, f.pool.ID, c)
				require.NoError(t, err)
				require.Equal(t, unitID, taken.Unit.ID)
				sub, err := f.c.JudgmentSubmit(ctx, taken.Assignment.ID, c, json.RawMessage(fmt.Sprintf(`{"same": %q}`, answer)))
				require.NoError(t, err)
				return sub
			}

			// 0.9 against 0.2: "no" with 0.9/1.1 = 0.82 ≥ 0.7 at two
			// judgments, where a majority vote would tie (and pick "yes").
			us, err := f.c.UnitsAdd(ctx, f.pool.ID, []json.RawMessage{json.RawMessage(`{}`)})
			require.NoError(t, err)
			require.Nil(t, judge(us[0].ID, trusted(0.9), "no").Finalized)
			sub := judge(us[0].ID, trusted(0.2), "yes")
			require.NotNil(t, sub.Finalized)
			require.JSONEq(t, `{"same": "no"}`, string(sub.Finalized.Result))
			require.InDelta(t, 0.9/1.1, *sub.Finalized.Confidence, 1e-9)

			// 0.9 against none (0.5): 0.64, one more; another none for
			// "no": 1.4/1.9 = 0.74 ≥ 0.7. Were none weighed 1, it would be
			// 1.9/2.9 = 0.66, low confidence at the maximum.
			us, err = f.c.UnitsAdd(ctx, f.pool.ID, []json.RawMessage{json.RawMessage(`{}`)})
			require.NoError(t, err)
			require.Nil(t, judge(us[0].ID, trusted(0.9), "no").Finalized)
			require.Nil(t, judge(us[0].ID, f.contributor(t), "yes").Finalized)
			sub = judge(us[0].ID, f.contributor(t), "no")
			require.NotNil(t, sub.Finalized)
			require.InDelta(t, 1.4/1.9, *sub.Finalized.Confidence, 1e-9)
			ev := f.finalizedEvents(t)[us[0].ID]
			require.Len(t, ev, 1)
			require.False(t, ev[0].LowConfidence)
		})
	}
}

// TestFinalizeWithPoolModel: a Dawid-Skene pool finalizes with the
// weighted vote until the maintenance leader (the pool-estimator) has
// estimated its model; then a unit's confidence is its posterior under
// the stored model, which knows that one contributor always answers
// wrong.
func TestFinalizeWithPoolModel(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newTaskFixture(t, backend, overlapTemplate("ds", 3, 3, 0))
			good1, good2, contrary := f.contributor(t), f.contributor(t), f.contributor(t)
			flip := map[string]string{"yes": "no", "no": "yes"}
			judgeAll := func(truth string) *Unit {
				t.Helper()
				us, err := f.c.UnitsAdd(ctx, f.pool.ID, []json.RawMessage{json.RawMessage(`{}`)})
				require.NoError(t, err)
				var last *SubmittedJudgment
				for _, c := range []struct {
					who    uuid.UUID
					answer string
				}{{good1, truth}, {good2, truth}, {contrary, flip[truth]}} {
					taken, err := f.c.AssignmentTake(ctx, f.pool.ID, c.who)
					require.NoError(t, err)
					require.Equal(t, us[0].ID, taken.Unit.ID)
					last, err = f.c.JudgmentSubmit(ctx, taken.Assignment.ID, c.who, json.RawMessage(fmt.Sprintf(`{"same": %q}`, c.answer)))
					require.NoError(t, err)
				}
				require.NotNil(t, last.Finalized)
				return last.Finalized
			}
			estimate := func() bool {
				t.Helper()
				p, err := f.c.PoolGet(ctx, f.pool.ID)
				require.NoError(t, err)
				done, err := f.c.PoolEstimate(ctx, p, false)
				require.NoError(t, err)
				return done
			}
			for i := range 12 {
				if i == 9 {
					require.False(t, estimate(), "27 judgments: under PoolEstimateMinJudgments")
				}
				u := judgeAll([]string{"yes", "no"}[i%2])
				require.InDelta(t, 2.0/3, *u.Confidence, 1e-9, "no model yet: the weighted vote, every trust the prior")
			}

			w := NewWorker(f.c, WorkerConfig{PoolEstimateInterval: 10 * time.Millisecond, LeaderTTL: time.Second})
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { w.Stop(ctx) })
			var stored []*store.PoolModel
			deadline := time.Now().Add(20 * time.Second)
			for {
				var err error
				stored, err = f.c.store.PoolModelList(ctx, f.pool.ID)
				require.NoError(t, err)
				if len(stored) == 1 {
					break
				}
				require.True(t, time.Now().Before(deadline), "the pool-estimator did not estimate the pool")
				time.Sleep(20 * time.Millisecond)
			}
			require.Equal(t, "same", stored[0].Field)
			require.Equal(t, 36, stored[0].Judgments)
			// Stopped, so that the judgments below are finalized with the
			// model read here (it would re-estimate after each).
			w.Stop(ctx)
			f.c.forgetPoolModels(f.pool.ID)

			model := &aggregate.Model{}
			require.NoError(t, json.Unmarshal(stored[0].Model, model))
			want, err := model.Posterior("u", []aggregate.Vote{
				{Worker: good1.String(), Label: "yes"}, {Worker: good2.String(), Label: "yes"}, {Worker: contrary.String(), Label: "no"}})
			require.NoError(t, err)
			require.Equal(t, "yes", want.Label)
			require.Greater(t, want.Confidence, 0.9, "the model learned the contrary contributor")

			require.False(t, estimate(), "no judgment since the last estimate")

			u := judgeAll("yes")
			require.JSONEq(t, `{"same": "yes"}`, string(u.Result))
			require.InDelta(t, want.Confidence, *u.Confidence, 1e-9, "the posterior under the stored model")
			require.True(t, estimate(), "three judgments since")
			stored, err = f.c.store.PoolModelList(ctx, f.pool.ID)
			require.NoError(t, err)
			require.Equal(t, 39, stored[0].Judgments)
		})
	}
}

// TestDynamicOverlapConcurrent: many contributors take and judge the
// units of one pool at once, at random. Every unit ends FINALIZED exactly
// once (one unit.finalized each), with 3 to 5 judgments, never more.
func TestDynamicOverlapConcurrent(t *testing.T) {
	t.Parallel()
	const (
		units        = 12
		contributors = 16
	)
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newTaskFixture(t, backend, overlapTemplate("majority", 3, 5, 0.75))
			inputs := make([]json.RawMessage, units)
			for i := range inputs {
				inputs[i] = json.RawMessage(fmt.Sprintf(`{"n": %d}`, i))
			}
			_, err := f.c.UnitsAdd(ctx, f.pool.ID, inputs)
			require.NoError(t, err)
			who := make([]uuid.UUID, contributors)
			for i := range who {
				who[i] = f.contributor(t)
			}

			var (
				wg        sync.WaitGroup
				finalized atomic.Int32
				errs      = make(chan error, contributors)
				deadline  = time.Now().Add(60 * time.Second)
			)
			for i, c := range who {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rnd := rand.New(rand.NewPCG(uint64(i), 7))
					for time.Now().Before(deadline) {
						taken, err := f.c.AssignmentTake(ctx, f.pool.ID, c)
						if IsNoUnit(err) {
							p, err := f.c.PoolGet(ctx, f.pool.ID)
							if err != nil {
								errs <- err
								return
							}
							if p.Counts.Finalized == units {
								return
							}
							// Another contributor holds the last slots of the
							// units left to this one: look again shortly.
							time.Sleep(5 * time.Millisecond)
							continue
						}
						if err != nil {
							errs <- err
							return
						}
						answer := []string{"yes", "no"}[rnd.IntN(2)]
						sub, err := f.c.JudgmentSubmit(ctx, taken.Assignment.ID, c, json.RawMessage(fmt.Sprintf(`{"same": %q}`, answer)))
						if err != nil {
							errs <- err
							return
						}
						if sub.Finalized != nil {
							finalized.Add(1)
						}
					}
					errs <- fmt.Errorf("contributor %d: the pool was not finalized in time", i)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Equal(t, int32(units), finalized.Load(), "each unit finalized by exactly one judgment")

			all, err := f.c.UnitList(ctx, f.pool.ID, UnitListParams{})
			require.NoError(t, err)
			require.Len(t, all, units)
			evs := f.finalizedEvents(t)
			require.Len(t, evs, units)
			disputed := 0
			for _, u := range all {
				require.Equal(t, UnitFinalized, u.State)
				require.GreaterOrEqual(t, u.JudgmentCount, 3)
				require.LessOrEqual(t, u.JudgmentCount, 5, "never more judgments than the maximum")
				js, err := f.c.JudgmentList(ctx, u.ID)
				require.NoError(t, err)
				require.Len(t, js, u.JudgmentCount)
				require.Len(t, evs[u.ID], 1, "one unit.finalized per unit")
				ev := evs[u.ID][0]
				require.Equal(t, u.JudgmentCount, ev.JudgmentCount)
				require.Len(t, ev.Judgments, u.JudgmentCount)
				require.Equal(t, *u.Confidence < 0.75, ev.LowConfidence)
				require.Equal(t, ev.LowConfidence, u.JudgmentCount == 5 && *u.Confidence < 0.75)
				require.Equal(t, ev.LowConfidence, u.LowConfidence, "the unit (UnitList) says it as the event did")
				if u.JudgmentCount == 3 {
					require.InDelta(t, 1, *u.Confidence, 1e-9, "only agreement finalizes at the minimum")
				} else {
					disputed++
				}
			}
			t.Logf("%d units, %d of them disputed (more than 3 judgments)", units, disputed)
		})
	}
}

// TestOverlapTaintedShort: a unit that reaches its target with a tainted
// judgment among them waits: its target grows by the clean judgments it
// lacks, and it finalizes on the minimum of clean ones, the tainted one
// neither counted nor listed in unit.finalized.
func TestOverlapTaintedShort(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newTaskFixture(t, backend, overlapTemplate("majority", 3, 5, 0.75))
			us, err := f.c.UnitsAdd(ctx, f.pool.ID, []json.RawMessage{json.RawMessage(`{}`)})
			require.NoError(t, err)
			judge := func(answer string) (uuid.UUID, *SubmittedJudgment) {
				t.Helper()
				c := f.contributor(t)
				taken, err := f.c.AssignmentTake(ctx, f.pool.ID, c)
				require.NoError(t, err)
				sub, err := f.c.JudgmentSubmit(ctx, taken.Assignment.ID, c, json.RawMessage(fmt.Sprintf(`{"same": %q}`, answer)))
				require.NoError(t, err)
				return c, sub
			}
			spammer, _ := judge("no")
			err = f.c.store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
				if _, err := tx.QualityStateLock(ctx, &store.QualityStateLockParams{PoolID: f.pool.ID, ContributorID: spammer, Now: f.c.cfg.Now()}); err != nil {
					return err
				}
				_, err := tx.JudgmentTaintMany(ctx, &store.JudgmentTaintManyParams{PoolID: f.pool.ID, ContributorID: spammer, Tainted: true})
				return err
			})
			require.NoError(t, err)
			a, _ := judge("yes")
			b, sub := judge("yes")
			require.Nil(t, sub.Finalized, "3 judgments, 2 of them clean: under the minimum")
			u, err := f.c.UnitGet(ctx, us[0].ID)
			require.NoError(t, err)
			require.Equal(t, 4, u.JudgmentsPerUnit, "one more slot for the clean judgment it lacks")
			c, sub := judge("yes")
			require.NotNil(t, sub.Finalized)
			require.InDelta(t, 1, *sub.Finalized.Confidence, 1e-9, "the tainted \"no\" does not count")
			ev := f.finalizedEvents(t)[us[0].ID]
			require.Len(t, ev, 1)
			require.Equal(t, 4, ev[0].JudgmentCount)
			requireAgreements(t, ev[0], []uuid.UUID{a, b, c}, true, true, true)
		})
	}
}
