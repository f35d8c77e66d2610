// Package flow holds the value types of workflows: definitions (a named DAG
// of job, signal and human steps), their structural validation, canonical
// encoding and content hash, graph helpers, the run and step state machines,
// the pure rules that decide when a step is released, skipped or canceled,
// and the construction of step inputs and run outputs.
//
// It has no database and no CEL: the expressions of a definition (`if`,
// `forEach`, `input`) are compiled and evaluated by the sibling package
// flow/expr, so that only the packages that compile or run expressions
// link CEL.
package flow

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/docket-run/docket/internal/jsonfield"
)

// Limits of a definition.
const (
	// MaxSteps is the most steps one definition may have.
	MaxSteps = 500
	// MaxNameLen is the longest step name, in bytes.
	MaxNameLen = 64
	// MaxWorkflowNameLen is the longest workflow, job type, queue or task
	// name, in bytes.
	MaxWorkflowNameLen = 128
	// MaxExprLen is the longest `if`, `forEach` or `input` expression, in
	// bytes.
	MaxExprLen = 4096
	// MaxForEachItems is the most instances one fan-out step may have in one
	// run. More is a run-time error of the step, not a validation error: the
	// list is only known when the step is released.
	MaxForEachItems = 10_000
	// MaxFanOutBytes is the most bytes the instances of one fan-out step
	// may carry in all: the sum of their job payloads (or unit inputs),
	// written in the one transaction that releases the step. More is a
	// run-time error of the step, as too many items is: every instance
	// carries the run's input and its parents' outputs unless the step's
	// `input` says what it carries instead.
	MaxFanOutBytes = 64 << 20
	// MaxDefinitionBytes is the largest JSON document Decode accepts.
	MaxDefinitionBytes = 1 << 20
)

// Definition is a workflow definition: a named DAG of steps. Its JSON form is
// the API's (DESIGN §5).
type Definition struct {
	Name  string `json:"name"`
	Steps []Step `json:"steps"`
}

// Step is one node of the DAG. Exactly one of Job, Signal and Human is set.
type Step struct {
	Name string `json:"name"`
	// Job, Signal, Human: the kind of step.
	Job    *JobStep    `json:"job,omitempty"`
	Signal *SignalStep `json:"signal,omitempty"`
	Human  *HumanStep  `json:"human,omitempty"`
	// After lists the parents: the step waits for them (see Trigger).
	After []string `json:"after,omitempty"`
	// If is a CEL expression; false skips the step.
	If string `json:"if,omitempty"`
	// ForEach is a CEL expression yielding a list: one instance per element.
	ForEach string `json:"forEach,omitempty"`
	// Input is a CEL expression whose value is what each instance of a job
	// or human step carries as "input", in place of the run's input and
	// its parents' outputs ("steps" is then left out; see InstanceInput).
	// Empty: the whole step input.
	Input string `json:"input,omitempty"`
	// Trigger: when the step may run given its parents' ends; default
	// TriggerAllSuccess.
	Trigger Trigger `json:"trigger,omitempty"`
	// OnFailure: what a failure of this step does to the run; default
	// OnFailureFail.
	OnFailure OnFailure `json:"onFailure,omitempty"`
}

// JobStep runs a job of a type. Zero fields take the defaults of a job
// inserted with no options (queue = type, priority 1, 25 attempts, the
// worker's timeout).
type JobStep struct {
	Type        string   `json:"type"`
	Queue       string   `json:"queue,omitempty"`
	Priority    *int     `json:"priority,omitempty"`
	MaxAttempts int      `json:"maxAttempts,omitempty"`
	Timeout     Duration `json:"timeout,omitempty"`
}

// SignalStep waits for a signal sent to the run for this step, or for its
// timeout (none when empty), after which the step fails.
type SignalStep struct {
	Timeout Duration `json:"timeout,omitempty"`
}

// HumanStep puts a unit in the pool of a human task; its output is the
// aggregated answer and its confidence.
type HumanStep struct {
	Task string `json:"task"`
	// Review names another human step, an ancestor of this one, whose
	// answer this step reviews (docs/workflows.md, "Review steps"): the
	// reviewer's unit carries that step's input and answer, and the
	// review's verdict approves, corrects or rejects it. Empty for a
	// plain human step.
	Review string `json:"review,omitempty"`
	// Overrides: task settings changed for this step (a JSON object).
	Overrides json.RawMessage `json:"overrides,omitempty"`
}

// Kind names the kind of a step.
type Kind string

// The kinds of step.
const (
	KindJob    Kind = "job"
	KindSignal Kind = "signal"
	KindHuman  Kind = "human"
)

// Kind returns the step's kind, or "" when it has none or more than one.
func (s *Step) Kind() Kind {
	var kinds []Kind
	if s.Job != nil {
		kinds = append(kinds, KindJob)
	}
	if s.Signal != nil {
		kinds = append(kinds, KindSignal)
	}
	if s.Human != nil {
		kinds = append(kinds, KindHuman)
	}
	if len(kinds) != 1 {
		return ""
	}
	return kinds[0]
}

// Trigger says which ends of its parents let a step run.
type Trigger string

// The triggers.
const (
	// TriggerAllSuccess (the default): run when every parent succeeded or
	// was skipped, and at least one succeeded.
	TriggerAllSuccess Trigger = "all_success"
	// TriggerAllDone: run when every parent is done, whatever its end.
	TriggerAllDone Trigger = "all_done"
)

// OrDefault returns t, or TriggerAllSuccess when t is empty.
func (t Trigger) OrDefault() Trigger { return cmp.Or(t, TriggerAllSuccess) }

// OnFailure says what the failure of a step does to its run.
type OnFailure string

// The failure policies.
const (
	// OnFailureFail (the default): the run fails.
	OnFailureFail OnFailure = "fail"
	// OnFailureContinue: the run goes on; dependents see the failure.
	OnFailureContinue OnFailure = "continue"
)

// OrDefault returns f, or OnFailureFail when f is empty.
func (f OnFailure) OrDefault() OnFailure { return cmp.Or(f, OnFailureFail) }

// Duration is a Go duration string ("30s", "24h"), as the JSON form spells
// it. The empty string means "not set".
type Duration string

// Of spells d as a Duration without zero units ("24h", not "24h0m0s").
func Of(d time.Duration) Duration {
	if d == 0 {
		return ""
	}
	s := d.String() // "24h0m0s", "1h30m0s", "1m0s", "30s", "1.5s"
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return Duration(s)
}

// Parse returns the duration; zero for "".
func (d Duration) Parse() (time.Duration, error) {
	if d == "" {
		return 0, nil
	}
	return time.ParseDuration(string(d))
}

// Decode reads a definition from its JSON form. Unknown fields, trailing
// data and wrong JSON types are refused with a *ValidationError naming the
// field; Decode does not validate the content (see Validate).
func Decode(data []byte) (*Definition, error) {
	if len(data) > MaxDefinitionBytes {
		return nil, invalid("", fmt.Sprintf("the definition exceeds %d bytes", MaxDefinitionBytes))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var def Definition
	if err := dec.Decode(&def); err != nil {
		return nil, decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("", "data after the JSON object")
	}
	return &def, nil
}

// decodeError turns an encoding/json error into a field error.
func decodeError(err error) *ValidationError {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		return invalid(typeErr.Field, fmt.Sprintf("must be %s, not a JSON %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value))
	case errors.As(err, &syntaxErr):
		return invalid("", fmt.Sprintf("invalid JSON at byte %d: %v", syntaxErr.Offset, syntaxErr))
	case errors.Is(err, io.EOF):
		return invalid("", "the body is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "the JSON ends too early")
	}
	if name, ok := jsonfield.Unknown(err); ok {
		return invalid("", fmt.Sprintf("unknown field %q", name))
	}
	return invalid("", err.Error())
}

// jsonKind names the JSON type a Go kind is decoded from.
func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "int", "int64", "float64":
		return "a number"
	case "slice":
		return "an array"
	case "struct", "ptr", "map":
		return "an object"
	case "bool":
		return "a boolean"
	}
	return "another type"
}
