package expr

import (
	"fmt"
	"slices"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"

	"github.com/docket-run/docket/internal/flow"
)

// compiler compiles the expressions of one step, recording problems.
type compiler struct {
	env   *cel.Env
	p     *flow.Problems
	graph *flow.Graph // nil when the structure is invalid
	step  *flow.Step
	index int
}

func (c *compiler) add(field, format string, args ...any) {
	who := fmt.Sprintf("step %d", c.index)
	if flow.CheckStepName(c.step.Name) == "" {
		who = fmt.Sprintf("step %q", c.step.Name)
	}
	c.p.Add(fmt.Sprintf("steps[%d].%s", c.index, field), "%s: %s: %s", who, field, fmt.Sprintf(format, args...))
}

// refs is what an expression refers to.
type refs struct {
	steps  []string // steps.<name>, in order of appearance, once each
	judges []string // judges.<name>, likewise
	item   bool     // item or index
	bad    bool     // steps used other than as steps.<name> or steps["<name>"]
	badJ   bool     // judges used other than as judges.<name> or judges["<name>"]
}

// compile parses and checks src, the `if`, `forEach` or `input` (field) of
// the step, and returns its program, or nil after recording its problems.
func (c *compiler) compile(field, src string) (cel.Program, refs) {
	if len(src) > flow.MaxExprLen || strings.TrimSpace(src) == "" {
		return nil, refs{} // reported by flow.Validate
	}
	checked, iss := c.env.Compile(src)
	if iss.Err() != nil {
		for _, e := range iss.Errors() {
			c.add(field, "%s (at %d:%d)", e.Message, e.Location.Line(), e.Location.Column()+1)
		}
		return nil, refs{}
	}
	ok := true
	switch kind := checked.OutputType().Kind(); {
	case field == "if" && kind != types.BoolKind && kind != types.DynKind:
		c.add(field, "must be a bool expression, not %s", checked.OutputType())
		ok = false
	case field == "forEach" && kind != types.ListKind && kind != types.DynKind:
		c.add(field, "must be a list expression, not %s", checked.OutputType())
		ok = false
	}
	var r refs
	walk(checked.NativeRep().Expr(), nil, &r)
	if r.bad {
		c.add(field, `steps may be used only as steps.<name> or steps["<name>"]`)
		ok = false
	}
	if r.badJ {
		c.add(field, `judges may be used only as judges.<name> or judges["<name>"]`)
		ok = false
	}
	if c.graph != nil {
		ancestors := c.graph.Ancestors(c.step.Name)
		for _, name := range r.steps {
			switch {
			case c.graph.Step(name) == nil:
				c.add(field, "steps.%s is not a step of this workflow", name)
				ok = false
			case !slices.Contains(ancestors, name):
				c.add(field, "steps.%s is not an ancestor of %q (only ancestors have ended when it runs; add it to after)", name, c.step.Name)
				ok = false
			}
		}
		for _, name := range r.judges {
			s := c.graph.Step(name)
			switch {
			case s == nil:
				c.add(field, "judges.%s: %s is not a step of this workflow", name, name)
				ok = false
			case s.Human == nil || s.ForEach != "":
				c.add(field, "judges.%s: only a human step without forEach has judges", name)
				ok = false
			case !slices.Contains(ancestors, name):
				c.add(field, "judges.%s: %s is not an ancestor of %q (add it to after)", name, name, c.step.Name)
				ok = false
			}
		}
	}
	if !ok {
		return nil, r
	}
	prg, err := c.env.Program(checked,
		cel.CostLimit(CostLimit),
		cel.InterruptCheckFrequency(100),
	)
	if err != nil {
		c.add(field, "%v", err)
		return nil, r
	}
	return prg, r
}

// walk records the references of e. shadowed lists the comprehension
// variables in scope, which hide the workflow variables of the same name.
func walk(e ast.Expr, shadowed []string, r *refs) {
	isVar := func(e ast.Expr, name string) bool {
		return e.Kind() == ast.IdentKind && e.AsIdent() == name && !slices.Contains(shadowed, name)
	}
	switch e.Kind() {
	case ast.IdentKind:
		switch {
		case isVar(e, "steps"):
			r.bad = true
		case isVar(e, judgesVar):
			r.badJ = true
		case isVar(e, "item"), isVar(e, "index"):
			r.item = true
		}
	case ast.SelectKind:
		sel := e.AsSelect()
		if isVar(sel.Operand(), "steps") {
			r.addStep(sel.FieldName())
			return
		}
		if isVar(sel.Operand(), judgesVar) {
			r.addJudges(sel.FieldName())
			return
		}
		walk(sel.Operand(), shadowed, r)
	case ast.CallKind:
		call := e.AsCall()
		args := call.Args()
		if call.FunctionName() == operators.Index && len(args) == 2 && isVar(args[0], "steps") {
			if args[1].Kind() == ast.LiteralKind {
				if name, ok := args[1].AsLiteral().Value().(string); ok {
					r.addStep(name)
					return
				}
			}
			r.bad = true
		}
		if call.FunctionName() == operators.Index && len(args) == 2 && isVar(args[0], judgesVar) {
			if args[1].Kind() == ast.LiteralKind {
				if name, ok := args[1].AsLiteral().Value().(string); ok {
					r.addJudges(name)
					return
				}
			}
			r.badJ = true
		}
		if call.IsMemberFunction() {
			walk(call.Target(), shadowed, r)
		}
		for _, a := range args {
			walk(a, shadowed, r)
		}
	case ast.ListKind:
		for _, el := range e.AsList().Elements() {
			walk(el, shadowed, r)
		}
	case ast.MapKind:
		for _, entry := range e.AsMap().Entries() {
			walk(entry.AsMapEntry().Key(), shadowed, r)
			walk(entry.AsMapEntry().Value(), shadowed, r)
		}
	case ast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			walk(f.AsStructField().Value(), shadowed, r)
		}
	case ast.ComprehensionKind:
		comp := e.AsComprehension()
		walk(comp.IterRange(), shadowed, r)
		walk(comp.AccuInit(), shadowed, r)
		inner := append(slices.Clone(shadowed), comp.IterVar(), comp.AccuVar())
		if comp.HasIterVar2() {
			inner = append(inner, comp.IterVar2())
		}
		walk(comp.LoopCondition(), inner, r)
		walk(comp.LoopStep(), inner, r)
		walk(comp.Result(), append(slices.Clone(shadowed), comp.AccuVar()), r)
	}
}

func (r *refs) addStep(name string) {
	if !slices.Contains(r.steps, name) {
		r.steps = append(r.steps, name)
	}
}

func (r *refs) addJudges(name string) {
	if !slices.Contains(r.judges, name) {
		r.judges = append(r.judges, name)
	}
}
