package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/flow"
)

// StepType is the job type of every step of the chaos workflows. Its jobs
// go to Queue, so the Go workers and the exec workers (through the
// servers' lease API) both run them.
const StepType = "chaos.step"

// failPrefix: a step whose name starts with it fails for good.
const failPrefix = "fail_"

// fanOutWidth is the number of instances of the fan-out workflow's step.
const fanOutWidth = 50

// Shape is one of the chaos workflows, and the state its runs must end in.
type Shape struct {
	Name string
	Want flow.RunState
	def  func() (*docket.WorkflowDefinition, error)
}

// Shapes are the chaos run's workflows: a 4-step chain (one step failing
// retryably before it succeeds), a diamond, a fan-out of 50 and its
// fan-in, a branch with a step skipped by its `if` and a failing step the
// run tolerates (onFailure continue), and a run failed by a failing step
// (its dependent is canceled).
var Shapes = []Shape{
	{Name: "chaos_chain", Want: flow.RunSucceeded, def: func() (*docket.WorkflowDefinition, error) {
		return docket.NewWorkflow("chaos_chain").
			Job("a", StepType, docket.StepQueue(Queue)).
			Job("retry_b", StepType, docket.StepQueue(Queue), docket.After("a")).
			Job("c", StepType, docket.StepQueue(Queue), docket.After("retry_b")).
			Job("d", StepType, docket.StepQueue(Queue), docket.After("c")).
			Definition()
	}},
	{Name: "chaos_diamond", Want: flow.RunSucceeded, def: func() (*docket.WorkflowDefinition, error) {
		return docket.NewWorkflow("chaos_diamond").
			Job("top", StepType, docket.StepQueue(Queue)).
			Job("left", StepType, docket.StepQueue(Queue), docket.After("top")).
			Job("right", StepType, docket.StepQueue(Queue), docket.After("top")).
			Job("join", StepType, docket.StepQueue(Queue), docket.After("left", "right")).
			Definition()
	}},
	{Name: "chaos_fanout", Want: flow.RunSucceeded, def: func() (*docket.WorkflowDefinition, error) {
		return docket.NewWorkflow("chaos_fanout").
			Job("split", StepType, docket.StepQueue(Queue)).
			Job("each", StepType, docket.StepQueue(Queue), docket.After("split"), docket.ForEach("input.items")).
			Job("gather", StepType, docket.StepQueue(Queue), docket.After("each")).
			Definition()
	}},
	{Name: "chaos_branch", Want: flow.RunSucceeded, def: func() (*docket.WorkflowDefinition, error) {
		return docket.NewWorkflow("chaos_branch").
			Job("a", StepType, docket.StepQueue(Queue)).
			Job("skipped", StepType, docket.StepQueue(Queue), docket.After("a"), docket.If("input.take")).
			Job("kept", StepType, docket.StepQueue(Queue), docket.After("a")).
			Job("fail_soft", StepType, docket.StepQueue(Queue), docket.After("a"), docket.ContinueOnFailure(), docket.StepMaxAttempts(2)).
			Job("join", StepType, docket.StepQueue(Queue), docket.After("skipped", "kept")).
			Definition()
	}},
	{Name: "chaos_failing", Want: flow.RunFailed, def: func() (*docket.WorkflowDefinition, error) {
		return docket.NewWorkflow("chaos_failing").
			Job("a", StepType, docket.StepQueue(Queue)).
			Job("fail_hard", StepType, docket.StepQueue(Queue), docket.After("a"), docket.StepMaxAttempts(2)).
			Job("after", StepType, docket.StepQueue(Queue), docket.After("fail_hard")).
			Job("beside", StepType, docket.StepQueue(Queue), docket.After("a")).
			Definition()
	}},
}

// runInput is the input of a chaos run.
type runInput struct {
	MS    int   `json:"ms"`              // how long each step's work takes
	Items []int `json:"items,omitempty"` // chaos_fanout: what "each" fans out over
	Take  bool  `json:"take"`            // chaos_branch: false skips "skipped"
	// Right is chaos_human's right answer: what an honest contributor
	// picks (crowd.go).
	Right string `json:"right,omitempty"`
}

// stepJob is a step job's payload as the chaos handlers read it.
type stepJob struct {
	Run struct {
		Step  string `json:"step"`
		Index int    `json:"index"`
	} `json:"run"`
	Input runInput        `json:"input"`
	Item  json.RawMessage `json:"item,omitempty"`
}

func (stepJob) JobType() string { return StepType }

// errStepScripted is the failure of fail_ steps and of retry_ steps'
// early attempts.
var errStepScripted = errors.New("scripted step failure")

// performStep does a step's work: fail_ steps fail for good (fatal true),
// retry_ steps fail retryably on their first attempt; the output names the
// step, instance and item.
func performStep(ctx context.Context, p stepJob, attempt int) (out json.RawMessage, fatal bool, err error) {
	select {
	case <-ctx.Done():
		return nil, false, context.Cause(ctx)
	case <-time.After(time.Duration(p.Input.MS) * time.Millisecond):
	}
	switch {
	case strings.HasPrefix(p.Run.Step, failPrefix):
		return nil, true, fmt.Errorf("step %s: %w", p.Run.Step, errStepScripted)
	case strings.HasPrefix(p.Run.Step, "retry_") && attempt < 2:
		return nil, false, fmt.Errorf("step %s attempt %d: %w", p.Run.Step, attempt, errStepScripted)
	}
	item := p.Item
	if len(item) == 0 {
		item = json.RawMessage("null")
	}
	out, err = json.Marshal(map[string]any{"step": p.Run.Step, "index": p.Run.Index, "item": item})
	return out, false, err
}

// putWorkflows stores the chaos workflows through a client of the
// database.
func (r *run) putWorkflows(ctx context.Context) error {
	for _, sh := range Shapes {
		def, err := sh.def()
		if err != nil {
			return fmt.Errorf("workflow %s: %w", sh.Name, err)
		}
		if _, _, err := r.client.WorkflowPut(ctx, def); err != nil {
			return fmt.Errorf("put workflow %s: %w", sh.Name, err)
		}
	}
	return nil
}

// submitRuns starts cfg.Runs runs spread over the phase, each of a seeded
// random shape, through the run's client on the database, retrying each
// (same idempotency key) until the database takes it.
func (r *run) submitRuns(ctx context.Context) error {
	if r.cfg.Runs == 0 {
		return nil
	}
	rnd := mrand.New(mrand.NewPCG(r.cfg.Seed, 3))
	gap := r.cfg.Duration / time.Duration(r.cfg.Runs+1)
	var wg sync.WaitGroup
	errs := make(chan error, r.cfg.Runs)
	start := time.Now()
	for i := range r.cfg.Runs {
		if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		sh := Shapes[rnd.IntN(len(Shapes))]
		in := runInput{MS: 5 + rnd.IntN(60), Take: false}
		if sh.Name == "chaos_fanout" {
			for k := range fanOutWidth {
				in.Items = append(in.Items, 100*i+k)
			}
		}
		key := fmt.Sprintf("chaos-run-%d-%d", r.cfg.Seed, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.startRun(sh, in, key); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (r *run) startRun(sh Shape, in runInput, key string) error {
	deadline := time.Now().Add(submitTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := r.client.RunStart(ctx, sh.Name, in, &docket.RunStartOpts{IdempotencyKey: key})
		cancel()
		if err == nil {
			r.mu.Lock()
			r.expectRuns[key] = sh
			if res.Duplicate {
				r.runResubmits++ // an earlier try committed before its answer was lost
			}
			r.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("start run %s of %s: no success within %v; last: %w", key, sh.Name, submitTimeout, err)
		}
		time.Sleep(100 * time.Millisecond) // the database is restarting
	}
}

// openRuns counts the runs not finished, -1 when the database cannot say.
func (r *run) openRuns(ctx context.Context) int {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	runs, err := r.client.RunList(qctx, docket.RunListParams{States: []docket.RunState{docket.RunRunning, docket.RunPaused}, Limit: 1000})
	if err != nil {
		return -1
	}
	return len(runs)
}
