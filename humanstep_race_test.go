package docket_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

type crowdRaceArgs struct{ docket.StepPayload }

func (crowdRaceArgs) JobType() string { return "crowdrace.step" }

// TestRunHumanStepRace: runs of fetch (job) → label (human) → ship (job),
// with units needing 1, 2 or 3 judgments (and a fanned-out label, four
// units of one run in one pool, needing 1 each), while contributors take and
// judge units and, racing each judgment, another goroutine cancels its
// run or pauses and resumes it; a worker runs the jobs and the sweeper.
// The rules afterwards:
//   - no call fails but with a documented refusal: no unit left to take,
//     ErrRunConflict for an operation on a finished or canceling run, and
//     the unit-canceled refusal of a judgment; never a deadlock, never
//     anything else (nor in the worker's log);
//   - every run ends SUCCEEDED or CANCELED;
//   - a FINALIZED unit's step SUCCEEDED with the unit's result, and its
//     unit holds exactly its judgments per unit; a CANCELED unit's step
//     is CANCELED in a CANCELED run, and holds fewer judgments than it
//     needed (none arrived after the cancel);
//   - a SUCCEEDED run has every step SUCCEEDED; a CANCELED run's label is
//     SUCCEEDED (its unit FINALIZED before the cancel) or CANCELED.
func TestRunHumanStepRace(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		logs := &docket.WarnLog{}
		client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true, Logger: slog.New(logs)})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, client.Close()) })

		tmpl, err := docket.ParseTask([]byte(sameTask))
		require.NoError(t, err)
		_, _, err = client.TaskPut(ctx, "same", tmpl)
		require.NoError(t, err)
		perUnit := map[string]int{}
		for k := 1; k <= 4; k++ {
			name, n := fmt.Sprintf("crowdrace%d", k), k
			opts := []docket.StepOption{docket.After("fetch")}
			if k == 4 {
				// A unit per item, several open units of one run in one
				// pool: its cancel changes them one by one.
				name, n = "crowdracefan", 1
				opts = append(opts, docket.ForEach("input.items"))
			}
			perUnit[name] = n
			opts = append(opts, docket.StepOverrides(json.RawMessage(fmt.Sprintf(`{"judgmentsPerUnit":%d}`, n))))
			def, err := docket.NewWorkflow(name).
				Job("fetch", "crowdrace.step").
				Human("label", "same", opts...).
				Job("ship", "crowdrace.step", docket.After("label")).
				Definition()
			require.NoError(t, err)
			_, _, err = client.WorkflowPut(ctx, def)
			require.NoError(t, err)
		}

		cfg := fastConfig()
		cfg.Queues = map[string]int{"crowdrace.step": 4}
		cfg.WorkflowSweepInterval = 20 * time.Millisecond
		w := docket.NewWorker(client, cfg)
		docket.AddHandler(w, func(ctx context.Context, j *docket.Job[crowdRaceArgs]) error {
			return docket.SetResult(ctx, map[string]string{"step": j.Args.Run.Step})
		})
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			w.Stop(sctx)
		})

		perFlow := 30
		if backend.Name == "sqlite" {
			perFlow = 10
		}
		var params []docket.RunStartParams
		for name := range perUnit {
			for i := range perFlow {
				params = append(params, docket.RunStartParams{Workflow: name, Input: map[string]any{"n": i, "items": []int{1, 2, 3, 4}}})
			}
		}
		started, err := client.RunStartMany(ctx, params)
		require.NoError(t, err)

		// The pools exist once a run reached its human step.
		pools := map[uuid.UUID]bool{}
		eventually(t, 60*time.Second, "a pool per workflow", func() bool {
			for name := range perUnit {
				ps, err := client.PoolList(ctx, docket.PoolListParams{Workflow: name})
				require.NoError(t, err)
				for _, p := range ps {
					pools[p.ID] = true
				}
			}
			return len(pools) == len(perUnit)
		})

		var (
			mu         sync.Mutex
			unexpected []string
			refused    int
			finals     int
		)
		fail := func(format string, args ...any) {
			mu.Lock()
			unexpected = append(unexpected, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		// op races one run operation with a judgment of its run.
		op := func(runID uuid.UUID, which int) {
			var err error
			switch which {
			case 0:
				_, err = client.RunCancel(ctx, runID)
			case 1:
				if _, err = client.RunPause(ctx, runID); err == nil {
					_, err = client.RunResume(ctx, runID)
				}
			default:
				return
			}
			if err != nil && !errors.Is(err, docket.ErrRunConflict) {
				fail("run %s operation: %v", runID, err)
			}
		}

		stop := make(chan struct{})
		var wg sync.WaitGroup
		const judges = 6
		for k := range judges {
			who, err := client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: uuid.NewString()})
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(k), 7))
				for {
					select {
					case <-stop:
						return
					default:
					}
					took := false
					for pool := range pools {
						taken, err := client.AssignmentTake(ctx, pool, who.ID)
						if docket.IsNoUnit(err) {
							continue
						}
						if err != nil {
							fail("take from pool %s: %v", pool, err)
							continue
						}
						took = true
						answer := []string{`{"same":"yes"}`, `{"same":"no"}`}[rng.IntN(2)]
						which := rng.IntN(3)
						go1 := make(chan struct{})
						var opDone sync.WaitGroup
						opDone.Add(1)
						go func() {
							defer opDone.Done()
							<-go1
							op(taken.Unit.RunID, which)
						}()
						close(go1)
						sub, err := client.JudgmentSubmit(ctx, taken.Assignment.ID, who.ID, json.RawMessage(answer))
						var ae *docket.AssignmentError
						switch {
						case errors.As(err, &ae) && ae.Reason == docket.RefusedUnitCanceled:
							mu.Lock()
							refused++
							mu.Unlock()
						case err != nil:
							fail("judgment through assignment %s: %v", taken.Assignment.ID, err)
						case sub.Finalized != nil:
							mu.Lock()
							finals++
							mu.Unlock()
						}
						opDone.Wait()
					}
					if !took {
						time.Sleep(5 * time.Millisecond)
					}
				}
			}()
		}

		// Every run ends; a run left PAUSED (its resume lost the race to
		// a cancel request… or nothing) is resumed.
		ids := make([]uuid.UUID, len(started))
		for i, r := range started {
			ids[i] = r.Run.ID
		}
		// Two list queries a poll (the database holds these runs only),
		// not a RunGet with its steps per run: those took the CPU of the
		// contributors and the worker the wait is for.
		eventually(t, 120*time.Second, "every run to end", func() bool {
			paused, err := client.RunList(ctx, docket.RunListParams{States: []docket.RunState{docket.RunPaused}, Limit: 1000})
			require.NoError(t, err)
			for _, run := range paused {
				if _, err := client.RunResume(ctx, run.ID); err != nil && !errors.Is(err, docket.ErrRunConflict) {
					fail("resume run %s: %v", run.ID, err)
				}
			}
			open, err := client.RunList(ctx, docket.RunListParams{States: []docket.RunState{docket.RunRunning, docket.RunPaused}, Limit: 1})
			require.NoError(t, err)
			return len(open) == 0
		})
		close(stop)
		wg.Wait()
		require.Empty(t, unexpected, "only documented refusals")
		for _, m := range logs.Messages() {
			require.NotContains(t, m, "deadlock", "worker log")
			require.NotContains(t, m, "40P01", "worker log")
		}

		var succeeded, canceled, finalizedThenCanceled int
		for i, id := range ids {
			run, err := client.RunGet(ctx, id)
			require.NoError(t, err)
			need := perUnit[params[i].Workflow]
			switch run.State {
			case docket.RunSucceeded:
				succeeded++
				for _, s := range run.Steps {
					require.Equal(t, docket.StepSucceeded, s.State, "run %s step %s", id, s.Name)
				}
			case docket.RunCanceled:
				canceled++
			default:
				t.Fatalf("run %s ended %s", id, run.State)
			}
			labels := 0
			for _, label := range run.Steps {
				if label.Name != "label" {
					continue
				}
				labels++
				require.NotEqual(t, uuid.Nil, label.UnitID, "run %s: the label step was released", id)
				unit, err := client.UnitGet(ctx, label.UnitID)
				require.NoError(t, err)
				judgments, err := client.JudgmentList(ctx, unit.ID)
				require.NoError(t, err)
				require.Len(t, judgments, unit.JudgmentCount, "unit %s counts what it holds", unit.ID)
				switch unit.State {
				case docket.UnitFinalized:
					require.Equal(t, docket.StepSucceeded, label.State, "run %s: finalized unit → step SUCCEEDED", id)
					require.JSONEq(t, string(unit.Result), string(label.Output))
					require.Equal(t, need, unit.JudgmentCount, "unit %s", unit.ID)
					if run.State == docket.RunCanceled {
						finalizedThenCanceled++
						require.False(t, unit.FinalizedAt.After(run.FinishedAt), "run %s: finalized before the cancel", id)
					}
				case docket.UnitCanceled:
					require.Equal(t, docket.RunCanceled, run.State, "run %s: a canceled unit only in a canceled run", id)
					require.Equal(t, docket.StepCanceled, label.State, "run %s", id)
					require.Less(t, unit.JudgmentCount, need, "unit %s: no judgment after the cancel", unit.ID)
					for _, j := range judgments {
						require.False(t, j.SubmittedAt.After(unit.UpdatedAt), "unit %s: judgment %s came after the cancel", unit.ID, j.ID)
					}
				default:
					t.Fatalf("run %s: unit %s ended %s", id, unit.ID, unit.State)
				}
			}
			if params[i].Workflow == "crowdracefan" {
				require.Equal(t, 4, labels, "run %s: a unit per item", id)
			} else {
				require.Equal(t, 1, labels, "run %s", id)
			}
		}
		t.Logf("%d runs: %d succeeded, %d canceled (%d after their unit finalized); %d final judgments, %d refused on canceled units",
			len(ids), succeeded, canceled, finalizedThenCanceled, finals, refused)
		require.NotZero(t, succeeded)
		require.NotZero(t, canceled)
	})
}
