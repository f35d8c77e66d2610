package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/store"
)

// ---- helpers of the Crowd group ----

// taskParams describes a version of a task template of name whose title is
// title.
func taskParams(name, title string) *store.TaskPutParams {
	def := fmt.Sprintf(`{"title":%q,"fields":[{"name":"same","kind":"choice"}]}`, title)
	return &store.TaskPutParams{Name: name, Definition: json.RawMessage(def), Hash: "sha256:" + title, Now: base}
}

// poolParams describes the pool of step "label" of a new workflow with a
// new task, judgmentsPerUnit each.
func (b *bundle) poolParams(t *testing.T, judgmentsPerUnit int) *store.PoolCreateParams {
	t.Helper()
	wf := b.workflow(t)
	task := "task_" + uuid.NewString()[:8]
	_, _, err := b.s.TaskPut(b.ctx, taskParams(task, "Same product?"))
	require.NoError(t, err)
	return &store.PoolCreateParams{
		ID: newID(), Workflow: wf, WorkflowVersion: 1, Step: "label", Task: task, TaskVersion: 1,
		Priority: 5, Skills: []string{"en"}, Channels: []string{}, JudgmentsPerUnit: judgmentsPerUnit,
		AssignmentSeconds: 900, Now: base,
	}
}

// pool creates a new OPEN pool.
func (b *bundle) pool(t *testing.T, judgmentsPerUnit int) *crowd.Pool {
	t.Helper()
	p, created, err := b.s.PoolCreate(b.ctx, b.poolParams(t, judgmentsPerUnit))
	require.NoError(t, err)
	require.True(t, created)
	return p
}

// newUnit describes a regular unit of a new run.
func newUnit(n int) *store.UnitInsertParams {
	return &store.UnitInsertParams{ID: newID(), RunID: newID(), Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

// newGolden describes a golden unit.
func newGolden(n int) *store.UnitInsertParams {
	return &store.UnitInsertParams{ID: newID(), Golden: true, Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)),
		Answer: json.RawMessage(`{"same":"yes"}`)}
}

// units inserts n regular units into pool in state.
func (b *bundle) units(t *testing.T, poolID uuid.UUID, n int, state crowd.UnitState) []*crowd.Unit {
	t.Helper()
	ps := make([]*store.UnitInsertParams, n)
	for i := range ps {
		ps[i] = newUnit(i)
	}
	us, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: poolID, State: state, Units: ps, Now: base})
	require.NoError(t, err)
	require.Len(t, us, n)
	return us
}

// contributor creates an active contributor.
func (b *bundle) contributor(t *testing.T) *crowd.Contributor {
	t.Helper()
	c, err := b.s.ContributorCreate(b.ctx, &store.ContributorCreateParams{
		ID: newID(), ExternalID: "ext-" + uuid.NewString(), Name: "Ada", Skills: []string{"en"}, Now: base,
	})
	require.NoError(t, err)
	return c
}

// counts reads a pool's counters.
func (b *bundle) counts(t *testing.T, poolID uuid.UUID) crowd.PoolCounts {
	t.Helper()
	p, err := b.s.PoolGet(b.ctx, poolID)
	require.NoError(t, err)
	return p.Counts
}

// requireSameUnit asserts want and got are the same unit: JSON fields as
// JSON values (PostgreSQL keeps jsonb, not the text).
func requireSameUnit(t *testing.T, want, got *crowd.Unit, msgAndArgs ...any) {
	t.Helper()
	w, g := *want, *got
	for _, f := range []struct{ w, g *json.RawMessage }{{&w.Input, &g.Input}, {&w.Answer, &g.Answer}, {&w.Result, &g.Result}} {
		require.Equal(t, *f.w == nil, *f.g == nil, msgAndArgs...)
		if *f.w != nil {
			require.JSONEq(t, string(*f.w), string(*f.g), msgAndArgs...)
		}
		*f.w, *f.g = nil, nil
	}
	require.Equal(t, w, g, msgAndArgs...)
}

// requireFields asserts err is a *crowd.ValidationError naming exactly
// fields (in any order).
func requireFields(t *testing.T, err error, fields ...string) {
	t.Helper()
	var ve *crowd.ValidationError
	require.ErrorAs(t, err, &ve, "want *crowd.ValidationError, got %T: %v", err, err)
	got := make([]string, len(ve.Errors))
	for i, fe := range ve.Errors {
		got[i] = fe.Field
		require.NotEmpty(t, fe.Message, "field %s", fe.Field)
	}
	require.ElementsMatch(t, fields, got, "%v", err)
}

func requireCrowdInvalidTransition(t *testing.T, err error, of string, from, to string) *crowd.InvalidTransitionError {
	t.Helper()
	var ite *crowd.InvalidTransitionError
	require.ErrorAs(t, err, &ite, "want *crowd.InvalidTransitionError, got %T: %v", err, err)
	require.Equal(t, of, ite.Of)
	require.Equal(t, from, ite.From)
	require.Equal(t, to, ite.To)
	return ite
}

// ---- Tasks ----

func testTasks(t *testing.T, open opener) {
	t.Run("PutIdenticalChangedGetList", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		name := "task_" + uuid.NewString()[:8]
		v1, created, err := b.s.TaskPut(b.ctx, taskParams(name, "A"))
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, 1, v1.Version)
		require.Equal(t, "sha256:A", v1.Hash)
		require.JSONEq(t, string(taskParams(name, "A").Definition), string(v1.Definition))
		requireTime(t, base, v1.CreatedAt)

		again := taskParams(name, "A")
		again.Now = later
		same, created, err := b.s.TaskPut(b.ctx, again)
		require.NoError(t, err)
		require.False(t, created, "the same content is a no-op")
		require.Equal(t, v1, same)

		v2, created, err := b.s.TaskPut(b.ctx, taskParams(name, "B"))
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, 2, v2.Version)

		latest, err := b.s.TaskGet(b.ctx, &store.TaskGetParams{Name: name})
		require.NoError(t, err)
		require.Equal(t, v2, latest)
		first, err := b.s.TaskGet(b.ctx, &store.TaskGetParams{Name: name, Version: 1})
		require.NoError(t, err)
		require.Equal(t, v1, first)
		_, err = b.s.TaskGet(b.ctx, &store.TaskGetParams{Name: name, Version: 3})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.TaskGet(b.ctx, &store.TaskGetParams{Name: "nope"})
		require.ErrorIs(t, err, store.ErrNotFound)

		other := "task_" + uuid.NewString()[:8]
		_, _, err = b.s.TaskPut(b.ctx, taskParams(other, "C"))
		require.NoError(t, err)
		list, err := b.s.TaskList(b.ctx, &store.TaskListParams{})
		require.NoError(t, err)
		require.Len(t, list, 2, "the latest version of each task")
		for _, v := range list {
			if v.Name == name {
				require.Equal(t, 2, v.Version)
			}
		}
		page, err := b.s.TaskList(b.ctx, &store.TaskListParams{AfterName: list[0].Name, Limit: 5})
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, list[1].Name, page[0].Name)
	})

	t.Run("Validate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		_, _, err := b.s.TaskPut(b.ctx, &store.TaskPutParams{})
		requireFields(t, err, "name", "definition", "hash", "now")
		_, err = b.s.TaskGet(b.ctx, &store.TaskGetParams{Version: -1})
		requireFields(t, err, "name", "version")
	})
}

// ---- Pools ----

func testPools(t *testing.T, open opener) {
	t.Run("CreateIdempotentGet", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		pp := b.poolParams(t, 3)
		pp.Settings = json.RawMessage(`{"minTrust":0.7}`)
		mark := b.outboxMark(t)
		p, created, err := b.s.PoolCreate(b.ctx, pp)
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, pp.ID, p.ID)
		require.Equal(t, crowd.PoolOpen, p.Status)
		require.Equal(t, pp.Workflow, p.Workflow)
		require.Equal(t, 1, p.WorkflowVersion)
		require.Equal(t, "label", p.Step)
		require.Equal(t, pp.Task, p.Task)
		require.Equal(t, 1, p.TaskVersion)
		require.Equal(t, 5, p.Priority)
		require.Equal(t, []string{"en"}, p.Skills)
		require.Equal(t, []string{}, p.Channels)
		require.Equal(t, 3, p.JudgmentsPerUnit)
		require.Equal(t, 900, p.AssignmentSeconds)
		require.JSONEq(t, `{"minTrust":0.7}`, string(p.Settings))
		require.Equal(t, crowd.PoolCounts{}, p.Counts)
		requireTime(t, base, p.CreatedAt)
		ds := decodeEvents[crowd.PoolUpdatedData](t, b.outboxSince(t, mark), crowd.EventPoolUpdated)
		require.Equal(t, []crowd.PoolUpdatedData{{PoolID: p.ID, To: crowd.PoolOpen}}, ds)

		// Again for the same step, under another id: the existing pool.
		again := *pp
		again.ID, again.JudgmentsPerUnit = newID(), 7
		mark = b.outboxMark(t)
		p2, created, err := b.s.PoolCreate(b.ctx, &again)
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, p, p2)
		b.requireNoOutbox(t, mark)

		got, err := b.s.PoolGet(b.ctx, p.ID)
		require.NoError(t, err)
		require.Equal(t, p, got)
		_, err = b.s.PoolGet(b.ctx, newID())
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("CreateNeedsWorkflowAndTask", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		pp := b.poolParams(t, 3)
		pp.WorkflowVersion = 9
		_, _, err := b.s.PoolCreate(b.ctx, pp)
		require.ErrorIs(t, err, store.ErrNotFound)
		pp = b.poolParams(t, 3)
		pp.TaskVersion = 9
		_, _, err = b.s.PoolCreate(b.ctx, pp)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p1 := b.pool(t, 1)
		pp := b.poolParams(t, 1)
		pp.Step = "review"
		p2, _, err := b.s.PoolCreate(b.ctx, pp)
		require.NoError(t, err)
		p3 := b.pool(t, 1)
		_, err = b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: p3.ID, From: crowd.PoolOpen, To: crowd.PoolPaused, Now: base})
		require.NoError(t, err)

		ids := func(ps []*crowd.Pool) []uuid.UUID {
			out := make([]uuid.UUID, len(ps))
			for i, p := range ps {
				out[i] = p.ID
			}
			return out
		}
		list := func(p *store.PoolListParams) []uuid.UUID {
			t.Helper()
			ps, err := b.s.PoolList(b.ctx, p)
			require.NoError(t, err)
			return ids(ps)
		}
		require.Equal(t, []uuid.UUID{p3.ID, p2.ID, p1.ID}, list(&store.PoolListParams{}), "newest first")
		require.Equal(t, []uuid.UUID{p3.ID}, list(&store.PoolListParams{Statuses: []crowd.PoolStatus{crowd.PoolPaused}}))
		require.Equal(t, []uuid.UUID{p2.ID}, list(&store.PoolListParams{Step: "review"}))
		require.Equal(t, []uuid.UUID{p1.ID}, list(&store.PoolListParams{Workflow: p1.Workflow}))
		require.Equal(t, []uuid.UUID{p2.ID}, list(&store.PoolListParams{BeforeID: p3.ID, Limit: 1}))
		_, err = b.s.PoolList(b.ctx, &store.PoolListParams{Statuses: []crowd.PoolStatus{"OPEN", "nope"}})
		requireFields(t, err, "status[1]")
	})

	t.Run("Transition", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		us := b.units(t, p.ID, 2, crowd.UnitJudgable)
		move := func(from, to crowd.PoolStatus) (*crowd.Pool, error) {
			return b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: p.ID, From: from, To: to, Now: later})
		}
		mark := b.outboxMark(t)
		got, err := move(crowd.PoolOpen, crowd.PoolPaused)
		require.NoError(t, err)
		require.Equal(t, crowd.PoolPaused, got.Status)
		requireTime(t, later, got.UpdatedAt)
		require.Equal(t, 2, got.Counts.Judgable, "the counters come with the pool")
		ds := decodeEvents[crowd.PoolUpdatedData](t, b.outboxSince(t, mark), crowd.EventPoolUpdated)
		require.Equal(t, []crowd.PoolUpdatedData{{PoolID: p.ID, From: crowd.PoolOpen, To: crowd.PoolPaused}}, ds)

		// Guarded by the status: the pool is PAUSED, not OPEN.
		mark = b.outboxMark(t)
		_, err = move(crowd.PoolOpen, crowd.PoolClosed)
		requireCrowdInvalidTransition(t, err, "pool", "PAUSED", "CLOSED")
		b.requireNoOutbox(t, mark)
		// Not in the machine: refused before any read.
		_, err = move(crowd.PoolPaused, crowd.PoolCompleted)
		requireCrowdInvalidTransition(t, err, "pool", "PAUSED", "COMPLETED")

		_, err = move(crowd.PoolPaused, crowd.PoolOpen)
		require.NoError(t, err)
		_, err = move(crowd.PoolOpen, crowd.PoolClosed)
		require.NoError(t, err)
		// Closed: no unit is added any more.
		_, err = b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitJudgable,
			Units: []*store.UnitInsertParams{newUnit(1)}, Now: later})
		var pno *crowd.PoolNotOpenError
		require.ErrorAs(t, err, &pno)
		// Not COMPLETED while a unit is open.
		_, err = move(crowd.PoolClosed, crowd.PoolCompleted)
		ite := requireCrowdInvalidTransition(t, err, "pool", "CLOSED", "COMPLETED")
		require.Contains(t, ite.Reason, "2 units are not final")

		b.finalize(t, us[0].ID)
		_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: us[1].ID, From: crowd.UnitJudgable, To: crowd.UnitCanceled, Now: later})
		require.NoError(t, err)
		got, err = move(crowd.PoolClosed, crowd.PoolCompleted)
		require.NoError(t, err)
		require.Equal(t, crowd.PoolCompleted, got.Status)

		_, err = b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: newID(), From: crowd.PoolOpen, To: crowd.PoolPaused, Now: later})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("Validate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		_, _, err := b.s.PoolCreate(b.ctx, &store.PoolCreateParams{Skills: []string{"en", ""}, Channels: []string{""},
			Settings: json.RawMessage(`{`)})
		requireFields(t, err, "poolId", "workflow", "workflowVersion", "step", "task", "taskVersion",
			"skills[1]", "channels[0]", "judgmentsPerUnit", "assignmentSeconds", "settings", "now")
		_, err = b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{From: "x", To: "y"})
		requireFields(t, err, "poolId", "from", "to", "now")
	})
}

// finalize finalizes a JUDGABLE unit with a plain result.
// testPoolCompleteMany: CLOSED pools whose regular units are all final
// become COMPLETED, with a pool.updated row each; open units, golden
// units, other statuses, the pool filter and the limit are respected.
func testPoolCompleteMany(t *testing.T, open opener) {
	b := setup(t, open)
	closeIt := func(p *crowd.Pool) {
		t.Helper()
		_, err := b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: p.ID, From: crowd.PoolOpen, To: crowd.PoolClosed, Now: base})
		require.NoError(t, err)
	}
	complete := func(pool uuid.UUID, max int) []uuid.UUID {
		t.Helper()
		ids, err := b.s.PoolCompleteMany(b.ctx, &store.PoolCompleteManyParams{PoolID: pool, Max: max, Now: later})
		require.NoError(t, err)
		return ids
	}
	status := func(p *crowd.Pool) crowd.PoolStatus {
		t.Helper()
		got, err := b.s.PoolGet(b.ctx, p.ID)
		require.NoError(t, err)
		return got.Status
	}
	// worked: CLOSED, one unit finalized, one canceled, one still open;
	// empty: CLOSED with a golden unit only; open: OPEN with no unit.
	worked, empty, openPool := b.pool(t, 1), b.pool(t, 1), b.pool(t, 1)
	us := b.units(t, worked.ID, 3, crowd.UnitJudgable)
	_, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: empty.ID, State: crowd.UnitJudgable,
		Units: []*store.UnitInsertParams{newGolden(0)}, Now: base})
	require.NoError(t, err)
	closeIt(worked)
	closeIt(empty)
	b.finalize(t, us[0].ID)
	_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: us[1].ID, From: crowd.UnitJudgable, To: crowd.UnitCanceled, Now: base})
	require.NoError(t, err)

	mark := b.outboxMark(t)
	require.Empty(t, complete(worked.ID, 10), "one unit of worked is open")
	require.Equal(t, []uuid.UUID{empty.ID}, complete(uuid.Nil, 10), "golden units do not hold a pool open")
	require.Equal(t, crowd.PoolCompleted, status(empty))
	require.Equal(t, crowd.PoolClosed, status(worked))
	require.Equal(t, crowd.PoolOpen, status(openPool))
	ds := decodeEvents[crowd.PoolUpdatedData](t, b.outboxSince(t, mark), crowd.EventPoolUpdated)
	require.Equal(t, []crowd.PoolUpdatedData{{PoolID: empty.ID, From: crowd.PoolClosed, To: crowd.PoolCompleted}}, ds)

	// The last unit is paused, then canceled: worked completes; the
	// filter and the limit hold.
	_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: us[2].ID, From: crowd.UnitJudgable, To: crowd.UnitPaused, Now: base})
	require.NoError(t, err)
	require.Empty(t, complete(uuid.Nil, 10), "a PAUSED unit is open")
	_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: us[2].ID, From: crowd.UnitPaused, To: crowd.UnitCanceled, Now: base})
	require.NoError(t, err)
	other := b.pool(t, 1)
	closeIt(other)
	require.Equal(t, []uuid.UUID{other.ID}, complete(other.ID, 10), "only the pool asked for")
	require.Equal(t, crowd.PoolClosed, status(worked))
	third, fourth := b.pool(t, 1), b.pool(t, 1)
	closeIt(third)
	closeIt(fourth)
	first := complete(uuid.Nil, 2)
	require.Len(t, first, 2, "at most max")
	rest := complete(uuid.Nil, 2)
	require.ElementsMatch(t, []uuid.UUID{worked.ID, third.ID, fourth.ID}, append(first, rest...))
	require.Equal(t, crowd.PoolCompleted, status(worked))
	require.Empty(t, complete(uuid.Nil, 10), "COMPLETED stays")

	_, err = b.s.PoolCompleteMany(b.ctx, &store.PoolCompleteManyParams{})
	requireFields(t, err, "max", "now")
}

// testPoolCompleteManyPastOpen: CLOSED pools that keep open units (a
// closed pool hands out no assignment, so they may stay so for good) do
// not hold back the completion of another: a batch of Max looks past
// them, whatever their number and ids.
func testPoolCompleteManyPastOpen(t *testing.T, open opener) {
	b := setup(t, open)
	for range 3 {
		stuck := b.pool(t, 1)
		b.units(t, stuck.ID, 1, crowd.UnitJudgable)
		_, err := b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: stuck.ID, From: crowd.PoolOpen, To: crowd.PoolClosed, Now: base})
		require.NoError(t, err)
	}
	done := b.pool(t, 1)
	_, err := b.s.PoolTransition(b.ctx, &store.PoolTransitionParams{ID: done.ID, From: crowd.PoolOpen, To: crowd.PoolClosed, Now: base})
	require.NoError(t, err)
	ids, err := b.s.PoolCompleteMany(b.ctx, &store.PoolCompleteManyParams{Max: 2, Now: later})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{done.ID}, ids, "three older CLOSED pools with an open unit each held back a batch of 2")
}

func (b *bundle) finalize(t *testing.T, id uuid.UUID) *crowd.Unit {
	t.Helper()
	conf := 0.9
	u, err := b.s.UnitFinalize(b.ctx, &store.UnitFinalizeParams{ID: id, Result: json.RawMessage(`{"same":"yes"}`), Confidence: &conf, Now: later})
	require.NoError(t, err)
	return u
}

// ---- Units ----

func testUnits(t *testing.T, open opener) {
	t.Run("InsertGetList", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 3)
		// A golden answer's explanation is plain text, kept byte for byte.
		const ps2Feedback = "Both name the \"same\" model <b>X-1</b>;\nthe colour differs. é ✓"
		// A batch large enough for COPY, and a small one.
		for _, n := range []int{120, 3} {
			ps := make([]*store.UnitInsertParams, n)
			for i := range ps {
				ps[i] = newUnit(i)
			}
			ps[0].ParentUnitID = newID()
			ps[0].StepIndex = 2
			ps[1].JudgmentsPerUnit = 5
			ps[2] = newGolden(2)
			ps[2].Feedback = ps2Feedback
			us, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitNew, Units: ps, Now: base})
			require.NoError(t, err)
			require.Len(t, us, n)
			for i, u := range us {
				got, err := b.s.UnitGet(b.ctx, ps[i].ID)
				require.NoError(t, err)
				requireSameUnit(t, u, got, "unit %d of %d as returned and as read", i, n)
			}
			u0 := us[0]
			require.Equal(t, p.ID, u0.PoolID)
			require.Equal(t, ps[0].RunID, u0.RunID)
			require.Equal(t, 2, u0.StepIndex)
			require.Equal(t, ps[0].ParentUnitID, u0.ParentUnitID)
			require.JSONEq(t, `{"n":0}`, string(u0.Input))
			require.Equal(t, crowd.UnitNew, u0.State)
			require.False(t, u0.Golden)
			require.Nil(t, u0.Answer)
			require.Equal(t, 3, u0.JudgmentsPerUnit, "the pool's default")
			require.Zero(t, u0.SlotsTaken)
			require.Zero(t, u0.JudgmentCount)
			require.Nil(t, u0.Result)
			require.Nil(t, u0.Confidence)
			require.True(t, u0.FinalizedAt.IsZero())
			requireTime(t, base, u0.CreatedAt)
			require.Equal(t, 5, us[1].JudgmentsPerUnit)
			g := us[2]
			require.True(t, g.Golden)
			require.Equal(t, crowd.UnitJudgable, g.State, "golden units are judgable at once")
			require.JSONEq(t, `{"same":"yes"}`, string(g.Answer))
			require.Equal(t, ps[2].Feedback, g.Feedback, "the golden answer's explanation, byte for byte")
			require.Empty(t, u0.Feedback)
			require.Equal(t, uuid.Nil, g.RunID)
		}
		require.Equal(t, crowd.PoolCounts{New: 121, Golden: 2}, b.counts(t, p.ID))

		_, err := b.s.UnitGet(b.ctx, newID())
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: newID(), State: crowd.UnitNew,
			Units: []*store.UnitInsertParams{newUnit(1)}, Now: base})
		require.ErrorIs(t, err, store.ErrNotFound)

		all, err := b.s.UnitList(b.ctx, &store.UnitListParams{PoolID: p.ID})
		require.NoError(t, err)
		require.Len(t, all, 123)
		for i := 1; i < len(all); i++ {
			require.Equal(t, -1, compareUUID(all[i].ID, all[i-1].ID), "newest first")
		}
		golden := true
		gs, err := b.s.UnitList(b.ctx, &store.UnitListParams{PoolID: p.ID, Golden: &golden})
		require.NoError(t, err)
		require.Len(t, gs, 2)
		for _, g := range gs {
			require.Equal(t, ps2Feedback, g.Feedback, "as listed")
		}
		js, err := b.s.UnitList(b.ctx, &store.UnitListParams{PoolID: p.ID, States: []crowd.UnitState{crowd.UnitJudgable}})
		require.NoError(t, err)
		require.Len(t, js, 2)
		page, err := b.s.UnitList(b.ctx, &store.UnitListParams{PoolID: p.ID, BeforeID: all[9].ID, Limit: 5})
		require.NoError(t, err)
		require.Len(t, page, 5)
		require.Equal(t, all[10].ID, page[0].ID)
		byRun, err := b.s.UnitList(b.ctx, &store.UnitListParams{PoolID: p.ID, RunID: all[5].RunID})
		require.NoError(t, err)
		require.Len(t, byRun, 1)
		require.Equal(t, all[5].ID, byRun[0].ID)
	})

	t.Run("Transition", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		us := b.units(t, p.ID, 4, crowd.UnitNew)
		move := func(id uuid.UUID, from, to crowd.UnitState) (*crowd.Unit, error) {
			return b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{ID: id, From: from, To: to, Now: later})
		}
		for _, step := range [][2]crowd.UnitState{
			{crowd.UnitNew, crowd.UnitJudgable}, {crowd.UnitJudgable, crowd.UnitPaused},
			{crowd.UnitPaused, crowd.UnitJudgable},
		} {
			u, err := move(us[0].ID, step[0], step[1])
			require.NoError(t, err)
			require.Equal(t, step[1], u.State)
			requireTime(t, later, u.UpdatedAt)
		}
		require.Equal(t, crowd.PoolCounts{New: 3, Judgable: 1}, b.counts(t, p.ID))

		// Guarded: us[1] is NEW, not JUDGABLE; nothing moves.
		_, err := move(us[1].ID, crowd.UnitJudgable, crowd.UnitPaused)
		requireCrowdInvalidTransition(t, err, "unit", "NEW", "PAUSED")
		_, err = move(us[1].ID, crowd.UnitNew, crowd.UnitPaused)
		requireCrowdInvalidTransition(t, err, "unit", "NEW", "PAUSED")
		_, err = move(newID(), crowd.UnitNew, crowd.UnitJudgable)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Equal(t, crowd.PoolCounts{New: 3, Judgable: 1}, b.counts(t, p.ID))

		for _, u := range us[1:] {
			_, err := move(u.ID, crowd.UnitNew, crowd.UnitJudgable)
			require.NoError(t, err)
		}
		_, err = move(us[1].ID, crowd.UnitJudgable, crowd.UnitPaused)
		require.NoError(t, err)
		_, err = move(us[1].ID, crowd.UnitPaused, crowd.UnitCanceled)
		require.NoError(t, err)
		_, err = move(us[1].ID, crowd.UnitCanceled, crowd.UnitJudgable)
		requireCrowdInvalidTransition(t, err, "unit", "CANCELED", "JUDGABLE")

		// Finalize, then reopen: the result is cleared.
		mark := b.outboxMark(t)
		f := b.finalize(t, us[2].ID)
		require.Equal(t, crowd.UnitFinalized, f.State)
		require.JSONEq(t, `{"same":"yes"}`, string(f.Result))
		require.InDelta(t, 0.9, *f.Confidence, 1e-9)
		requireTime(t, later, f.FinalizedAt)
		ds := decodeEvents[crowd.UnitFinalizedData](t, b.outboxSince(t, mark), crowd.EventUnitFinalized)
		require.Len(t, ds, 1)
		require.Equal(t, us[2].ID, ds[0].UnitID)
		require.Equal(t, p.ID, ds[0].PoolID)
		require.Equal(t, us[2].RunID, *ds[0].RunID)
		require.JSONEq(t, `{"same":"yes"}`, string(ds[0].Result))
		require.InDelta(t, 0.9, *ds[0].Confidence, 1e-9)
		require.Equal(t, crowd.PoolCounts{Judgable: 2, Finalized: 1, Canceled: 1}, b.counts(t, p.ID))

		_, err = b.s.UnitFinalize(b.ctx, &store.UnitFinalizeParams{ID: us[2].ID, Result: json.RawMessage(`1`), Now: later})
		requireCrowdInvalidTransition(t, err, "unit", "FINALIZED", "FINALIZED")
		_, err = b.s.UnitFinalize(b.ctx, &store.UnitFinalizeParams{ID: newID(), Result: json.RawMessage(`1`), Now: later})
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = move(us[2].ID, crowd.UnitFinalized, crowd.UnitFinalized)
		requireFields(t, err, "to")

		r, err := move(us[2].ID, crowd.UnitFinalized, crowd.UnitJudgable)
		require.NoError(t, err)
		require.Nil(t, r.Result)
		require.Nil(t, r.Confidence)
		require.True(t, r.FinalizedAt.IsZero())
		require.Equal(t, crowd.PoolCounts{Judgable: 3, Canceled: 1}, b.counts(t, p.ID))

		// A golden unit is never finalized, and moves no state counter.
		gs, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: p.ID, State: crowd.UnitNew,
			Units: []*store.UnitInsertParams{newGolden(1)}, Now: base})
		require.NoError(t, err)
		_, err = b.s.UnitFinalize(b.ctx, &store.UnitFinalizeParams{ID: gs[0].ID, Result: json.RawMessage(`1`), Now: later})
		ite := requireCrowdInvalidTransition(t, err, "unit", "JUDGABLE", "FINALIZED")
		require.Contains(t, ite.Reason, "golden")
		_, err = move(gs[0].ID, crowd.UnitJudgable, crowd.UnitPaused)
		require.NoError(t, err)
		require.Equal(t, crowd.PoolCounts{Judgable: 3, Canceled: 1, Golden: 1}, b.counts(t, p.ID))
	})

	t.Run("Validate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		_, err := b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{State: crowd.UnitPaused})
		requireFields(t, err, "poolId", "state", "units", "now")
		bad := newUnit(1)
		bad.ID, bad.StepIndex, bad.Input, bad.Answer, bad.JudgmentsPerUnit = uuid.Nil, -1, json.RawMessage(`{`), json.RawMessage(`1`), -1
		bad.Feedback = "a regular unit has no explanation"
		golden := newGolden(1)
		golden.Answer = nil
		// PostgreSQL's jsonb cannot hold a NUL: refused on both backends.
		nul := newGolden(2)
		nul.Input, nul.Answer = json.RawMessage(`{"a":"x\u0000"}`), json.RawMessage(`"\u0000"`)
		nul.Feedback = "x\x00"
		// Nor an unpaired UTF-16 surrogate escape (SQLite would store it).
		lone := newGolden(3)
		lone.Input, lone.Answer = json.RawMessage(`{"a":"\ud800x","b":"\\ud800"}`), json.RawMessage(`{"a":"\uDC00"}`)
		paired := newGolden(4)
		paired.Input, paired.Answer = json.RawMessage(`{"a":"\ud83d\ude00"}`), json.RawMessage(`{"a":"\\udc00"}`)
		// Nor bytes that are not UTF-8 (PostgreSQL refused them: a 500).
		raw := newGolden(5)
		raw.Input, raw.Answer = json.RawMessage("{\"a\":\"\xff\"}"), json.RawMessage("\"\xfe\"")
		_, err = b.s.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: newID(), State: crowd.UnitNew,
			Units: []*store.UnitInsertParams{newUnit(0), bad, nil, golden, nul, lone, paired, raw}, Now: base})
		requireFields(t, err, "units[1].unitId", "units[1].stepIndex", "units[1].input", "units[1].answer",
			"units[1].feedback", "units[1].judgmentsPerUnit", "units[2]", "units[3].answer", "units[4].input", "units[4].answer",
			"units[4].feedback", "units[5].input", "units[5].answer", "units[7].input", "units[7].answer")
		_, err = b.s.UnitList(b.ctx, &store.UnitListParams{States: []crowd.UnitState{"x"}})
		requireFields(t, err, "poolId", "state[0]")
		_, err = b.s.UnitTransition(b.ctx, &store.UnitTransitionParams{From: "x", To: "y"})
		requireFields(t, err, "unitId", "from", "to", "now")
		bigConf := 1.5
		_, err = b.s.UnitFinalize(b.ctx, &store.UnitFinalizeParams{Confidence: &bigConf})
		requireFields(t, err, "unitId", "result", "confidence", "now")
		_, err = b.s.UnitListAvailable(b.ctx, &store.UnitListAvailableParams{})
		requireFields(t, err, "poolId", "limit")
	})
}

// ---- Contributors ----

func testContributors(t *testing.T, open opener) {
	t.Run("CreateGetUpdateList", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := &store.ContributorCreateParams{ID: newID(), ExternalID: "w-1", Name: "Ada", Skills: []string{"en", "fr"},
			Channels: []string{"web"}, Now: base}
		c, err := b.s.ContributorCreate(b.ctx, p)
		require.NoError(t, err)
		require.Equal(t, p.ID, c.ID)
		require.Equal(t, "w-1", c.ExternalID)
		require.Equal(t, "Ada", c.Name)
		require.Equal(t, []string{"en", "fr"}, c.Skills)
		require.Equal(t, []string{"web"}, c.Channels)
		require.Equal(t, crowd.ContributorActive, c.State)
		requireTime(t, base, c.CreatedAt)

		dup := *p
		dup.ID = newID()
		_, err = b.s.ContributorCreate(b.ctx, &dup)
		require.ErrorIs(t, err, store.ErrDuplicate, "the external id is unique")

		got, err := b.s.ContributorGet(b.ctx, c.ID)
		require.NoError(t, err)
		require.Equal(t, c, got)
		got, err = b.s.ContributorGetByExternalID(b.ctx, "w-1")
		require.NoError(t, err)
		require.Equal(t, c, got)
		_, err = b.s.ContributorGet(b.ctx, newID())
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.s.ContributorGetByExternalID(b.ctx, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)

		banned := crowd.ContributorBanned
		skills := []string{}
		u, err := b.s.ContributorUpdate(b.ctx, &store.ContributorUpdateParams{ID: c.ID, Skills: &skills, State: &banned, Now: later})
		require.NoError(t, err)
		require.Equal(t, "Ada", u.Name, "unset fields are kept")
		require.Equal(t, []string{"web"}, u.Channels)
		require.Equal(t, []string{}, u.Skills)
		require.Equal(t, crowd.ContributorBanned, u.State)
		requireTime(t, later, u.UpdatedAt)
		name := "Ada L."
		u, err = b.s.ContributorUpdate(b.ctx, &store.ContributorUpdateParams{ID: c.ID, Name: &name, Now: later})
		require.NoError(t, err)
		require.Equal(t, "Ada L.", u.Name)
		require.Equal(t, crowd.ContributorBanned, u.State)
		_, err = b.s.ContributorUpdate(b.ctx, &store.ContributorUpdateParams{ID: newID(), Name: &name, Now: later})
		require.ErrorIs(t, err, store.ErrNotFound)

		c2 := b.contributor(t)
		all, err := b.s.ContributorList(b.ctx, &store.ContributorListParams{})
		require.NoError(t, err)
		require.Len(t, all, 2)
		require.Equal(t, c2.ID, all[0].ID, "newest first")
		act, err := b.s.ContributorList(b.ctx, &store.ContributorListParams{States: []crowd.ContributorState{crowd.ContributorActive}})
		require.NoError(t, err)
		require.Len(t, act, 1)
		require.Equal(t, c2.ID, act[0].ID)
		page, err := b.s.ContributorList(b.ctx, &store.ContributorListParams{BeforeID: c2.ID, Limit: 1})
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, c.ID, page[0].ID)
	})

	t.Run("States", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		a, c := b.contributor(t), b.contributor(t)
		b.contributor(t) // not asked for: not read
		banned := crowd.ContributorBanned
		_, err := b.s.ContributorUpdate(b.ctx, &store.ContributorUpdateParams{ID: c.ID, State: &banned, Now: base.Add(time.Second)})
		require.NoError(t, err)
		none := newID()
		got, err := b.s.ContributorStates(b.ctx, []uuid.UUID{a.ID, c.ID, none, a.ID})
		require.NoError(t, err)
		require.Equal(t, map[uuid.UUID]crowd.ContributorState{a.ID: crowd.ContributorActive, c.ID: crowd.ContributorBanned}, got)
		got, err = b.s.ContributorStates(b.ctx, nil)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("APIKeyBinding", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		c := b.contributor(t)
		k, err := b.s.APIKeyInsert(b.ctx, &store.APIKeyInsertParams{ID: newID(), Name: "ada", Role: "contributor",
			Prefix: "dk_c", SecretHash: "h-c", ContributorID: c.ID, Now: base})
		require.NoError(t, err)
		require.Equal(t, c.ID, k.ContributorID)
		got, err := b.s.APIKeyGetByHash(b.ctx, "h-c")
		require.NoError(t, err)
		require.Equal(t, c.ID, got.ContributorID)
		plain, err := b.s.APIKeyInsert(b.ctx, &store.APIKeyInsertParams{ID: newID(), Name: "ops", Role: "admin",
			Prefix: "dk_a", SecretHash: "h-a", Now: base})
		require.NoError(t, err)
		require.Equal(t, uuid.Nil, plain.ContributorID)
		_, err = b.s.APIKeyInsert(b.ctx, &store.APIKeyInsertParams{ID: newID(), Name: "ghost", Role: "contributor",
			Prefix: "dk_g", SecretHash: "h-g", ContributorID: newID(), Now: base})
		require.ErrorIs(t, err, store.ErrNotFound, "a key binds an existing contributor")
	})

	t.Run("PoolContributor", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		p := b.pool(t, 1)
		c := b.contributor(t)
		pc, err := b.s.PoolContributorGet(b.ctx, p.ID, c.ID)
		require.NoError(t, err)
		require.Equal(t, &crowd.PoolContributor{PoolID: p.ID, ContributorID: c.ID}, pc, "not met yet: a zero row")
		trust := 0.25
		pc, err = b.s.PoolContributorPut(b.ctx, &store.PoolContributorPutParams{PoolID: p.ID, ContributorID: c.ID,
			Trust: &trust, TestsAnswered: 4, TestsCorrect: 1, Flagged: true, FlagReason: "low trust", Now: base})
		require.NoError(t, err)
		require.InDelta(t, 0.25, *pc.Trust, 1e-9)
		require.Equal(t, 4, pc.TestsAnswered)
		require.Equal(t, 1, pc.TestsCorrect)
		require.True(t, pc.Flagged)
		require.Equal(t, "low trust", pc.FlagReason)
		requireTime(t, base, pc.FlaggedAt)
		pc, err = b.s.PoolContributorPut(b.ctx, &store.PoolContributorPutParams{PoolID: p.ID, ContributorID: c.ID,
			Trust: &trust, TestsAnswered: 5, TestsCorrect: 1, Flagged: true, FlagReason: "low trust", Now: later})
		require.NoError(t, err)
		requireTime(t, base, pc.FlaggedAt, "the first flag's time is kept")
		requireTime(t, later, pc.UpdatedAt)
		got, err := b.s.PoolContributorGet(b.ctx, p.ID, c.ID)
		require.NoError(t, err)
		require.Equal(t, pc, got)
		pc, err = b.s.PoolContributorPut(b.ctx, &store.PoolContributorPutParams{PoolID: p.ID, ContributorID: c.ID,
			TestsAnswered: 5, TestsCorrect: 1, Now: later})
		require.NoError(t, err)
		require.False(t, pc.Flagged)
		require.True(t, pc.FlaggedAt.IsZero())
		require.Nil(t, pc.Trust)
		_, err = b.s.PoolContributorPut(b.ctx, &store.PoolContributorPutParams{PoolID: p.ID, ContributorID: newID(), Now: later})
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("Validate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, open)
		_, err := b.s.ContributorCreate(b.ctx, &store.ContributorCreateParams{Skills: []string{""}, Channels: []string{"a", ""}})
		requireFields(t, err, "contributorId", "externalId", "skills[0]", "channels[1]", "now")
		bad := crowd.ContributorState("gone")
		_, err = b.s.ContributorUpdate(b.ctx, &store.ContributorUpdateParams{Skills: &[]string{""}, Channels: &[]string{""}, State: &bad})
		requireFields(t, err, "contributorId", "skills[0]", "channels[0]", "state", "now")
		_, err = b.s.ContributorList(b.ctx, &store.ContributorListParams{States: []crowd.ContributorState{"x"}})
		requireFields(t, err, "state[0]")
		// "flagged" is no contributor's state (quality control flags in
		// one pool): refused where it is set or filtered by, as over
		// HTTP, and nothing is written.
		c := b.contributor(t)
		flagged := crowd.ContributorFlagged
		name := "changed"
		_, err = b.s.ContributorUpdate(b.ctx, &store.ContributorUpdateParams{ID: c.ID, Name: &name, State: &flagged, Now: later})
		requireFields(t, err, "state")
		require.ErrorContains(t, err, "one pool")
		got, err := b.s.ContributorGet(b.ctx, c.ID)
		require.NoError(t, err)
		require.Equal(t, c, got, "a refused update writes nothing")
		_, err = b.s.ContributorList(b.ctx, &store.ContributorListParams{States: []crowd.ContributorState{crowd.ContributorActive, flagged}})
		requireFields(t, err, "state[1]")
		require.ErrorContains(t, err, "one pool")
		trust := -1.0
		_, err = b.s.PoolContributorPut(b.ctx, &store.PoolContributorPutParams{Trust: &trust, TestsAnswered: -1, TestsCorrect: 1})
		requireFields(t, err, "poolId", "contributorId", "trust", "testsAnswered", "testsCorrect", "now")
	})
}

// sinceBase is base + d, for readability of assignment times.
func sinceBase(d time.Duration) time.Time { return base.Add(d) }
