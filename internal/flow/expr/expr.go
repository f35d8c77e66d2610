// Package expr compiles and evaluates the CEL expressions of workflow
// definitions (a step's `if` and `forEach`) with cel.dev/cel-go, the Common
// Expression Language. It is apart from package flow so that only the
// packages that compile or run expressions link CEL (internal/workflow,
// which advances runs, and through it the public docket package).
//
// Variables, all from the step instance's flow.Input document:
//
//	input  dyn               the run's input
//	steps  map(string, dyn)  steps.<name>.{state, output, confidence}, for
//	                         each ancestor of the step
//	item   dyn               the element of a fan-out instance
//	index  int               its position
//
// Functions beyond CEL's standard ones:
//
//	sample(rate double) bool  true for a fraction rate of the runs, the
//	                          same answer for one run and step every time
//	                          (sample.go)
//
// and judges.<name>, who answered human step <name> (judges.go).
//
// JSON numbers are doubles in CEL (`input.n + 1.0`, or `int(input.n) + 1`);
// comparisons across int and double work as written.
package expr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/docket-run/docket/internal/flow"
)

// CostLimit bounds the work of one evaluation, in CEL's cost units (about
// one per operation and per element visited); past it the evaluation fails.
// It is far above what a fan-out of flow.MaxForEachItems needs.
const CostLimit = 10_000_000

// Env is a CEL environment for workflow expressions. It is safe for
// concurrent use; make one and share it.
type Env struct {
	env *cel.Env
}

// NewEnv builds the environment.
func NewEnv() (*Env, error) {
	opts := []cel.EnvOption{
		cel.Variable("input", cel.DynType),
		cel.Variable("steps", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("item", cel.DynType),
		cel.Variable("index", cel.IntType),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(flow.MaxExprLen),
	}
	opts = append(opts, sampleOptions()...)
	env, err := cel.NewEnv(append(opts, judgesOptions()...)...)
	if err != nil {
		return nil, fmt.Errorf("build the CEL environment: %w", err)
	}
	return &Env{env: env}, nil
}

// Workflow is a valid definition with its expressions compiled.
type Workflow struct {
	graph *flow.Graph
	steps map[string]*stepPrograms
}

type stepPrograms struct {
	cond        cel.Program // nil without `if`
	perInstance bool        // `if` uses item or index
	forEach     cel.Program // nil without `forEach`
	judges      []string    // judges.<name> read by either
}

// Validate checks def structurally (flow.Validate) and compiles its
// expressions; it returns nil or a *flow.ValidationError listing every
// problem.
func Validate(def *flow.Definition) error {
	env, err := NewEnv()
	if err != nil {
		return err
	}
	_, err = env.Compile(def)
	return err
}

// Compile validates def and compiles its expressions. The error is a
// *flow.ValidationError listing every problem: the structural ones, then,
// per step, those of `if` and `forEach`: parse and type errors, an `if`
// that is not a bool, a `forEach` that is not a list, a reference to a step
// that is not an ancestor, item or index outside a fan-out `if`. (The
// ancestor check needs a sound graph, so it runs only when the structure is
// valid.)
func (e *Env) Compile(def *flow.Definition) (*Workflow, error) {
	var p flow.Problems
	flow.ValidateInto(&p, def)
	if def == nil {
		return nil, p.Err()
	}
	var graph *flow.Graph
	if p.Len() == 0 {
		g, err := flow.NewGraph(def)
		if err != nil {
			return nil, err
		}
		graph = g
	}
	w := &Workflow{graph: graph, steps: make(map[string]*stepPrograms, len(def.Steps))}
	for i := range def.Steps {
		s := &def.Steps[i]
		sp := &stepPrograms{}
		c := compiler{env: e.env, p: &p, graph: graph, step: s, index: i}
		if s.If != "" {
			var uses refs
			sp.cond, uses = c.compile("if", s.If)
			sp.judges = uses.judges
			if uses.item && s.ForEach == "" {
				c.add("if", "item and index exist only in a fan-out step (one with forEach)")
			}
			sp.perInstance = uses.item
		}
		if s.ForEach != "" {
			var uses refs
			sp.forEach, uses = c.compile("forEach", s.ForEach)
			for _, j := range uses.judges {
				if !slices.Contains(sp.judges, j) {
					sp.judges = append(sp.judges, j)
				}
			}
			if uses.item {
				c.add("forEach", "forEach cannot use item or index: they are the elements it yields")
			}
		}
		if _, dup := w.steps[s.Name]; !dup {
			w.steps[s.Name] = sp
		}
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	return w, nil
}

// Graph returns the workflow's DAG.
func (w *Workflow) Graph() *flow.Graph { return w.graph }

// HasCondition reports whether step has an `if`, and whether it is
// evaluated per fan-out instance (it uses item or index) rather than once
// for the step before its forEach.
func (w *Workflow) HasCondition(step string) (has, perInstance bool) {
	sp := w.steps[step]
	if sp == nil || sp.cond == nil {
		return false, false
	}
	return true, sp.perInstance
}

// EvalError is an expression that failed at run time: the step fails with
// this error; the process goes on.
type EvalError struct {
	Step  string
	Field string // "if" or "forEach"
	Err   error
}

func (e *EvalError) Error() string {
	return fmt.Sprintf("step %q: %s: %v", e.Step, e.Field, e.Err)
}

func (e *EvalError) Unwrap() error { return e.Err }

// Condition evaluates the `if` of step against input, a flow.Input
// document (flow.StepInput over the step's ancestors, with the item for a
// per-instance condition). A step without `if` is true. Every failure is
// an *EvalError. sample() draws with the run id "" (ConditionOfRun).
func (w *Workflow) Condition(ctx context.Context, step string, input []byte) (bool, error) {
	return w.ConditionOfRun(ctx, "", step, input)
}

// ConditionOfRun is Condition for a step of run runID: sample() draws
// with the run's id and the step's name.
func (w *Workflow) ConditionOfRun(ctx context.Context, runID, step string, input []byte) (bool, error) {
	sp := w.steps[step]
	if sp == nil {
		return false, &EvalError{Step: step, Field: "if", Err: errors.New("no such step")}
	}
	if sp.cond == nil {
		return true, nil
	}
	v, err := eval(ctx, sp.cond, input, runID, step)
	if err != nil {
		return false, &EvalError{Step: step, Field: "if", Err: err}
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, &EvalError{Step: step, Field: "if", Err: fmt.Errorf("yielded a %s, not a bool", v.Type().TypeName())}
	}
	return bool(b), nil
}

// Items evaluates the `forEach` of step against input and returns the
// elements as JSON, in order. More than flow.MaxForEachItems, or an
// element that has no JSON form, is an *EvalError.
func (w *Workflow) Items(ctx context.Context, step string, input []byte) ([][]byte, error) {
	sp := w.steps[step]
	if sp == nil || sp.forEach == nil {
		return nil, &EvalError{Step: step, Field: "forEach", Err: errors.New("the step has no forEach")}
	}
	fail := func(err error) ([][]byte, error) { return nil, &EvalError{Step: step, Field: "forEach", Err: err} }
	v, err := eval(ctx, sp.forEach, input, "", step)
	if err != nil {
		return fail(err)
	}
	list, ok := v.(traits.Lister)
	if !ok {
		return fail(fmt.Errorf("yielded a %s, not a list", v.Type().TypeName()))
	}
	n, ok := list.Size().(types.Int)
	if !ok {
		return fail(errors.New("the list has no size"))
	}
	if n > flow.MaxForEachItems {
		return fail(fmt.Errorf("yielded %d items; a step fans out to at most %d", n, flow.MaxForEachItems))
	}
	out := make([][]byte, n)
	for i := range out {
		b, err := toJSON(list.Get(types.Int(i)))
		if err != nil {
			return fail(fmt.Errorf("item %d: %w", i, err))
		}
		out[i] = b
	}
	return out, nil
}

var jsonValueType = reflect.TypeFor[*structpb.Value]()

func toJSON(v ref.Val) ([]byte, error) {
	if types.IsError(v) {
		return nil, fmt.Errorf("%v", v)
	}
	native, err := v.ConvertToNative(jsonValueType)
	if err != nil {
		return nil, fmt.Errorf("a %s has no JSON form", v.Type().TypeName())
	}
	return json.Marshal(native.(*structpb.Value).AsInterface())
}

// eval runs prg on the variables of the input document. A panic inside
// CEL is turned into an error: a bad expression fails its step, never the
// process.
// runID and step make the key of sample().
func eval(ctx context.Context, prg cel.Program, input []byte, runID, step string) (v ref.Val, err error) {
	var doc struct {
		Input  any            `json:"input"`
		Steps  map[string]any `json:"steps"`
		Item   any            `json:"item"`
		Index  *int64         `json:"index"`
		Judges map[string]any `json:"judges"`
	}
	if err := json.Unmarshal(input, &doc); err != nil {
		return nil, fmt.Errorf("decode the step input: %w", err)
	}
	vars := map[string]any{"input": doc.Input, "steps": doc.Steps}
	if doc.Steps == nil {
		vars["steps"] = map[string]any{}
	}
	if doc.Index != nil {
		vars["item"], vars["index"] = doc.Item, *doc.Index
	}
	vars[sampleKeyVar] = SampleKey(runID, step, doc.Index)
	vars[judgesVar] = doc.Judges
	if doc.Judges == nil {
		vars[judgesVar] = map[string]any{}
	}
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("evaluation failed: %v", r)
		}
	}()
	v, _, err = prg.ContextEval(ctx, vars)
	if err != nil {
		return nil, err
	}
	return v, nil
}
