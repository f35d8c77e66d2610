package docket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
)

type closeRaceArgs struct{ StepPayload }

func (closeRaceArgs) JobType() string { return "closerace.step" }

// TestPoolCloseRace: two nodes (two clients on one database, each with a
// worker; the leader's pool-completer runs every 10 ms) while contributors
// take, judge and give back units of one pool through both, and the pool
// is closed through both nodes at once in the middle of it. Units need 2
// judgments and up to 5 while under 0.99 confident, so at the close some
// have none, some one, some two or more, some a live assignment. After:
//   - no call failed: every judgment through a taken assignment was
//     stored (none refused as on a canceled unit), takes only found no
//     unit or a pool not open, both closes returned the pool;
//   - every run ended (none RUNNING), the pool is COMPLETED;
//   - every unit ended exactly once: FINALIZED with at least 2 judgments,
//     one unit.finalized, its step SUCCEEDED once with the unit's result
//     and the run SUCCEEDED; or CANCELED with fewer, no unit.finalized,
//     its step FAILED once saying so ("n of 2" its judgments), the run
//     FAILED, and no judgment stored after the cancel;
//   - the counters match: units by state, judgments, no active
//     assignment; one pool.updated to CLOSED and one to COMPLETED.
func TestPoolCloseRace(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := backend.URL(t)
			logs := &WarnLog{}
			var nodes [2]*Client
			for i := range nodes {
				c, err := NewClient(ctx, Config{DatabaseURL: url, AutoMigrate: true, Logger: slog.New(logs)})
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, c.Close()) })
				nodes[i] = c
			}
			a := nodes[0]
			tmpl, err := ParseTask([]byte(`{"title": "Same?",
				"fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
				"judgmentsPerUnit": {"min": 2, "max": 5, "targetConfidence": 0.99}}`))
			require.NoError(t, err)
			_, _, err = a.TaskPut(ctx, "same", tmpl)
			require.NoError(t, err)
			def, err := NewWorkflow("closerace").
				Human("label", "same").
				Job("ship", "closerace.step", After("label")).
				Definition()
			require.NoError(t, err)
			_, _, err = a.WorkflowPut(ctx, def)
			require.NoError(t, err)
			for i, c := range nodes {
				w := NewWorker(c, WorkerConfig{
					NodeID: fmt.Sprintf("node-%d", i), Queues: map[string]int{"closerace.step": 2},
					PollInterval: 20 * time.Millisecond, LeaderTTL: 300 * time.Millisecond,
					AssignmentReapInterval: 10 * time.Millisecond, WorkflowSweepInterval: 20 * time.Millisecond,
				})
				AddHandler(w, func(ctx context.Context, j *Job[closeRaceArgs]) error { return nil })
				require.NoError(t, w.Start(ctx))
				t.Cleanup(func() {
					sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					w.Stop(sctx)
				})
			}

			n := 60
			if backend.Name == "sqlite" {
				n = 24
			}
			params := make([]RunStartParams, n)
			for i := range params {
				params[i] = RunStartParams{Workflow: "closerace", Input: map[string]int{"n": i}}
			}
			started, err := a.RunStartMany(ctx, params)
			require.NoError(t, err)
			pools, err := a.PoolList(ctx, PoolListParams{Workflow: "closerace"})
			require.NoError(t, err)
			require.Len(t, pools, 1)
			pool := pools[0].ID

			var (
				mu         sync.Mutex
				unexpected []string
				judged     atomic.Int32
				closed     = make(chan struct{})
			)
			fail := func(format string, args ...any) {
				mu.Lock()
				unexpected = append(unexpected, fmt.Sprintf(format, args...))
				mu.Unlock()
			}
			var wg sync.WaitGroup
			for k := range 8 {
				node := nodes[k%2]
				who, err := node.ContributorCreate(ctx, ContributorCreateParams{ExternalID: uuid.NewString()})
				require.NoError(t, err)
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(k), 11))
					for {
						taken, err := node.AssignmentTake(ctx, pool, who.ID)
						var notOpen *PoolNotOpenError
						switch {
						case errors.As(err, &notOpen):
							return // closed
						case IsNoUnit(err):
							select {
							case <-closed:
								return
							case <-time.After(2 * time.Millisecond):
							}
							continue
						case err != nil:
							fail("take: %v", err)
							return
						}
						// Through either node, like a contributor whose
						// requests land on another server.
						via := nodes[rng.IntN(2)]
						if rng.IntN(6) == 0 {
							if _, err := via.AssignmentRelease(ctx, taken.Assignment.ID, who.ID); err != nil {
								fail("release %s: %v", taken.Assignment.ID, err)
							}
							continue
						}
						answer := []string{`{"same":"yes"}`, `{"same":"no"}`}[rng.IntN(2)]
						if _, err := via.JudgmentSubmit(ctx, taken.Assignment.ID, who.ID, json.RawMessage(answer)); err != nil {
							fail("judgment through %s (unit %s): %v", taken.Assignment.ID, taken.Unit.ID, err)
							continue
						}
						judged.Add(1)
					}
				}()
			}

			// The close, through both nodes at once, once about half the
			// judgments the units need came in.
			for judged.Load() < int32(n) {
				time.Sleep(time.Millisecond)
			}
			var closers sync.WaitGroup
			gate := make(chan struct{})
			for _, c := range nodes {
				closers.Add(1)
				go func() {
					defer closers.Done()
					<-gate
					p, err := c.PoolClose(ctx, pool)
					if err != nil {
						fail("close: %v", err)
						return
					}
					if p.Status != PoolClosed && p.Status != PoolCompleted {
						fail("close left the pool %s", p.Status)
					}
				}()
			}
			closeAt := time.Now()
			close(gate)
			closers.Wait()
			close(closed)
			wg.Wait()

			deadline := time.Now().Add(60 * time.Second)
			for {
				running, err := a.RunList(ctx, RunListParams{States: []RunState{RunRunning, RunPaused}, Limit: 1})
				require.NoError(t, err)
				p, err := a.PoolGet(ctx, pool)
				require.NoError(t, err)
				if len(running) == 0 && p.Status == PoolCompleted {
					break
				}
				require.True(t, time.Now().Before(deadline), "runs still running: %d, pool %s %+v", len(running), p.Status, p.Counts)
				time.Sleep(20 * time.Millisecond)
			}
			mu.Lock()
			require.Empty(t, unexpected, "only documented refusals")
			mu.Unlock()
			for _, m := range logs.Messages() {
				require.NotContains(t, m, "deadlock")
				require.NotContains(t, m, "40P01")
				require.NotContains(t, m, "closed pool", "ending the units of the closed pool failed")
			}

			// The outbox: what ended each unit, step and pool.
			finalizedEvents := map[uuid.UUID]int{}
			labelEnds := map[uuid.UUID]int{} // by run: RUNNING → an end of the label step
			poolMoves := map[crowd.PoolStatus]int{}
			var after int64
			for {
				evs, err := a.store.OutboxList(ctx, &store.OutboxListParams{AfterID: after, Limit: 1000})
				require.NoError(t, err)
				for _, ev := range evs {
					after = ev.ID
					switch ev.Type {
					case crowd.EventUnitFinalized:
						var d crowd.UnitFinalizedData
						require.NoError(t, json.Unmarshal(ev.Data, &d))
						finalizedEvents[d.UnitID]++
					case flow.EventStepStateChanged:
						var d flow.StepStateChangedData
						require.NoError(t, json.Unmarshal(ev.Data, &d))
						for _, tr := range d.Transitions {
							if tr.Step == "label" && tr.From == flow.StepRunning {
								labelEnds[tr.RunID]++
							}
						}
					case crowd.EventPoolUpdated:
						var d crowd.PoolUpdatedData
						require.NoError(t, json.Unmarshal(ev.Data, &d))
						if d.PoolID == pool {
							poolMoves[d.To]++
						}
					}
				}
				if len(evs) < 1000 {
					break
				}
			}

			var finalized, byClose, canceled, judgments int
			for _, s := range started {
				run, err := a.RunGet(ctx, s.Run.ID)
				require.NoError(t, err)
				var label *RunStep
				for _, st := range run.Steps {
					if st.Name == "label" {
						label = st
					}
				}
				require.NotNil(t, label)
				unit, err := a.UnitGet(ctx, label.UnitID)
				require.NoError(t, err)
				list, err := a.JudgmentList(ctx, unit.ID)
				require.NoError(t, err)
				require.Len(t, list, unit.JudgmentCount, "unit %s counts what it holds", unit.ID)
				judgments += len(list)
				require.Equal(t, 1, labelEnds[run.ID], "run %s: its label step ended once", run.ID)
				switch unit.State {
				case UnitFinalized:
					finalized++
					if !unit.FinalizedAt.Before(closeAt) {
						byClose++ // by the close, or by a judgment after it
					}
					require.Equal(t, 1, finalizedEvents[unit.ID], "unit %s: one unit.finalized", unit.ID)
					require.GreaterOrEqual(t, unit.JudgmentCount, 2, "unit %s", unit.ID)
					require.Equal(t, StepSucceeded, label.State, "run %s", run.ID)
					require.JSONEq(t, string(unit.Result), string(label.Output))
					require.Equal(t, RunSucceeded, run.State, "run %s: %s", run.ID, run.Error)
				case UnitCanceled:
					canceled++
					require.Zero(t, finalizedEvents[unit.ID], "unit %s", unit.ID)
					require.Less(t, unit.JudgmentCount, 2, "unit %s", unit.ID)
					require.Equal(t, StepFailed, label.State, "run %s", run.ID)
					require.Equal(t, fmt.Sprintf("pool %s was closed before unit %s had enough judgments (%d of 2)", pool, unit.ID, unit.JudgmentCount), label.Error)
					require.Equal(t, RunFailed, run.State, "run %s", run.ID)
					for _, j := range list {
						require.False(t, j.SubmittedAt.After(unit.UpdatedAt), "unit %s: judgment %s came after the cancel", unit.ID, j.ID)
					}
				default:
					t.Fatalf("run %s: unit %s is %s", run.ID, unit.ID, unit.State)
				}
			}
			p, err := a.PoolGet(ctx, pool)
			require.NoError(t, err)
			require.Equal(t, PoolCompleted, p.Status)
			require.Equal(t, finalized, p.Counts.Finalized)
			require.Equal(t, canceled, p.Counts.Canceled)
			require.Zero(t, p.Counts.Open())
			require.Zero(t, p.Counts.ActiveAssignments)
			require.Equal(t, judgments, p.Counts.Judgments)
			require.Equal(t, map[crowd.PoolStatus]int{crowd.PoolOpen: 1, crowd.PoolClosed: 1, crowd.PoolCompleted: 1}, poolMoves)
			t.Logf("%d units: %d finalized (%d after the close), %d canceled; %d judgments", n, finalized, byClose, canceled, judgments)
			require.NotZero(t, canceled, "the close came before every unit had its judgments")
		})
	}
}

// TestPoolEndUnitsMax: a call that may end max units ends that many, the
// smallest ids first, and leaves the others to the next call (PoolClose
// ends PoolCloseEndMax itself, the pool-completer the rest).
func TestPoolEndUnitsMax(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newCrowdFixture(t, backend)
			inputs := make([]json.RawMessage, 5)
			for i := range inputs {
				inputs[i] = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
			}
			units, err := f.c.UnitsAdd(ctx, f.pool.ID, inputs)
			require.NoError(t, err)
			_, err = f.c.poolMove(ctx, f.pool.ID, PoolClosed, PoolOpen) // closed, nothing ended yet
			require.NoError(t, err)
			n, err := f.c.poolEndUnits(ctx, f.pool.ID, 2)
			require.NoError(t, err)
			require.Equal(t, 2, n)
			for i, u := range units {
				got, err := f.c.UnitGet(ctx, u.ID)
				require.NoError(t, err)
				want := UnitJudgable
				if i < 2 {
					want = UnitCanceled
				}
				require.Equal(t, want, got.State, "unit %d", i)
			}
			done, err := f.c.PoolsComplete(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, done)
			p, err := f.c.PoolGet(ctx, f.pool.ID)
			require.NoError(t, err)
			require.Equal(t, 5, p.Counts.Canceled)
		})
	}
}
