package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
)

// newWorkflowName returns a workflow name no other test uses.
func newWorkflowName() string { return "wf_" + uuid.NewString()[:8] }

// putParams describes a one-step definition of name whose job type is
// jobType, in canonical form with its hash.
func putParams(t *testing.T, name, jobType string) *store.WorkflowPutParams {
	t.Helper()
	def := &flow.Definition{Name: name, Steps: []flow.Step{{Name: "a", Job: &flow.JobStep{Type: jobType}}}}
	canon, err := flow.Canonical(def)
	require.NoError(t, err)
	hash, err := flow.Hash(def)
	require.NoError(t, err)
	return &store.WorkflowPutParams{Name: name, Definition: canon, Hash: hash, Now: base}
}

// workflow stores a new workflow and returns its name, at version 1.
func (b *bundle) workflow(t *testing.T) string {
	t.Helper()
	name := newWorkflowName()
	_, created, err := b.s.WorkflowPut(b.ctx, putParams(t, name, "fetch"))
	require.NoError(t, err)
	require.True(t, created)
	return name
}

func newRun(workflow string) *store.RunInsertParams {
	return &store.RunInsertParams{ID: newID(), Workflow: workflow, Version: 1, Input: json.RawMessage(`{"n":1}`)}
}

// insertRuns inserts ps at base.
func (b *bundle) insertRuns(t *testing.T, ps ...*store.RunInsertParams) []*store.RunInsertResult {
	t.Helper()
	res, err := b.s.RunInsertMany(b.ctx, &store.RunInsertManyParams{Runs: ps, Now: base})
	require.NoError(t, err)
	require.Len(t, res, len(ps))
	return res
}

// run inserts one run of a new workflow.
func (b *bundle) run(t *testing.T) *flow.Run {
	t.Helper()
	return b.insertRuns(t, newRun(b.workflow(t)))[0].Run
}

func (b *bundle) insertSteps(t *testing.T, ps ...*store.StepInsertParams) []*store.StepInsertResult {
	t.Helper()
	res, err := b.s.StepInsertMany(b.ctx, &store.StepInsertManyParams{Steps: ps, Now: base})
	require.NoError(t, err)
	require.Len(t, res, len(ps))
	return res
}

// events returns the outbox rows after mark of one type, decoded.
func decodeEvents[T any](t *testing.T, evs []*store.OutboxEvent, eventType string) []T {
	t.Helper()
	var out []T
	for _, ev := range evs {
		require.Equal(t, eventType, ev.Type, "outbox rows: %s", describeEvents(evs))
		var d T
		require.NoError(t, json.Unmarshal(ev.Data, &d))
		out = append(out, d)
	}
	return out
}

// requireOneRunChange asserts the outbox holds exactly one row after mark:
// a run.state_changed row with exactly want.
func (b *bundle) requireOneRunChange(t *testing.T, mark int64, want ...flow.RunTransition) {
	t.Helper()
	ds := decodeEvents[flow.RunStateChangedData](t, b.outboxSince(t, mark), flow.EventRunStateChanged)
	require.Len(t, ds, 1)
	require.ElementsMatch(t, want, ds[0].Transitions)
}

// requireOneStepChange is requireOneRunChange for step.state_changed.
func (b *bundle) requireOneStepChange(t *testing.T, mark int64, want ...flow.StepTransition) {
	t.Helper()
	ds := decodeEvents[flow.StepStateChangedData](t, b.outboxSince(t, mark), flow.EventStepStateChanged)
	require.Len(t, ds, 1)
	require.ElementsMatch(t, want, ds[0].Transitions)
}

// requireFlowInvalidTransition asserts err is a refused change of a run or
// step (of) that reports the state the row was in (from; the asked-for one
// when the state machine refused it before any read) and the asked-for to.
func requireFlowInvalidTransition[S ~string](t *testing.T, err error, of string, from, to S) {
	t.Helper()
	var ite *flow.InvalidTransitionError
	require.ErrorAs(t, err, &ite)
	require.Equal(t, of, ite.Of)
	require.Equal(t, string(from), ite.From, "InvalidTransitionError.From is the row's state")
	require.Equal(t, string(to), ite.To, "InvalidTransitionError.To")
}

// testWorkflowVersions: WorkflowPut, WorkflowGet, WorkflowList.
func testWorkflowVersions(t *testing.T, open opener) {
	t.Run("PutIdenticalChangedAndBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		name := newWorkflowName()
		pa, pb := putParams(t, name, "fetch"), putParams(t, name, "fetch-v2")
		v1, created, err := b.s.WorkflowPut(b.ctx, pa)
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, 1, v1.Version)
		require.Equal(t, pa.Hash, v1.Hash)
		require.JSONEq(t, string(pa.Definition), string(v1.Definition))
		requireTime(t, base, v1.CreatedAt)

		again := *pa
		again.Now = at(time.Hour)
		same, created, err := b.s.WorkflowPut(b.ctx, &again)
		require.NoError(t, err)
		require.False(t, created, "an identical definition is a no-op")
		require.Equal(t, v1, same)

		v2, created, err := b.s.WorkflowPut(b.ctx, pb)
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, 2, v2.Version)
		// The content of version 1 again is new: only the latest counts.
		v3, created, err := b.s.WorkflowPut(b.ctx, pa)
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, 3, v3.Version)
		require.Equal(t, pa.Hash, v3.Hash)

		latest, err := b.s.WorkflowGet(b.ctx, &store.WorkflowGetParams{Name: name})
		require.NoError(t, err)
		require.Equal(t, v3, latest)
		got2, err := b.s.WorkflowGet(b.ctx, &store.WorkflowGetParams{Name: name, Version: 2})
		require.NoError(t, err)
		require.Equal(t, v2, got2)
		_, err = b.s.WorkflowGet(b.ctx, &store.WorkflowGetParams{Name: name, Version: 4})
		require.ErrorIs(t, err, store.ErrNotFound)
		// Past PostgreSQL's integer column too: not found, not a failure
		// to encode the argument.
		for _, v := range []int{math.MaxInt32 + 1, math.MaxInt64} {
			_, err = b.s.WorkflowGet(b.ctx, &store.WorkflowGetParams{Name: name, Version: v})
			require.ErrorIs(t, err, store.ErrNotFound, "version %d", v)
		}
		_, err = b.s.WorkflowGet(b.ctx, &store.WorkflowGetParams{Name: "nope"})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("ConcurrentIdenticalPutsMakeOneVersion", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := putParams(t, newWorkflowName(), "fetch")
		const n = 20
		versions := make([]*flow.Version, n)
		created := make([]bool, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				versions[i], created[i], errs[i] = b.s.WorkflowPut(b.ctx, p)
			}()
		}
		wg.Wait()
		nCreated := 0
		for i := range n {
			require.NoError(t, errs[i])
			require.Equal(t, 1, versions[i].Version)
			if created[i] {
				nCreated++
			}
		}
		require.Equal(t, 1, nCreated)
	})

	t.Run("ConcurrentChangedPutsNumberWithoutGaps", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		name := newWorkflowName()
		const n = 12
		got := make([]*flow.Version, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], _, errs[i] = b.s.WorkflowPut(b.ctx, putParams(t, name, fmt.Sprintf("type-%d", i)))
			}()
		}
		wg.Wait()
		seen := map[int]string{}
		for i := range n {
			require.NoError(t, errs[i])
			_, dup := seen[got[i].Version]
			require.False(t, dup, "version %d given twice", got[i].Version)
			seen[got[i].Version] = got[i].Hash
		}
		for v := 1; v <= n; v++ {
			stored, err := b.s.WorkflowGet(b.ctx, &store.WorkflowGetParams{Name: name, Version: v})
			require.NoError(t, err, "version %d", v)
			require.Equal(t, seen[v], stored.Hash)
		}
		latest, err := b.s.WorkflowGet(b.ctx, &store.WorkflowGetParams{Name: name})
		require.NoError(t, err)
		require.Equal(t, n, latest.Version)
	})

	t.Run("ListLatestByName", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		names := []string{"wf_a", "wf_b", "wf_c"}
		for _, n := range names {
			_, _, err := b.s.WorkflowPut(b.ctx, putParams(t, n, "x"))
			require.NoError(t, err)
		}
		_, _, err := b.s.WorkflowPut(b.ctx, putParams(t, "wf_b", "y"))
		require.NoError(t, err)
		page, err := b.s.WorkflowList(b.ctx, &store.WorkflowListParams{Limit: 2})
		require.NoError(t, err)
		require.Len(t, page, 2)
		require.Equal(t, "wf_a", page[0].Name)
		require.Equal(t, "wf_b", page[1].Name)
		require.Equal(t, 2, page[1].Version, "the latest version")
		rest, err := b.s.WorkflowList(b.ctx, &store.WorkflowListParams{AfterName: page[1].Name, Limit: 2})
		require.NoError(t, err)
		require.Len(t, rest, 1)
		require.Equal(t, "wf_c", rest[0].Name)
	})
}

// testRunInsert: RunInsertMany, its idempotency and its outbox row.
func testRunInsert(t *testing.T, open opener) {
	t.Run("InsertGetAndOutbox", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		wf := b.workflow(t)
		mark := b.outboxMark(t)
		p := newRun(wf)
		p.IdempotencyKey = "order-1"
		res := b.insertRuns(t, p)
		require.False(t, res[0].Duplicate)
		r := res[0].Run
		require.Equal(t, flow.RunRunning, r.State)
		got, err := b.s.RunGet(b.ctx, p.ID)
		require.NoError(t, err)
		require.Equal(t, p.ID, got.ID)
		require.Equal(t, wf, got.Workflow)
		require.Equal(t, 1, got.Version)
		require.JSONEq(t, `{"n":1}`, string(got.Input))
		require.Equal(t, "order-1", got.IdempotencyKey)
		require.Nil(t, got.Output)
		requireTime(t, base, got.CreatedAt)
		require.True(t, got.FinishedAt.IsZero())
		b.requireOneRunChange(t, mark, flow.RunTransition{RunID: p.ID, Workflow: wf, Version: 1, To: flow.RunRunning})

		_, err = b.s.RunGet(b.ctx, newID())
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("UnknownVersionIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := newRun(b.workflow(t))
		p.Version = 2
		_, err := b.s.RunInsertMany(b.ctx, &store.RunInsertManyParams{Runs: []*store.RunInsertParams{p}, Now: base})
		require.Error(t, err)
		_, err = b.s.RunGet(b.ctx, p.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("IdempotencyKeyIsPerWorkflow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		wf1, wf2 := b.workflow(t), b.workflow(t)
		first := newRun(wf1)
		first.IdempotencyKey = "k"
		r1 := b.insertRuns(t, first)[0].Run
		mark := b.outboxMark(t)

		again, inBatch, other := newRun(wf1), newRun(wf1), newRun(wf2)
		again.IdempotencyKey, other.IdempotencyKey = "k", "k"
		newKey, newKeyAgain := newRun(wf1), newRun(wf1)
		newKey.IdempotencyKey, newKeyAgain.IdempotencyKey = "k2", "k2"
		res := b.insertRuns(t, again, inBatch, other, newKey, newKeyAgain)
		require.True(t, res[0].Duplicate)
		require.Equal(t, r1.ID, res[0].Run.ID)
		require.False(t, res[1].Duplicate, "no key: never a duplicate")
		require.False(t, res[2].Duplicate, "the same key in another workflow is another run")
		require.Equal(t, other.ID, res[2].Run.ID)
		require.False(t, res[3].Duplicate)
		require.True(t, res[4].Duplicate, "a key earlier in the batch")
		require.Equal(t, newKey.ID, res[4].Run.ID)
		b.requireOneRunChange(t, mark,
			flow.RunTransition{RunID: inBatch.ID, Workflow: wf1, Version: 1, To: flow.RunRunning},
			flow.RunTransition{RunID: other.ID, Workflow: wf2, Version: 1, To: flow.RunRunning},
			flow.RunTransition{RunID: newKey.ID, Workflow: wf1, Version: 1, To: flow.RunRunning})

		// Only duplicates: no outbox row.
		mark = b.outboxMark(t)
		dup := newRun(wf1)
		dup.IdempotencyKey = "k"
		require.True(t, b.insertRuns(t, dup)[0].Duplicate)
		b.requireNoOutbox(t, mark)
	})

	t.Run("ConcurrentInsertsOfOneKeyMakeOneRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		wf := b.workflow(t)
		const n = 50
		res := make([]*store.RunInsertResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := newRun(wf)
				p.IdempotencyKey = "once"
				var out []*store.RunInsertResult
				out, errs[i] = b.s.RunInsertMany(b.ctx, &store.RunInsertManyParams{Runs: []*store.RunInsertParams{p}, Now: base})
				if errs[i] == nil {
					res[i] = out[0]
				}
			}()
		}
		wg.Wait()
		winners := 0
		for i := range n {
			require.NoError(t, errs[i])
			require.Equal(t, res[0].Run.ID, res[i].Run.ID, "every insert returns the one run")
			if !res[i].Duplicate {
				winners++
			}
		}
		require.Equal(t, 1, winners)
		runs, err := b.s.RunList(b.ctx, &store.RunListParams{Workflow: wf})
		require.NoError(t, err)
		require.Len(t, runs, 1)
		ds := decodeEvents[flow.RunStateChangedData](t, b.outboxSince(t, 0), flow.EventRunStateChanged)
		require.Len(t, ds, 1, "one run.state_changed row for the one run")
	})

	t.Run("ConcurrentBatchesOfOneKeySetDoNotDeadlock", func(t *testing.T) {
		// Batches naming the same keys in different orders (clients
		// resending a batch, a runs:batch upload sent twice): each takes
		// its keys in one order, so none waits for another in a cycle.
		// PostgreSQL aborted some as deadlocks (ErrContention, a 503 of
		// runs:batch) when keys were taken in the batch's order.
		t.Parallel()
		b := setup(t, open)
		wf := b.workflow(t)
		const keys, batches = 400, 4
		for round := range 3 {
			var wg sync.WaitGroup
			errs := make([]error, batches)
			for i := range batches {
				order := make([]int, keys)
				for k := range order {
					order[k] = k
				}
				switch i % 3 {
				case 1:
					slices.Reverse(order)
				case 2:
					rand.New(rand.NewPCG(uint64(round), uint64(i))).Shuffle(keys, func(x, y int) { order[x], order[y] = order[y], order[x] })
				}
				ps := make([]*store.RunInsertParams, keys)
				for j, k := range order {
					ps[j] = newRun(wf)
					ps[j].IdempotencyKey = fmt.Sprintf("r%d-k%d", round, k)
				}
				wg.Go(func() {
					_, errs[i] = b.s.RunInsertMany(b.ctx, &store.RunInsertManyParams{Runs: ps, Now: base})
				})
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "round %d, batch %d", round, i)
			}
		}
		runs, err := b.s.RunList(b.ctx, &store.RunListParams{Workflow: wf, Limit: 10 * keys})
		require.NoError(t, err)
		require.Len(t, runs, 3*keys, "one run per key")
	})

	t.Run("Batch10000", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		wf := b.workflow(t)
		const n = 10_000
		ps := make([]*store.RunInsertParams, n)
		for i := range ps {
			ps[i] = newRun(wf)
			ps[i].IdempotencyKey = fmt.Sprintf("k-%d", i%(n/2)) // half are in-batch duplicates
		}
		mark := b.outboxMark(t)
		start := time.Now()
		res := b.insertRuns(t, ps...)
		t.Logf("%s: inserted %d runs (%d keys) in %v", b.s.Backend(), n, n/2, time.Since(start))
		for i, r := range res {
			require.Equal(t, i >= n/2, r.Duplicate, "run %d", i)
			require.Equal(t, ps[i%(n/2)].ID, r.Run.ID)
		}
		ds := decodeEvents[flow.RunStateChangedData](t, b.outboxSince(t, mark), flow.EventRunStateChanged)
		require.Len(t, ds, 1)
		require.Len(t, ds[0].Transitions, n/2)
		runs, err := b.s.RunList(b.ctx, &store.RunListParams{Workflow: wf})
		require.NoError(t, err)
		require.Len(t, runs, n/2)
	})
}

// testRunList: filters and the cursor of RunList.
func testRunList(t *testing.T, open opener) {
	b := setup(t, open)
	wf1, wf2 := b.workflow(t), b.workflow(t)
	var all []*store.RunInsertParams
	for i := range 6 {
		p := newRun(wf1)
		if i%2 == 1 {
			p.Workflow = wf2
		}
		_, err := b.s.RunInsertMany(b.ctx, &store.RunInsertManyParams{Runs: []*store.RunInsertParams{p}, Now: at(time.Duration(i) * time.Minute)})
		require.NoError(t, err)
		all = append(all, p)
	}
	_, err := b.s.RunTransition(b.ctx, &store.RunTransitionParams{ID: all[0].ID, From: flow.RunRunning, To: flow.RunCanceled, Now: base})
	require.NoError(t, err)
	list := func(p *store.RunListParams) []uuid.UUID {
		t.Helper()
		runs, err := b.s.RunList(b.ctx, p)
		require.NoError(t, err)
		out := make([]uuid.UUID, len(runs))
		for i, r := range runs {
			out[i] = r.ID
		}
		return out
	}
	id := func(is ...int) []uuid.UUID {
		out := make([]uuid.UUID, len(is))
		for i, n := range is {
			out[i] = all[n].ID
		}
		return out
	}
	require.Equal(t, id(5, 4, 3, 2, 1, 0), list(&store.RunListParams{}), "newest first")
	require.Equal(t, id(4, 2, 0), list(&store.RunListParams{Workflow: wf1}))
	require.Equal(t, id(0), list(&store.RunListParams{States: []flow.RunState{flow.RunCanceled}}))
	require.Equal(t, id(4, 2), list(&store.RunListParams{Workflow: wf1, States: []flow.RunState{flow.RunRunning, flow.RunPaused}}))
	require.Equal(t, id(3, 2), list(&store.RunListParams{CreatedAfter: at(2 * time.Minute), CreatedBefore: at(4 * time.Minute)}))
	require.Equal(t, id(5, 4), list(&store.RunListParams{Limit: 2}))
	require.Equal(t, id(3, 2), list(&store.RunListParams{BeforeID: all[4].ID, Limit: 2}))
	require.Equal(t, id(2, 0), list(&store.RunListParams{Workflow: wf1, BeforeID: all[4].ID}))
}

// reachRun moves a new run to state st by allowed transitions.
func (b *bundle) reachRun(t *testing.T, st flow.RunState) *flow.Run {
	t.Helper()
	r := b.run(t)
	if st == flow.RunRunning {
		return r
	}
	r, err := b.s.RunTransition(b.ctx, &store.RunTransitionParams{ID: r.ID, From: flow.RunRunning, To: st, Now: base})
	require.NoError(t, err)
	return r
}

// testRunTransition checks every (from, to) pair against flow's table.
func testRunTransition(t *testing.T, open opener) {
	t.Run("Table", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		for _, from := range flow.RunStates {
			for _, to := range flow.RunStates {
				r := b.reachRun(t, from)
				mark := b.outboxMark(t)
				p := &store.RunTransitionParams{ID: r.ID, From: from, To: to, Now: at(time.Hour), Error: "why"}
				if to == flow.RunSucceeded {
					p.Output = json.RawMessage(`{"ok":true}`)
				}
				got, err := b.s.RunTransition(b.ctx, p)
				if !flow.CanRunTransition(from, to) {
					requireFlowInvalidTransition(t, err, "run", from, to)
					b.requireNoOutbox(t, mark)
					now, err := b.s.RunGet(b.ctx, r.ID)
					require.NoError(t, err)
					require.Equal(t, from, now.State, "%s -> %s refused, nothing changed", from, to)
					continue
				}
				require.NoError(t, err, "%s -> %s", from, to)
				require.Equal(t, to, got.State)
				requireTime(t, at(time.Hour), got.UpdatedAt)
				if to.Terminal() {
					requireTime(t, at(time.Hour), got.FinishedAt)
				} else {
					require.True(t, got.FinishedAt.IsZero(), "%s -> %s", from, to)
				}
				switch to {
				case flow.RunSucceeded:
					require.JSONEq(t, `{"ok":true}`, string(got.Output))
					require.Empty(t, got.Error)
				case flow.RunFailed, flow.RunCanceled:
					require.Nil(t, got.Output)
					require.Equal(t, "why", got.Error)
				default:
					require.Nil(t, got.Output)
					require.Empty(t, got.Error)
				}
				b.requireOneRunChange(t, mark, flow.RunTransition{RunID: r.ID, Workflow: r.Workflow, Version: 1, From: from, To: to})
			}
		}
	})

	t.Run("GuardedByState", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		r := b.run(t)
		mark := b.outboxMark(t)
		// PAUSED → RUNNING is allowed, but the run is RUNNING.
		_, err := b.s.RunTransition(b.ctx, &store.RunTransitionParams{ID: r.ID, From: flow.RunPaused, To: flow.RunRunning, Now: base})
		requireFlowInvalidTransition(t, err, "run", flow.RunRunning, flow.RunRunning)
		var ite *flow.InvalidTransitionError
		require.ErrorAs(t, err, &ite)
		require.Equal(t, r.ID.String(), ite.ID)
		b.requireNoOutbox(t, mark)
		_, err = b.s.RunTransition(b.ctx, &store.RunTransitionParams{ID: newID(), From: flow.RunRunning, To: flow.RunPaused, Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}

// stepParams describes instance index of step "a" of run, RUNNING with a
// new job when running, else PENDING.
func stepParams(run uuid.UUID, index int, running bool) *store.StepInsertParams {
	p := &store.StepInsertParams{RunID: run, Step: "a", Index: index, Kind: flow.KindJob, State: flow.StepPending}
	if running {
		p.State, p.JobID = flow.StepRunning, newID()
	}
	return p
}

// reachStep creates an instance in state st by allowed transitions.
func (b *bundle) reachStep(t *testing.T, run uuid.UUID, index int, st flow.StepState) *flow.StepInstance {
	t.Helper()
	running := st == flow.StepRunning || st == flow.StepSucceeded || st == flow.StepFailed || st == flow.StepCanceled
	s := b.insertSteps(t, stepParams(run, index, running))[0].Step
	if st == flow.StepPending || st == flow.StepRunning {
		return s
	}
	s, err := b.s.StepTransition(b.ctx, &store.StepTransitionParams{
		RunID: run, Step: s.Step, Index: index, Generation: 1, From: s.State, To: st, Now: base,
	})
	require.NoError(t, err)
	return s
}

// testSteps: StepInsertMany, StepList, StepGetByJob, StepTransition.
func testSteps(t *testing.T, open opener) {
	t.Run("InsertListAndOutbox", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		r := b.run(t)
		mark := b.outboxMark(t)
		unit := newID()
		ps := []*store.StepInsertParams{
			{RunID: r.ID, Step: "b", Index: 0, Kind: flow.KindSignal, State: flow.StepRunning},
			stepParams(r.ID, 1, true),
			stepParams(r.ID, 0, false),
			{RunID: r.ID, Step: "h", Index: 0, Kind: flow.KindHuman, State: flow.StepRunning, UnitID: unit},
		}
		res := b.insertSteps(t, ps...)
		for _, x := range res {
			require.False(t, x.Duplicate)
			require.Equal(t, 1, x.Step.Generation)
		}
		list, err := b.s.StepList(b.ctx, r.ID)
		require.NoError(t, err)
		require.Len(t, list, 4)
		var order []string
		for _, s := range list {
			order = append(order, store.InstanceID(s.RunID, s.Step, s.Index))
		}
		require.Equal(t, []string{
			store.InstanceID(r.ID, "a", 0), store.InstanceID(r.ID, "a", 1),
			store.InstanceID(r.ID, "b", 0), store.InstanceID(r.ID, "h", 0),
		}, order, "by step name, then index")
		require.Equal(t, flow.StepPending, list[0].State)
		require.True(t, list[0].StartedAt.IsZero())
		require.Equal(t, flow.StepRunning, list[1].State)
		require.Equal(t, ps[1].JobID, list[1].JobID)
		requireTime(t, base, list[1].StartedAt)
		require.Equal(t, flow.KindSignal, list[2].Kind)

		byJob, err := b.s.StepGetByJob(b.ctx, ps[1].JobID)
		require.NoError(t, err)
		require.Equal(t, list[1], byJob)
		byUnit, err := b.s.StepGetByUnit(b.ctx, unit)
		require.NoError(t, err)
		require.Equal(t, "h", byUnit.Step)
		_, err = b.s.StepGetByJob(b.ctx, newID())
		require.ErrorIs(t, err, store.ErrNotFound)

		var want []flow.StepTransition
		for _, p := range ps {
			want = append(want, flow.StepTransition{RunID: r.ID, Step: p.Step, Index: p.Index, Generation: 1, To: p.State})
		}
		b.requireOneStepChange(t, mark, want...)

		// Again, plus one in-batch duplicate: nothing inserted, no outbox row.
		mark = b.outboxMark(t)
		res = b.insertSteps(t, stepParams(r.ID, 1, true), stepParams(r.ID, 0, true), stepParams(r.ID, 0, true))
		for _, x := range res {
			require.True(t, x.Duplicate)
		}
		require.Equal(t, ps[1].JobID, res[0].Step.JobID, "the existing row")
		require.Equal(t, flow.StepPending, res[1].Step.State)
		b.requireNoOutbox(t, mark)
	})

	t.Run("ConcurrentReleaseOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		r := b.run(t)
		mark := b.outboxMark(t)
		const n = 20
		res := make([]*store.StepInsertResult, n)
		jobs := make([]uuid.UUID, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := stepParams(r.ID, 0, true)
				jobs[i] = p.JobID
				var out []*store.StepInsertResult
				out, errs[i] = b.s.StepInsertMany(b.ctx, &store.StepInsertManyParams{Steps: []*store.StepInsertParams{p}, Now: base})
				if errs[i] == nil {
					res[i] = out[0]
				}
			}()
		}
		wg.Wait()
		winner := -1
		for i := range n {
			require.NoError(t, errs[i])
			if !res[i].Duplicate {
				require.Equal(t, -1, winner, "two releases won")
				winner = i
			}
		}
		require.NotEqual(t, -1, winner)
		for i := range n {
			require.Equal(t, jobs[winner], res[i].Step.JobID, "every caller sees the winner's job")
		}
		list, err := b.s.StepList(b.ctx, r.ID)
		require.NoError(t, err)
		require.Len(t, list, 1)
		b.requireOneStepChange(t, mark, flow.StepTransition{RunID: r.ID, Step: "a", Index: 0, Generation: 1, To: flow.StepRunning})
	})

	t.Run("TransitionTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		r := b.run(t)
		conf := 0.75
		i := 0
		for _, from := range flow.StepStates {
			for _, to := range flow.StepStates {
				i++
				s := b.reachStep(t, r.ID, i, from)
				mark := b.outboxMark(t)
				p := &store.StepTransitionParams{
					RunID: r.ID, Step: "a", Index: i, Generation: 1, From: from, To: to, Now: at(time.Hour),
				}
				if to == flow.StepRunning {
					p.JobID = newID()
				}
				if to.Done() {
					p.Output, p.Error, p.Confidence = json.RawMessage(`[1]`), "e", &conf
				}
				got, err := b.s.StepTransition(b.ctx, p)
				if !flow.CanStepTransition(from, to) {
					requireFlowInvalidTransition(t, err, "step", from, to)
					b.requireNoOutbox(t, mark)
					continue
				}
				require.NoError(t, err, "%s -> %s", from, to)
				require.Equal(t, to, got.State)
				wantGen := 1
				switch {
				case to == flow.StepPending:
					wantGen = 2
					require.Equal(t, uuid.Nil, got.JobID, "a reset forgets its job")
					require.Nil(t, got.Output)
					require.Empty(t, got.Error)
					require.Nil(t, got.Confidence)
					require.True(t, got.StartedAt.IsZero() && got.FinishedAt.IsZero())
				case to == flow.StepRunning:
					require.Equal(t, p.JobID, got.JobID)
					requireTime(t, at(time.Hour), got.StartedAt)
					require.True(t, got.FinishedAt.IsZero())
				default:
					require.JSONEq(t, `[1]`, string(got.Output))
					require.Equal(t, "e", got.Error)
					require.Equal(t, &conf, got.Confidence)
					requireTime(t, at(time.Hour), got.FinishedAt)
					require.Equal(t, s.JobID, got.JobID, "a finished instance keeps its job")
				}
				require.Equal(t, wantGen, got.Generation)
				b.requireOneStepChange(t, mark, flow.StepTransition{RunID: r.ID, Step: "a", Index: i, Generation: wantGen, From: from, To: to})
			}
		}
		_, err := b.s.StepTransition(b.ctx, &store.StepTransitionParams{
			RunID: r.ID, Step: "zz", Generation: 1, From: flow.StepPending, To: flow.StepSkipped, Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("StaleGenerationIsFenced", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		r := b.run(t)
		first := b.reachStep(t, r.ID, 0, flow.StepFailed)
		jobA := first.JobID
		tr := func(gen int, from, to flow.StepState, job uuid.UUID) (*flow.StepInstance, error) {
			return b.s.StepTransition(b.ctx, &store.StepTransitionParams{
				RunID: r.ID, Step: "a", Index: 0, Generation: gen, From: from, To: to, JobID: job, Now: base,
			})
		}
		// Retry: reset to PENDING (generation 2), released with job B.
		reset, err := tr(1, flow.StepFailed, flow.StepPending, uuid.Nil)
		require.NoError(t, err)
		require.Equal(t, 2, reset.Generation)
		_, err = b.s.StepGetByJob(b.ctx, jobA)
		require.ErrorIs(t, err, store.ErrNotFound, "the old job no longer finds the instance")
		jobB := newID()
		_, err = tr(2, flow.StepPending, flow.StepRunning, jobB)
		require.NoError(t, err)

		mark := b.outboxMark(t)
		// Job A's completion, read before the reset, carries generation 1.
		_, err = tr(1, flow.StepRunning, flow.StepSucceeded, uuid.Nil)
		requireFlowInvalidTransition(t, err, "step", flow.StepRunning, flow.StepSucceeded)
		b.requireNoOutbox(t, mark)

		done, err := tr(2, flow.StepRunning, flow.StepSucceeded, uuid.Nil)
		require.NoError(t, err)
		require.Equal(t, flow.StepSucceeded, done.State)
		byJob, err := b.s.StepGetByJob(b.ctx, jobB)
		require.NoError(t, err)
		require.Equal(t, done, byJob)

		// A second completion finds the instance SUCCEEDED and says so.
		mark = b.outboxMark(t)
		_, err = tr(2, flow.StepRunning, flow.StepFailed, uuid.Nil)
		requireFlowInvalidTransition(t, err, "step", flow.StepSucceeded, flow.StepFailed)
		b.requireNoOutbox(t, mark)
	})
}

// testFlowTx: the flow domain inside Store.InTx.
func testFlowTx(t *testing.T, open opener) {
	// releaseInTx inserts a job and releases a PENDING instance with it in
	// one transaction, then returns ret.
	releaseInTx := func(jp *store.JobInsertParams, s *flow.StepInstance, ret error) func(ctx context.Context, tx store.Tx) error {
		return func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.RunLock(ctx, s.RunID); err != nil {
				return err
			}
			if _, err := tx.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{jp}, Now: base}); err != nil {
				return err
			}
			if _, err := tx.StepTransition(ctx, &store.StepTransitionParams{
				RunID: s.RunID, Step: s.Step, Index: s.Index, Generation: s.Generation,
				From: flow.StepPending, To: flow.StepRunning, JobID: jp.ID, Now: base,
			}); err != nil {
				return err
			}
			// The transaction reads its own writes.
			got, err := tx.StepGetByJob(ctx, jp.ID)
			if err != nil {
				return err
			}
			if got.State != flow.StepRunning {
				return fmt.Errorf("step is %s in its transaction", got.State)
			}
			return ret
		}
	}

	t.Run("RollsBackJobAndStepTogether", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		r := b.run(t)
		s := b.reachStep(t, r.ID, 0, flow.StepPending)
		mark := b.outboxMark(t)
		jp := newJob(newQueue())
		boom := errors.New("boom")
		err := b.s.InTx(b.ctx, releaseInTx(jp, s, boom))
		require.ErrorIs(t, err, boom)
		_, err = b.s.JobGet(b.ctx, jp.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		list, err := b.s.StepList(b.ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, flow.StepPending, list[0].State)
		require.Equal(t, uuid.Nil, list[0].JobID)
		b.requireNoOutbox(t, mark)
	})

	t.Run("CommitsJobAndStepTogether", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		r := b.run(t)
		s := b.reachStep(t, r.ID, 0, flow.StepPending)
		mark := b.outboxMark(t)
		jp := newJob(newQueue())
		require.NoError(t, b.s.InTx(b.ctx, releaseInTx(jp, s, nil)))
		_, err := b.s.JobGet(b.ctx, jp.ID)
		require.NoError(t, err)
		got, err := b.s.StepGetByJob(b.ctx, jp.ID)
		require.NoError(t, err)
		require.Equal(t, flow.StepRunning, got.State)
		evs := b.outboxSince(t, mark)
		require.Len(t, evs, 2, "one job row, one step row: %s", describeEvents(evs))
	})

	t.Run("RefusedTransitionLeavesTxUsable", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		r := b.run(t)
		err := b.s.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.RunTransition(ctx, &store.RunTransitionParams{ID: r.ID, From: flow.RunPaused, To: flow.RunRunning, Now: base})
			var ite *flow.InvalidTransitionError
			if !errors.As(err, &ite) {
				return fmt.Errorf("want an invalid transition, got %v", err)
			}
			_, err = tx.RunTransition(ctx, &store.RunTransitionParams{ID: r.ID, From: flow.RunRunning, To: flow.RunPaused, Now: base})
			return err
		})
		require.NoError(t, err)
		got, err := b.s.RunGet(b.ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, flow.RunPaused, got.State)
	})
}
