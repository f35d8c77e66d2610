package docket

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/workflow"
)

// A workflow definition is a named, versioned DAG of steps: jobs, signals
// and human tasks, with conditions (`if`), fan-out (`forEach`), triggers and
// failure policies. Its JSON form is the API's (`PUT /v1/workflows/{name}`);
// NewWorkflow builds the same value in Go. docs/workflows.md is the
// reference.
//
// The types are those of the internal flow package, re-exported so that
// the JSON form, the Go form and the engine share one definition.
type (
	// WorkflowDefinition is a workflow definition.
	WorkflowDefinition = flow.Definition
	// WorkflowStep is one step of a definition; exactly one of Job, Signal
	// and Human is set.
	WorkflowStep = flow.Step
	// JobStep runs a job of a type.
	JobStep = flow.JobStep
	// SignalStep waits for a signal sent to the run, or its timeout.
	SignalStep = flow.SignalStep
	// HumanStep puts a unit in a human task's pool.
	HumanStep = flow.HumanStep
	// WorkflowDuration is a duration as the JSON form spells it ("24h").
	WorkflowDuration = flow.Duration
	// StepTrigger says which ends of its parents let a step run.
	StepTrigger = flow.Trigger
	// StepOnFailure says what a step's failure does to its run.
	StepOnFailure = flow.OnFailure
	// RunState is the state of a workflow run.
	RunState = flow.RunState
	// StepState is the state of one step instance of a run.
	StepState = flow.StepState
	// WorkflowValidationError lists every problem of a definition, each
	// with the path of its field ("steps[2].after[0]").
	WorkflowValidationError = flow.ValidationError
	// FieldError is one problem of a WorkflowValidationError.
	FieldError = flow.FieldError
)

// Triggers and failure policies.
const (
	TriggerAllSuccess = flow.TriggerAllSuccess
	TriggerAllDone    = flow.TriggerAllDone
	OnFailureFail     = flow.OnFailureFail
	OnFailureContinue = flow.OnFailureContinue
)

// Run states.
const (
	RunRunning   = flow.RunRunning
	RunPaused    = flow.RunPaused
	RunSucceeded = flow.RunSucceeded
	RunFailed    = flow.RunFailed
	RunCanceled  = flow.RunCanceled
)

// Step instance states.
const (
	StepPending   = flow.StepPending
	StepRunning   = flow.StepRunning
	StepSucceeded = flow.StepSucceeded
	StepFailed    = flow.StepFailed
	StepSkipped   = flow.StepSkipped
	StepCanceled  = flow.StepCanceled
)

// DecodeWorkflow reads a definition from its JSON form and validates its
// structure. The error is a *WorkflowValidationError naming every bad field.
// The CEL expressions are compiled when the definition is stored
// (ValidateWorkflow checks both).
func DecodeWorkflow(data []byte) (*WorkflowDefinition, error) {
	def, err := flow.Decode(data)
	if err != nil {
		return nil, err
	}
	if err := flow.Validate(def); err != nil {
		return nil, err
	}
	return def, nil
}

// ValidateWorkflow checks def as WorkflowPut and PUT /v1/workflows/{name}
// do: its structure (names, kinds, fields, limits, parents, cycles) and
// its CEL expressions (each `if` compiles to a bool, each `forEach` to a
// list, and they name only parents). The error is a
// *WorkflowValidationError naming every bad field.
func ValidateWorkflow(def *WorkflowDefinition) error { return workflow.Validate(def) }

// WorkflowHash returns the content hash of def ("sha256:…"): definitions
// with the same hash are the same version. Key order, white space, the
// order of the steps array and of `after`, and defaults spelled out do not
// change it.
func WorkflowHash(def *WorkflowDefinition) (string, error) { return flow.Hash(def) }

// WorkflowBuilder builds a WorkflowDefinition step by step:
//
//	def, err := docket.NewWorkflow("product-match").
//		Job("fetch", "fetch-pair").
//		Human("label", "same-product", docket.After("fetch")).
//		Definition()
//
// Steps keep the order they were added in. Problems (a bad option, an
// unknown parent, a cycle…) are collected and returned by Definition.
type WorkflowBuilder struct {
	def      flow.Definition
	problems []FieldError
}

// NewWorkflow starts the definition of the workflow name.
func NewWorkflow(name string) *WorkflowBuilder {
	return &WorkflowBuilder{def: flow.Definition{Name: name}}
}

// StepOption sets an optional part of a step. An option that does not
// apply to the step's kind returns an error, which Definition reports.
type StepOption func(*WorkflowStep) error

// Job adds a step that runs a job of jobType.
func (b *WorkflowBuilder) Job(name, jobType string, opts ...StepOption) *WorkflowBuilder {
	return b.add(WorkflowStep{Name: name, Job: &JobStep{Type: jobType}}, opts)
}

// Signal adds a step that waits for a signal sent to the run for it (an
// approval, a call from another system); see StepTimeout.
func (b *WorkflowBuilder) Signal(name string, opts ...StepOption) *WorkflowBuilder {
	return b.add(WorkflowStep{Name: name, Signal: &SignalStep{}}, opts)
}

// Human adds a step that puts a unit in the pool of the human task named
// task; its output is the aggregated answer and its confidence.
func (b *WorkflowBuilder) Human(name, task string, opts ...StepOption) *WorkflowBuilder {
	return b.add(WorkflowStep{Name: name, Human: &HumanStep{Task: task}}, opts)
}

func (b *WorkflowBuilder) add(s WorkflowStep, opts []StepOption) *WorkflowBuilder {
	for _, opt := range opts {
		if opt == nil {
			continue // an option chosen by a condition that chose none
		}
		if err := opt(&s); err != nil {
			b.problems = append(b.problems, FieldError{
				Field:   fmt.Sprintf("steps[%d]", len(b.def.Steps)),
				Message: fmt.Sprintf("step %q: %v", s.Name, err),
			})
		}
	}
	b.def.Steps = append(b.def.Steps, s)
	return b
}

// Definition returns the definition built, or a *WorkflowValidationError
// listing the builder's problems and the structural ones (as
// ValidateWorkflow). The expressions are checked when the server stores it.
func (b *WorkflowBuilder) Definition() (*WorkflowDefinition, error) {
	var p flow.Problems
	for _, fe := range b.problems {
		p.Add(fe.Field, "%s", fe.Message)
	}
	flow.ValidateInto(&p, &b.def)
	if err := p.Err(); err != nil {
		return nil, err
	}
	def := b.def
	def.Steps = append([]WorkflowStep(nil), b.def.Steps...)
	return &def, nil
}

// After makes the step wait for the named steps (its parents).
func After(steps ...string) StepOption {
	return func(s *WorkflowStep) error {
		s.After = append(s.After, steps...)
		return nil
	}
}

// If sets the step's CEL condition; false skips the step.
func If(expr string) StepOption {
	return func(s *WorkflowStep) error {
		s.If = expr
		return nil
	}
}

// ForEach sets the step's CEL fan-out expression: one instance per element
// of the list it yields.
func ForEach(expr string) StepOption {
	return func(s *WorkflowStep) error {
		s.ForEach = expr
		return nil
	}
}

// StepInput sets the step's CEL input expression (`input`): its value,
// over the variables of If and ForEach (input, steps, and item and index
// in a fan-out), is what each instance carries as its payload's (or unit
// input's) "input", in place of the run's input, and the payload has no
// "steps". A fan-out over a list in the run's input then carries each
// instance what it needs instead of the whole input every time:
//
//	docket.ForEach("input.urls"), docket.StepInput("{'url': item, 'size': input.size}")
//
// Job and human steps only.
func StepInput(expr string) StepOption {
	return func(s *WorkflowStep) error {
		if s.Signal != nil {
			return fmt.Errorf("StepInput applies to job and human steps only")
		}
		s.Input = expr
		return nil
	}
}

// OnAllDone sets the trigger all_done: the step runs once every parent has
// ended, whatever the end (instead of all_success).
func OnAllDone() StepOption {
	return func(s *WorkflowStep) error {
		s.Trigger = TriggerAllDone
		return nil
	}
}

// ContinueOnFailure sets onFailure "continue": the step's failure does not
// fail the run.
func ContinueOnFailure() StepOption {
	return func(s *WorkflowStep) error {
		s.OnFailure = OnFailureContinue
		return nil
	}
}

// StepTimeout sets a job step's attempt timeout, or how long a signal step
// waits before it fails.
func StepTimeout(d time.Duration) StepOption {
	return func(s *WorkflowStep) error {
		switch {
		case s.Job != nil:
			s.Job.Timeout = flow.Of(d)
		case s.Signal != nil:
			s.Signal.Timeout = flow.Of(d)
		default:
			return fmt.Errorf("StepTimeout applies to job and signal steps")
		}
		if d <= 0 {
			return fmt.Errorf("StepTimeout must be positive, not %v", d)
		}
		return nil
	}
}

// StepQueue sets a job step's queue (default: the job type).
func StepQueue(queue string) StepOption {
	return jobOption("StepQueue", func(j *JobStep) { j.Queue = queue })
}

// StepPriority sets a job step's priority, 0 (runs first) .. 9 (default 1).
func StepPriority(priority int) StepOption {
	return jobOption("StepPriority", func(j *JobStep) { j.Priority = &priority })
}

// StepMaxAttempts sets a job step's attempt budget (default 25).
func StepMaxAttempts(n int) StepOption {
	return jobOption("StepMaxAttempts", func(j *JobStep) { j.MaxAttempts = n })
}

func jobOption(name string, set func(*JobStep)) StepOption {
	return func(s *WorkflowStep) error {
		if s.Job == nil {
			return fmt.Errorf("%s applies to job steps only", name)
		}
		set(s.Job)
		return nil
	}
}

// StepOverrides sets a human step's task overrides, a JSON object (for
// example {"judgmentsPerUnit": {"min": 5}}).
func StepOverrides(overrides json.RawMessage) StepOption {
	return func(s *WorkflowStep) error {
		if s.Human == nil {
			return fmt.Errorf("StepOverrides applies to human steps only")
		}
		s.Human.Overrides = overrides
		return nil
	}
}
