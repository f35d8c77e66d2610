package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/bench"
)

// The no-op step jobs of `docket bench --mode workflow`, one type per
// shape, so that each shape's jobs are listed apart.
type (
	benchChainStep   struct{}
	benchDiamondStep struct{}
)

func (benchChainStep) JobType() string   { return "bench.flow.chain" }
func (benchDiamondStep) JobType() string { return "bench.flow.diamond" }

func benchStepType(shape bench.Shape) string {
	if shape.Name == bench.ShapeDiamond.Name {
		return benchDiamondStep{}.JobType()
	}
	return benchChainStep{}.JobType()
}

func benchWorkflowName(shape bench.Shape) string { return "bench_" + shape.Name }

// benchFlowSystem adapts the public docket API to the workflow harness.
type benchFlowSystem struct {
	client  *docket.Client
	workers int
	batch   int
	flush   int
	worker  *docket.Worker
}

func (s *benchFlowSystem) Name() string    { return "docket" }
func (s *benchFlowSystem) Backend() string { return s.client.Backend() }

func (s *benchFlowSystem) Unfinished(ctx context.Context) (int, error) {
	counts, err := s.client.CountByState(ctx)
	if err != nil {
		return 0, err
	}
	open, err := s.client.RunList(ctx, docket.RunListParams{States: []docket.RunState{docket.RunRunning, docket.RunPaused}, Limit: 1000})
	if err != nil {
		return 0, err
	}
	return counts[docket.JobStateCreated] + counts[docket.JobStateQueued] +
		counts[docket.JobStateRunning] + counts[docket.JobStateRetry] + len(open), nil
}

func (s *benchFlowSystem) Setup(ctx context.Context, shapes []bench.Shape) error {
	for _, shape := range shapes {
		b := docket.NewWorkflow(benchWorkflowName(shape))
		for _, step := range shape.Steps {
			var opts []docket.StepOption
			if ps := shape.Parents[step]; len(ps) > 0 {
				opts = append(opts, docket.After(ps...))
			}
			b.Job(step, benchStepType(shape), opts...)
		}
		def, err := b.Definition()
		if err != nil {
			return err
		}
		if _, _, err := s.client.WorkflowPut(ctx, def); err != nil {
			return err
		}
	}
	return nil
}

func (s *benchFlowSystem) StartRuns(ctx context.Context, shape bench.Shape, n int) ([]string, error) {
	runs := make([]docket.RunStartParams, n)
	for i := range runs {
		runs[i] = docket.RunStartParams{Workflow: benchWorkflowName(shape)}
	}
	res, err := s.client.RunStartMany(ctx, runs)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(res))
	for i, r := range res {
		ids[i] = r.Run.ID.String()
	}
	return ids, nil
}

func (s *benchFlowSystem) StartWorkers(ctx context.Context, h *bench.Hooks) error {
	w := docket.NewWorker(s.client, docket.WorkerConfig{
		Queues: map[string]int{
			benchChainStep{}.JobType():   s.workers,
			benchDiamondStep{}.JobType(): s.workers,
		},
		FetchBatch: s.batch, CompleteBatch: s.flush,
	})
	docket.AddHandler(w, func(_ context.Context, job *docket.Job[benchChainStep]) error {
		h.Started(job.ID.String())
		h.Returned()
		return nil
	})
	docket.AddHandler(w, func(_ context.Context, job *docket.Job[benchDiamondStep]) error {
		h.Started(job.ID.String())
		h.Returned()
		return nil
	})
	if err := w.Start(ctx); err != nil {
		return err
	}
	s.worker = w
	return nil
}

func (s *benchFlowSystem) StopWorkers(ctx context.Context) error {
	if s.worker != nil {
		s.worker.Stop(ctx)
		s.worker = nil
	}
	return nil
}

func (s *benchFlowSystem) RunsOpen(ctx context.Context) (bool, error) {
	open, err := s.client.RunList(ctx, docket.RunListParams{States: []docket.RunState{docket.RunRunning, docket.RunPaused}, Limit: 1})
	return len(open) > 0, err
}

func (s *benchFlowSystem) CountSucceeded(ctx context.Context, shape bench.Shape) (int, error) {
	n := 0
	before := uuid.Nil
	for {
		runs, err := s.client.RunList(ctx, docket.RunListParams{
			Workflow: benchWorkflowName(shape), States: []docket.RunState{docket.RunSucceeded}, Before: before, Limit: 1000,
		})
		if err != nil {
			return 0, err
		}
		n += len(runs)
		if len(runs) < 1000 {
			return n, nil
		}
		before = runs[len(runs)-1].ID
	}
}

func (s *benchFlowSystem) StepJobs(ctx context.Context, shape bench.Shape) ([]bench.StepJob, error) {
	var out []bench.StepJob
	before := uuid.Nil
	for {
		rows, err := s.client.List(ctx, docket.ListParams{Types: []string{benchStepType(shape)}, Before: before, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			var p struct {
				Run struct {
					ID   string `json:"id"`
					Step string `json:"step"`
				} `json:"run"`
			}
			if err := json.Unmarshal(r.Payload, &p); err != nil {
				return nil, fmt.Errorf("job %s: not a step job: %w", r.ID, err)
			}
			out = append(out, bench.StepJob{Run: p.Run.ID, Step: p.Run.Step, Key: r.ID.String(), Finished: r.FinishedAt})
		}
		if len(rows) < 1000 {
			return out, nil
		}
		before = rows[len(rows)-1].ID
	}
}
