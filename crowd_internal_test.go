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
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/task"
	"github.com/docket-run/docket/internal/testdb"
)

const crowdTemplate = `{"title": "Same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]},
            {"name": "stars", "kind": "rating", "scale": 5},
            {"name": "price", "kind": "number"},
            {"name": "tags", "kind": "multi_choice", "options": [{"value": "a"}, {"value": "b"}]},
            {"name": "note", "kind": "text"}],
 "judgmentsPerUnit": {"min": 3}, "assignmentSeconds": 60}`

// crowdFixture is a client with a movable clock, a pool and contributors.
type crowdFixture struct {
	c    *Client
	now  *atomic.Int64
	pool *Pool
}

func newCrowdFixture(t *testing.T, backend testdb.Backend) *crowdFixture {
	t.Helper()
	return newTaskFixture(t, backend, crowdTemplate)
}

func (f *crowdFixture) contributor(t *testing.T) uuid.UUID {
	t.Helper()
	who, err := f.c.ContributorCreate(context.Background(), ContributorCreateParams{ExternalID: uuid.NewString()})
	require.NoError(t, err)
	return who.ID
}

// TestJudgmentFinalizesOnce: the third judgment finalizes the unit and
// completes its step through the hook in the same transaction; a failing
// hook rolls the judgment back (the assignment stays ACTIVE) and the retry
// completes the step once.
func TestJudgmentFinalizesOnce(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newCrowdFixture(t, backend)
			runID := uuid.Must(uuid.NewV7())
			unitID := uuid.Must(uuid.NewV7())
			_, err := f.c.store.UnitInsertMany(ctx, &store.UnitInsertManyParams{PoolID: f.pool.ID, State: crowd.UnitJudgable, Now: f.c.cfg.Now(),
				Units: []*store.UnitInsertParams{{ID: unitID, RunID: runID, Input: json.RawMessage(`{}`)}}})
			require.NoError(t, err)

			var calls atomic.Int32
			var fail atomic.Bool
			var got HumanStepOutput
			f.c.completeHumanStep = func(ctx context.Context, tx store.Tx, u *Unit, out HumanStepOutput) error {
				if fail.Load() {
					return errors.New("the step is not ready")
				}
				calls.Add(1)
				require.Equal(t, runID, u.RunID)
				got = out
				return nil
			}
			answers := []string{`{"same": "yes", "stars": 4, "price": 10, "tags": ["a"], "note": "x"}`,
				`{"same": "no", "stars": 4, "price": 30, "tags": ["a", "b"]}`,
				`{"same": "yes", "stars": 2, "price": 20, "tags": ["a"], "note": "y"}`}
			var last *TakenAssignment
			var lastWho uuid.UUID
			for i, a := range answers {
				who := f.contributor(t)
				taken, err := f.c.AssignmentTake(ctx, f.pool.ID, who)
				require.NoError(t, err)
				if i == 2 {
					last, lastWho = taken, who
					fail.Store(true)
				}
				sub, err := f.c.JudgmentSubmit(ctx, taken.Assignment.ID, who, json.RawMessage(a))
				if i < 2 {
					require.NoError(t, err)
					require.True(t, sub.Created)
					require.Nil(t, sub.Finalized)
				} else {
					require.ErrorContains(t, err, "not ready")
				}
			}
			// Rolled back: the assignment is still ACTIVE, the unit not final.
			a, err := f.c.AssignmentGet(ctx, last.Assignment.ID)
			require.NoError(t, err)
			require.Equal(t, AssignmentActive, a.State)
			u, err := f.c.UnitGet(ctx, unitID)
			require.NoError(t, err)
			require.Equal(t, UnitJudgable, u.State)
			require.Equal(t, 2, u.JudgmentCount)

			fail.Store(false)
			sub, err := f.c.JudgmentSubmit(ctx, last.Assignment.ID, lastWho, json.RawMessage(answers[2]))
			require.NoError(t, err)
			require.NotNil(t, sub.Finalized)
			require.Equal(t, int32(1), calls.Load())
			require.JSONEq(t, `{"same": "yes", "stars": 4, "price": 20, "tags": ["a"], "note": ["x", "y"]}`, string(got.Output))
			require.InDelta(t, 2.0/3, *got.Confidence, 1e-9)
			// The same judgment again: idempotent, no second completion.
			sub, err = f.c.JudgmentSubmit(ctx, last.Assignment.ID, lastWho, json.RawMessage(answers[2]))
			require.NoError(t, err)
			require.False(t, sub.Created)
			require.Nil(t, sub.Finalized)
			require.Equal(t, int32(1), calls.Load())
			u, err = f.c.UnitGet(ctx, unitID)
			require.NoError(t, err)
			require.Equal(t, UnitFinalized, u.State)
			require.JSONEq(t, string(got.Output), string(u.Result))
		})
	}
}

// TestAssignmentReaper: a worker leading the crowd leadership expires the
// assignments whose lease ran out, freeing their slots.
func TestAssignmentReaper(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newCrowdFixture(t, backend)
			_, err := f.c.UnitsAdd(ctx, f.pool.ID, []json.RawMessage{json.RawMessage(`{}`), json.RawMessage(`{}`)})
			require.NoError(t, err)
			var ids []uuid.UUID
			for range 3 {
				taken, err := f.c.AssignmentTake(ctx, f.pool.ID, f.contributor(t))
				require.NoError(t, err)
				ids = append(ids, taken.Assignment.ID)
			}
			f.now.Add(int64(2 * time.Minute)) // past the 60 s lease

			w := NewWorker(f.c, WorkerConfig{AssignmentReapInterval: 10 * time.Millisecond, LeaderTTL: time.Second})
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { w.Stop(ctx) })
			deadline := time.Now().Add(20 * time.Second)
			for {
				p, err := f.c.PoolGet(ctx, f.pool.ID)
				require.NoError(t, err)
				if p.Counts.ActiveAssignments == 0 {
					break
				}
				require.True(t, time.Now().Before(deadline), "the reaper did not expire the assignments: %+v", p.Counts)
				time.Sleep(20 * time.Millisecond)
			}
			for _, id := range ids {
				a, err := f.c.AssignmentGet(ctx, id)
				require.NoError(t, err)
				require.Equal(t, AssignmentExpired, a.State)
			}
		})
	}
}

func TestAggregateUnit(t *testing.T) {
	t.Parallel()
	tmpl, err := task.Parse([]byte(crowdTemplate))
	require.NoError(t, err)
	ct, err := task.Compile(tmpl)
	require.NoError(t, err)
	judgments := func(data ...string) []*Judgment {
		out := make([]*Judgment, len(data))
		for i, d := range data {
			// Newest first, as the store lists them.
			out[len(data)-1-i] = &Judgment{ID: uuid.Must(uuid.NewV7()), ContributorID: uuid.Must(uuid.NewV7()), Data: json.RawMessage(d)}
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		in         []*Judgment
		want       string
		confidence float64
	}{
		{"unanimous", judgments(`{"same": "no"}`, `{"same": "no"}`), `{"same": "no"}`, 1},
		{"majority", judgments(`{"same": "no"}`, `{"same": "yes"}`, `{"same": "yes"}`), `{"same": "yes"}`, 2.0 / 3},
		{"tie goes to the first option", judgments(`{"same": "no"}`, `{"same": "yes"}`), `{"same": "yes"}`, 0.5},
		{"median and keep all", judgments(`{"same": "no", "price": 1, "note": "a"}`, `{"same": "no", "price": 100}`, `{"same": "no", "price": 3, "note": "b"}`),
			`{"same": "no", "price": 3, "note": ["a", "b"]}`, 1},
		// Answers near float64's limit: their sum overflowed, and the
		// unit's result, a mean of +Inf, could not be written, so every
		// judgment finalizing it failed (500).
		{"huge numbers", judgments(`{"same": "no", "price": 1.7e308}`, `{"same": "no", "price": 1.7e308}`), `{"same": "no", "price": 1.7e308}`, 1},
		{"huge numbers of both signs", judgments(`{"same": "no", "price": -1.7e308}`, `{"same": "no", "price": 1.7e308}`), `{"same": "no", "price": 0}`, 1},
		{"rating and multi choice", judgments(`{"same": "no", "stars": 5, "tags": ["b"]}`, `{"same": "no", "stars": 5, "tags": []}`, `{"same": "no", "stars": 1, "tags": ["b", "a"]}`),
			`{"same": "no", "stars": 5, "tags": ["b"]}`, 2.0 / 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, conf, err := aggregateUnitWith(ct, tc.in, nil)
			require.NoError(t, err)
			require.JSONEq(t, tc.want, string(got))
			require.InDelta(t, tc.confidence, *conf, 1e-9)
		})
	}
	tainted := judgments(`{"same": "no"}`, `{"same": "yes"}`, `{"same": "yes"}`)
	tainted[0].Tainted, tainted[1].Tainted = true, true
	got, _, err := aggregateUnitWith(ct, tainted, nil)
	require.NoError(t, err)
	require.JSONEq(t, `{"same": "no"}`, string(got), "tainted judgments are left out")
	_, _, err = aggregateUnitWith(ct, judgments(`{"same": 1}`), nil)
	require.Error(t, err)
}

// TestAssignmentTakeStrategies: whichever strategy the client is
// configured with, three contributors take every slot of five units × 3
// exactly once, and then each is told no unit is left; an unknown
// strategy is refused when the client opens.
func TestAssignmentTakeStrategies(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		for _, strategy := range TakeStrategies {
			t.Run(backend.Name+"/"+string(strategy), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				f := newCrowdFixture(t, backend)
				f.c.cfg.TakeStrategy = strategy
				inputs := make([]json.RawMessage, 5)
				for i := range inputs {
					inputs[i] = json.RawMessage(`{}`)
				}
				_, err := f.c.UnitsAdd(ctx, f.pool.ID, inputs)
				require.NoError(t, err)
				seen := map[uuid.UUID]int{}
				for range 3 {
					who := f.contributor(t)
					mine := map[uuid.UUID]bool{}
					for range 5 {
						taken, err := f.c.AssignmentTake(ctx, f.pool.ID, who)
						require.NoError(t, err)
						require.False(t, mine[taken.Unit.ID], "unit %s twice to one contributor", taken.Unit.ID)
						mine[taken.Unit.ID] = true
						seen[taken.Unit.ID]++
					}
					_, err := f.c.AssignmentTake(ctx, f.pool.ID, who)
					require.True(t, IsNoUnit(err), "a sixth take: %v", err)
				}
				require.Len(t, seen, 5)
				for id, n := range seen {
					require.Equal(t, 3, n, "unit %s", id)
				}
			})
		}
	}
	_, err := NewClient(context.Background(), Config{DatabaseURL: testdb.SQLiteURL(t), TakeStrategy: "fastest"})
	require.ErrorContains(t, err, "fastest")
}
