// Package expr compiles and evaluates the CEL expressions of workflow
// definitions (a step's `if`, `forEach` and `input`) with cel.dev/cel-go, the Common
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
	"math"
	"reflect"
	"slices"
	"strconv"

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
	input       cel.Program // nil without `input`
	judges      []string    // judges.<name> read by any of them
}

// addJudges adds the judges an expression of the step reads, each once.
func (sp *stepPrograms) addJudges(judges []string) {
	for _, j := range judges {
		if !slices.Contains(sp.judges, j) {
			sp.judges = append(sp.judges, j)
		}
	}
}

// onlyInFanOut refuses item or index in an `if` or `input` of a step
// without forEach.
const onlyInFanOut = "item and index exist only in a fan-out step (one with forEach)"

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
// per step, those of `if`, `forEach` and `input`: parse and type errors,
// an `if` that is not a bool, a `forEach` that is not a list, a reference
// to a step that is not an ancestor, item or index in `forEach` or outside
// a fan-out step. (The
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
			sp.addJudges(uses.judges)
			if uses.item && s.ForEach == "" {
				c.add("if", onlyInFanOut)
			}
			sp.perInstance = uses.item
		}
		if s.ForEach != "" {
			var uses refs
			sp.forEach, uses = c.compile("forEach", s.ForEach)
			sp.addJudges(uses.judges)
			if uses.item {
				c.add("forEach", "forEach cannot use item or index: they are the elements it yields")
			}
		}
		if s.Input != "" && s.Signal == nil { // a signal step's is refused by flow.Validate
			var uses refs
			sp.input, uses = c.compile("input", s.Input)
			sp.addJudges(uses.judges)
			if uses.item && s.ForEach == "" {
				c.add("input", onlyInFanOut)
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
	Field string // "if", "forEach" or "input"
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
	if sp := w.steps[step]; sp != nil && sp.cond == nil {
		return true, nil // nothing to decode
	}
	v, err := DecodeVars(input)
	if err != nil {
		return false, &EvalError{Step: step, Field: "if", Err: err}
	}
	return w.ConditionVars(ctx, runID, step, v)
}

// ConditionVars is ConditionOfRun on variables decoded already.
func (w *Workflow) ConditionVars(ctx context.Context, runID, step string, vars *Vars) (bool, error) {
	sp := w.steps[step]
	if sp == nil {
		return false, &EvalError{Step: step, Field: "if", Err: errors.New("no such step")}
	}
	if sp.cond == nil {
		return true, nil
	}
	v, err := eval(ctx, sp.cond, vars, runID, step)
	if err != nil {
		return false, &EvalError{Step: step, Field: "if", Err: err}
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, &EvalError{Step: step, Field: "if", Err: fmt.Errorf("yielded a %s, not a bool", v.Type().TypeName())}
	}
	return bool(b), nil
}

// HasInput reports whether step has an `input` expression.
func (w *Workflow) HasInput(step string) bool {
	sp := w.steps[step]
	return sp != nil && sp.input != nil
}

// Input evaluates the `input` of step (HasInput) on vars, the variables
// of one instance of a step of run runID, and returns the value as JSON.
// A failure, or a value with no JSON form, is an *EvalError.
func (w *Workflow) Input(ctx context.Context, runID, step string, vars *Vars) ([]byte, error) {
	sp := w.steps[step]
	if sp == nil || sp.input == nil {
		return nil, &EvalError{Step: step, Field: "input", Err: errors.New("the step has no input")}
	}
	v, err := eval(ctx, sp.input, vars, runID, step)
	if err == nil {
		var b []byte
		if b, err = toJSON(v); err == nil {
			return b, nil
		}
	}
	return nil, &EvalError{Step: step, Field: "input", Err: err}
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
	vars, err := DecodeVars(input)
	if err != nil {
		return fail(err)
	}
	v, err := eval(ctx, sp.forEach, vars, "", step)
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

// toJSON encodes a value of an expression. Integers are written exactly
// (CEL's own JSON conversion, proto3's, writes one past 2^53 as a
// string), and a NaN or an infinity, which JSON cannot write, is an error
// (proto3's conversion writes "NaN" or "Infinity", a string where the
// expression made a number). Map keys are sorted. Other values (strings,
// bools, null, and bytes, durations and timestamps as proto3 writes them)
// go through CEL's conversion.
func toJSON(v ref.Val) ([]byte, error) {
	return appendJSON(nil, v)
}

func appendJSON(b []byte, v ref.Val) ([]byte, error) {
	if types.IsError(v) {
		return nil, fmt.Errorf("%v", v)
	}
	switch x := v.(type) {
	case types.Int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case types.Uint:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case types.Double:
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("the number %v has no JSON form", f)
		}
	case traits.Lister:
		n, ok := x.Size().(types.Int)
		if !ok {
			return nil, errors.New("a list has no size")
		}
		b = append(b, '[')
		for i := range int64(n) {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, x.Get(types.Int(i))); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case traits.Mapper:
		var keys []string
		for it := x.Iterator(); it.HasNext() == types.True; {
			k, ok := it.Next().(types.String)
			if !ok {
				return nil, errors.New("a map has no JSON form")
			}
			keys = append(keys, string(k))
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			key, err := json.Marshal(k)
			if err != nil {
				return nil, err
			}
			b = append(append(b, key...), ':')
			if b, err = appendJSON(b, x.Get(types.String(k))); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	native, err := v.ConvertToNative(jsonValueType)
	if err != nil {
		return nil, fmt.Errorf("a %s has no JSON form", v.Type().TypeName())
	}
	out, err := json.Marshal(native.(*structpb.Value).AsInterface())
	if err != nil {
		return nil, err
	}
	return append(b, out...), nil
}

// Vars are the variables of a step instance's expressions, decoded from
// its flow.Input document. A fan-out decodes its step's document once and
// adds each instance's item (WithItem), instead of decoding a document per
// instance that repeats the run's input and the ancestors' outputs.
type Vars struct {
	input  any
	steps  map[string]any
	judges map[string]any
	item   any
	index  *int64
}

// DecodeVars decodes the variables of a flow.Input document (with
// "judges" when the runtime added them).
func DecodeVars(input []byte) (*Vars, error) {
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
	v := &Vars{input: doc.Input, steps: doc.Steps, judges: doc.Judges}
	if v.steps == nil {
		v.steps = map[string]any{}
	}
	if v.judges == nil {
		v.judges = map[string]any{}
	}
	if doc.Index != nil {
		v.item, v.index = doc.Item, doc.Index
	}
	return v, nil
}

// WithItem returns the variables of the fan-out instance index whose
// element is item (JSON): v's, with item and index set. v is not changed;
// the two share what they have in common, which evaluation only reads.
func (v *Vars) WithItem(item []byte, index int) (*Vars, error) {
	var it any
	if len(item) > 0 {
		if err := json.Unmarshal(item, &it); err != nil {
			return nil, fmt.Errorf("decode item %d: %w", index, err)
		}
	}
	out := *v
	i := int64(index)
	out.item, out.index = it, &i
	return &out, nil
}

// eval runs prg on vars. A panic inside CEL is turned into an error: a
// bad expression fails its step, never the process.
// runID and step make the key of sample().
func eval(ctx context.Context, prg cel.Program, v *Vars, runID, step string) (val ref.Val, err error) {
	vars := map[string]any{"input": v.input, "steps": v.steps, judgesVar: v.judges}
	if v.index != nil {
		vars["item"], vars["index"] = v.item, *v.index
	}
	vars[sampleKeyVar] = SampleKey(runID, step, v.index)
	defer func() {
		if r := recover(); r != nil {
			val, err = nil, fmt.Errorf("evaluation failed: %v", r)
		}
	}()
	val, _, err = prg.ContextEval(ctx, vars)
	if err != nil {
		return nil, err
	}
	return val, nil
}
