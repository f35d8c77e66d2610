package expr

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/docket-run/docket/internal/flow"
)

type bundle struct {
	env *Env
}

func setup(t *testing.T) *bundle {
	t.Helper()
	env, err := NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{env: env}
}

// def builds a chain a → b → c (c fans out when forEach is set) with the
// given expressions on c, plus a step d beside it.
func def(cond, forEach string) *flow.Definition {
	return &flow.Definition{Name: "w", Steps: []flow.Step{
		{Name: "a", Job: &flow.JobStep{Type: "t"}},
		{Name: "b", Job: &flow.JobStep{Type: "t"}, After: []string{"a"}},
		{Name: "c", Job: &flow.JobStep{Type: "t"}, After: []string{"b"}, If: cond, ForEach: forEach},
		{Name: "d", Job: &flow.JobStep{Type: "t"}, After: []string{"a"}},
	}}
}

func TestDesignExampleCompiles(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../testdata/product-match.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := flow.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(d); err != nil {
		t.Fatal(err)
	}
}

func TestCompileProblems(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name, cond, forEach string
		field, message      string // "" field: valid
	}{
		{"bool if", "steps.b.output.ok && input.n > 2", "", "", ""},
		{"ancestor by index", `steps["a"].state == "SUCCEEDED"`, "", "", ""},
		{"dyn forEach", "", "steps.a.output.items", "", ""},
		{"literal list forEach", "", "[1, 2, 3]", "", ""},
		{"map macro forEach", "", "input.xs.map(x, x * 2.0)", "", ""},
		{"per-instance if", "item.size > 3.0 && index < 5", "input.xs", "", ""},
		{"shadowed steps", "[1].all(steps, steps > 0)", "", "", ""},
		{"has", "has(steps.a.output.x)", "", "", ""},
		{"syntax", "steps.a.output ==", "", "steps[2].if", `step "c": if: Syntax error`},
		{"undeclared", "stepz.a", "", "steps[2].if", "undeclared reference to 'stepz'"},
		{"int if", "input.n + 1", "", "steps[2].if", "must be a bool expression, not int"},
		{"string if", `"yes"`, "", "steps[2].if", "must be a bool expression, not string"},
		{"int forEach", "", "3", "steps[2].forEach", "must be a list expression, not int"},
		{"map forEach", "", `{"a": 1}`, "steps[2].forEach", "must be a list expression, not map"},
		{"unknown step", "steps.nope.output", "", "steps[2].if", "steps.nope is not a step of this workflow"},
		{"not ancestor", "steps.d.output == 1", "", "steps[2].if", `steps.d is not an ancestor of "c"`},
		{"itself", "steps.c.output == 1", "", "steps[2].if", `steps.c is not an ancestor of "c"`},
		{"dynamic step", `steps[input.which].output == 1`, "", "steps[2].if", `steps may be used only as steps.<name>`},
		{"whole steps", `size(steps) > 1`, "", "steps[2].if", `steps may be used only as steps.<name>`},
		{"item without fan-out", "item == 1", "", "steps[2].if", "item and index exist only in a fan-out step"},
		{"index in forEach", "", "[index]", "steps[2].forEach", "forEach cannot use item or index"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := b.env.Compile(def(tc.cond, tc.forEach))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("valid expressions refused: %v", err)
				}
				return
			}
			var ve *flow.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v is not a *flow.ValidationError", err)
			}
			if len(ve.Errors) == 0 || ve.Errors[0].Field != tc.field || !strings.Contains(ve.Errors[0].Message, tc.message) {
				t.Fatalf("problems %+v, want field %q and message containing %q", ve.Errors, tc.field, tc.message)
			}
		})
	}
}

// TestCompileCombinesProblems: structural and expression problems come in
// one error, each expression's once.
func TestCompileCombinesProblems(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := def(`"x"`, "1")
	d.Steps[3].After = []string{"zz"}
	_, err := b.env.Compile(d)
	var ve *flow.ValidationError
	if !errors.As(err, &ve) {
		t.Fatal(err)
	}
	var fields []string
	for _, fe := range ve.Errors {
		fields = append(fields, fe.Field)
	}
	if got := strings.Join(fields, " "); got != "steps[3].after[0] steps[2].if steps[2].forEach" {
		t.Fatalf("fields %s (%v)", got, ve)
	}
}

func compile(t *testing.T, b *bundle, cond, forEach string) *Workflow {
	t.Helper()
	w, err := b.env.Compile(def(cond, forEach))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// input builds c's CEL input as the runtime would.
func input(t *testing.T, runInput, bOutput string, item *flow.Item) []byte {
	t.Helper()
	conf := 0.6
	records := map[string]*flow.Record{
		"a": {Instances: []flow.Instance{{State: flow.StepSucceeded, Output: []byte(`{"n":1}`)}}},
		"b": {Instances: []flow.Instance{{State: flow.StepSucceeded, Output: []byte(bOutput), Confidence: &conf}}},
	}
	doc, err := flow.StepInput([]byte(runInput), records, []string{"a", "b"}, item)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestCondition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cases := []struct {
		cond, runInput, bOutput string
		want                    bool
		err                     string // substring of the EvalError
	}{
		{"steps.b.confidence < 0.8", `{}`, `{}`, true, ""},
		{"steps.b.confidence < 1", `{}`, `{}`, true, ""}, // double vs int
		{`steps.b.output.same == "yes"`, `{}`, `{"same":"yes"}`, true, ""},
		{`steps["a"].output.n == 1 && steps.a.state == "SUCCEEDED"`, `{}`, `{}`, true, ""},
		{"input.n > 2", `{"n":2}`, `{}`, false, ""},
		{"has(steps.b.output.images)", `{}`, `{}`, false, ""},
		{"steps.b.output.images.size() > 0", `{}`, `{}`, false, "no such key: images"},
		{"input.n + 1 > 2", `{"n":1}`, `{}`, false, "no such overload"},
		{"input.n", `{"n":1}`, `{}`, false, "yielded a double, not a bool"},
		{"input.n / 0.0 > 1.0", `{"n":1}`, `{}`, true, ""},
		{"int(input.n) / 0 == 1", `{"n":1}`, `{}`, false, "division by zero"},
		{"input.xs.all(x, input.xs.all(y, input.xs.all(z, x + y + z >= 0.0)))", `{"xs":` + numbers(300) + `}`, `{}`, false, "cost limit"},
	}
	for _, tc := range cases {
		w := compile(t, b, tc.cond, "")
		got, err := w.Condition(ctx, "c", input(t, tc.runInput, tc.bOutput, nil))
		if tc.err != "" {
			var ee *EvalError
			if !errors.As(err, &ee) || ee.Step != "c" || ee.Field != "if" || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want an EvalError containing %q", tc.cond, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.cond, got, err, tc.want)
		}
	}

	w := compile(t, b, "", "")
	if ok, err := w.Condition(ctx, "c", input(t, `{}`, `{}`, nil)); !ok || err != nil {
		t.Errorf("no if: %v %v", ok, err)
	}
	if has, _ := w.HasCondition("c"); has {
		t.Error("HasCondition without if")
	}
	if _, err := w.Condition(ctx, "c", []byte(`{`)); err != nil {
		t.Errorf("no if still decodes nothing: %v", err)
	}
	w = compile(t, b, "input.ok", "")
	if _, err := w.Condition(ctx, "c", []byte(`not json`)); err == nil || !strings.Contains(err.Error(), "decode the step input") {
		t.Errorf("bad input document: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	w = compile(t, b, "input.xs.all(x, input.xs.all(y, x + y >= 0.0))", "")
	if _, err := w.Condition(canceled, "c", input(t, `{"xs":`+numbers(500)+`}`, `{}`, nil)); err == nil {
		t.Error("a canceled context did not stop the evaluation")
	}
}

func numbers(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = "1"
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func TestItems(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cases := []struct {
		forEach, runInput string
		want              string // items joined by " "
		err               string
	}{
		{"steps.b.output.images", `{}`, `"x.png" "y.png"`, ""},
		{"[1, 2.5, 'a', null, {'k': [true]}]", `{}`, `1 2.5 "a" null {"k":[true]}`, ""},
		{"input.xs.map(x, x * 2.0)", `{"xs":[1,2]}`, `2 4`, ""},
		{"input.xs.filter(x, x > 1.0)", `{"xs":[1,2,3]}`, `2 3`, ""},
		{"input.xs", `{"xs":[]}`, ``, ""},
		{"input.xs", `{"xs":"nope"}`, "", "yielded a string, not a list"},
		{"input.missing", `{}`, "", "no such key: missing"},
		{"[1, int]", `{}`, "", "item 1: a type has no JSON form"},
		// Integers are written exactly, not as proto3's strings past 2^53.
		{"[9007199254740993, 18446744073709551615u, {'n': [int(input.k) * 1000000000]}]", `{"k":123456789}`, `9007199254740993 18446744073709551615 {"n":[123456789000000000]}`, ""},
		{"[{'b': 2, 'a': [1.5]}]", `{}`, `{"a":[1.5],"b":2}`, ""},
		{"[1, 1.0/0.0]", `{}`, "", "item 1: the number +Inf has no JSON form"},
		{"[[double('NaN')]]", `{}`, "", "item 0: the number NaN has no JSON form"},
		{"[{1: 2}]", `{}`, "", "item 0: a map has no JSON form"},
		{"input.xs", `{"xs":` + numbers(flow.MaxForEachItems) + `}`, "", ""},
		{"input.xs", `{"xs":` + numbers(flow.MaxForEachItems+1) + `}`, "", "yielded 10001 items; a step fans out to at most 10000"},
	}
	for _, tc := range cases {
		w := compile(t, b, "", tc.forEach)
		items, err := w.Items(ctx, "c", input(t, tc.runInput, `{"images":["x.png","y.png"]}`, nil))
		if tc.err != "" {
			var ee *EvalError
			if !errors.As(err, &ee) || ee.Field != "forEach" || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one containing %q", tc.forEach, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.forEach, err)
			continue
		}
		if len(items) > 100 {
			if len(items) != flow.MaxForEachItems {
				t.Errorf("%s: %d items", tc.forEach, len(items))
			}
			continue
		}
		parts := make([]string, len(items))
		for i, it := range items {
			parts[i] = string(it)
		}
		if got := strings.Join(parts, " "); got != tc.want {
			t.Errorf("%s: items %s, want %s", tc.forEach, got, tc.want)
		}
	}
}

// TestPerInstanceCondition: an `if` that uses item filters instances.
func TestPerInstanceCondition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := compile(t, b, "item.size > 10.0 && index != 2", "steps.b.output.files")
	if has, per := w.HasCondition("c"); !has || !per {
		t.Fatalf("HasCondition = %v, %v", has, per)
	}
	doc := input(t, `{}`, `{"files":[{"size":5},{"size":50},{"size":60}]}`, nil)
	items, err := w.Items(ctx, "c", doc)
	if err != nil {
		t.Fatal(err)
	}
	var kept []int
	for i, it := range items {
		ok, err := w.Condition(ctx, "c", input(t, `{}`, `{}`, &flow.Item{Value: it, Index: i}))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			kept = append(kept, i)
		}
	}
	if len(kept) != 1 || kept[0] != 1 {
		t.Fatalf("kept %v, want [1]", kept)
	}
	if _, per := compile(t, b, "steps.b.output.go", "input.xs").HasCondition("c"); per {
		t.Fatal("a condition without item is per instance")
	}
}

// defInput is def with c's `input` set.
func defInput(forEach, in string) *flow.Definition {
	d := def("", forEach)
	d.Steps[2].Input = in
	return d
}

// TestCompileInput: `input` compiles over the `if` variables, any type;
// its problems are named steps[i].input.
func TestCompileInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name, forEach, in string
		field, message    string // "" field: valid
	}{
		{"map", "", "{'sku': input.sku, 'n': steps.a.output.n}", "", ""},
		{"scalar", "", "steps.b.confidence", "", ""},
		{"item", "input.xs", "{'x': item, 'i': index, 'cfg': input.cfg}", "", ""},
		{"syntax", "", "{'a': ", "steps[2].input", `step "c": input: Syntax error`},
		{"not ancestor", "", "steps.d.output", "steps[2].input", `steps.d is not an ancestor of "c"`},
		{"whole steps", "", "steps", "steps[2].input", "steps may be used only as steps.<name>"},
		{"item without fan-out", "", "item", "steps[2].input", "item and index exist only in a fan-out step"},
		{"undeclared", "input.xs", "url", "steps[2].input", "undeclared reference to 'url'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, err := b.env.Compile(defInput(tc.forEach, tc.in))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("valid input refused: %v", err)
				}
				if !w.HasInput("c") || w.HasInput("b") {
					t.Fatal("HasInput")
				}
				return
			}
			var ve *flow.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v is not a *flow.ValidationError", err)
			}
			if len(ve.Errors) == 0 || ve.Errors[0].Field != tc.field || !strings.Contains(ve.Errors[0].Message, tc.message) {
				t.Fatalf("problems %+v, want field %q and message containing %q", ve.Errors, tc.field, tc.message)
			}
		})
	}
}

// TestInputValue: the value of `input` on the step's variables, decoded
// once and given each instance's item; failures are EvalErrors.
func TestInputValue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w, err := b.env.Compile(defInput("input.xs", "{'x': item.u, 'i': index, 'k': input.k, 'n': steps.a.output.n}"))
	if err != nil {
		t.Fatal(err)
	}
	vars, err := DecodeVars(input(t, `{"k":"<kept>","xs":[]}`, `{}`, nil))
	if err != nil {
		t.Fatal(err)
	}
	for i, item := range []string{`{"u":"a"}`, `{"u":"b"}`} {
		iv, err := vars.WithItem([]byte(item), i)
		if err != nil {
			t.Fatal(err)
		}
		got, err := w.Input(ctx, "run", "c", iv)
		if err != nil {
			t.Fatal(err)
		}
		want := map[int]string{0: `{"i":0,"k":"\u003ckept\u003e","n":1,"x":"a"}`, 1: `{"i":1,"k":"\u003ckept\u003e","n":1,"x":"b"}`}[i]
		if string(got) != want {
			t.Fatalf("instance %d: %s, want %s", i, got, want)
		}
	}
	iv, err := vars.WithItem([]byte(`{"v":1}`), 3)
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Input(ctx, "run", "c", iv)
	var ee *EvalError
	if !errors.As(err, &ee) || ee.Step != "c" || ee.Field != "input" || !strings.Contains(err.Error(), "no such key: u") {
		t.Fatalf("missing key: %v", err)
	}
	if _, err := vars.WithItem([]byte(`{`), 0); err == nil {
		t.Fatal("an item that is not JSON decoded")
	}
	w, err = b.env.Compile(defInput("", "[1, int]"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Input(ctx, "run", "c", vars); !errors.As(err, &ee) || !strings.Contains(err.Error(), "no JSON form") {
		t.Fatalf("a value with no JSON form: %v", err)
	}
	if _, err := w.Input(ctx, "run", "b", vars); err == nil {
		t.Fatal("a step without input evaluated")
	}
	// Numbers: integers exact, NaN and infinities refused (proto3's JSON
	// would write them as strings).
	w, err = b.env.Compile(defInput("", "{'big': 123456789 * 1000000000, 'neg': -9007199254740993, 'd': 0.5}"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := w.Input(ctx, "run", "c", vars); err != nil || string(got) != `{"big":123456789000000000,"d":0.5,"neg":-9007199254740993}` {
		t.Fatalf("integers: %s, %v", got, err)
	}
	w, err = b.env.Compile(defInput("", "{'x': -1.0/0.0}"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Input(ctx, "run", "c", vars); !errors.As(err, &ee) || !strings.Contains(err.Error(), "the number -Inf has no JSON form") {
		t.Fatalf("an infinity: %v", err)
	}
}
