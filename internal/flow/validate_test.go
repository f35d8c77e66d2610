package flow

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func loadExample(t *testing.T) *Definition {
	t.Helper()
	data, err := os.ReadFile("testdata/product-match.json")
	if err != nil {
		t.Fatal(err)
	}
	def, err := Decode(data)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return def
}

func TestDesignExampleIsValid(t *testing.T) {
	t.Parallel()
	def := loadExample(t)
	if err := Validate(def); err != nil {
		t.Fatalf("DESIGN §5 example: %v", err)
	}
	if def.Steps[3].Signal == nil || def.Steps[3].Signal.Timeout != "24h" || def.Steps[4].ForEach == "" {
		t.Fatalf("decoded %+v", def.Steps)
	}
}

// problems validates the JSON document and returns its field errors.
func problems(t *testing.T, doc string) []FieldError {
	t.Helper()
	def, err := Decode([]byte(doc))
	if err == nil {
		err = Validate(def)
	}
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %T %v is not a *ValidationError", err, err)
	}
	return ve.Errors
}

func TestValidationNamesFieldAndStep(t *testing.T) {
	t.Parallel()
	type want struct{ field, message string } // message: a substring
	cases := []struct {
		name string
		doc  string
		want []want
	}{
		{"unknown parent", `{"name":"w","steps":[{"name":"a","job":{"type":"t"}},{"name":"b","after":["a","nope"],"job":{"type":"t"}}]}`,
			[]want{{"steps[1].after[1]", `step "b": after names unknown step "nope"`}}},
		{"cycle", `{"name":"w","steps":[{"name":"a","after":["b"],"job":{"type":"t"}},{"name":"b","after":["a"],"job":{"type":"t"}}]}`,
			[]want{{"steps[1].after[0]", `step "b": after[0] makes a cycle: a → b → a`}}},
		{"long cycle", `{"name":"w","steps":[{"name":"a","after":["c"],"job":{"type":"t"}},{"name":"b","after":["a"],"job":{"type":"t"}},{"name":"c","after":["b"],"job":{"type":"t"}}]}`,
			[]want{{"steps[1].after[0]", `step "b": after[0] makes a cycle: a → b → c → a`}}},
		{"self", `{"name":"w","steps":[{"name":"a","after":["a"],"job":{"type":"t"}}]}`,
			[]want{{"steps[0].after[0]", "cycle: a → a"}}},
		{"duplicate name", `{"name":"w","steps":[{"name":"a","job":{"type":"t"}},{"name":"a","signal":{}}]}`,
			[]want{{"steps[1].name", `step "a": duplicate name (also steps[0])`}}},
		{"duplicate parent", `{"name":"w","steps":[{"name":"a","job":{"type":"t"}},{"name":"b","after":["a","a"],"job":{"type":"t"}}]}`,
			[]want{{"steps[1].after[1]", `lists "a" twice`}}},
		{"no kind", `{"name":"w","steps":[{"name":"a"}]}`,
			[]want{{"steps[0]", `step "a": needs exactly one of job, signal, human (it has none)`}}},
		{"two kinds", `{"name":"w","steps":[{"name":"a","job":{"type":"t"},"human":{"task":"x"}}]}`,
			[]want{{"steps[0]", "(it has job and human)"}}},
		{"bad step name", `{"name":"w","steps":[{"name":"Fetch","job":{"type":"t"}}]}`,
			[]want{{"steps[0].name", "step 0: name must start with a lowercase letter"}}},
		{"reserved step name", `{"name":"w","steps":[{"name":"in","job":{"type":"t"}}]}`,
			[]want{{"steps[0].name", "reserved word"}}},
		{"hyphen step name", `{"name":"w","steps":[{"name":"a-b","job":{"type":"t"}}]}`,
			[]want{{"steps[0].name", `invalid character '-'`}}},
		{"long step name", `{"name":"w","steps":[{"name":"` + strings.Repeat("a", MaxNameLen+1) + `","job":{"type":"t"}}]}`,
			[]want{{"steps[0].name", "at most 64 bytes"}}},
		{"workflow name", `{"name":"a/b","steps":[{"name":"a","job":{"type":"t"}}]}`,
			[]want{{"name", `invalid character '/'`}}},
		{"no steps", `{"name":"w","steps":[]}`, []want{{"steps", "at least one step"}}},
		{"job fields", `{"name":"w","steps":[{"name":"a","job":{"type":"","queue":"q q","priority":10,"maxAttempts":1001,"timeout":"soon"}}]}`,
			[]want{
				{"steps[0].job.type", `step "a": job type is required`},
				{"steps[0].job.queue", "invalid character ' '"},
				{"steps[0].job.priority", "between 0 and 9"},
				{"steps[0].job.maxAttempts", "between 1 and 1000"},
				{"steps[0].job.timeout", `"soon" is not a duration`},
			}},
		// A job's timeout is kept to the millisecond: under one it read as
		// none (the worker's 5 minutes).
		{"job timeout under a millisecond", `{"name":"w","steps":[{"name":"a","job":{"type":"t","timeout":"500us"}}]}`,
			[]want{{"steps[0].job.timeout", `step "a": timeout must be at least 1ms`}}},
		{"signal timeout", `{"name":"w","steps":[{"name":"a","signal":{"timeout":"-1s"}}]}`,
			[]want{{"steps[0].signal.timeout", "positive"}}},
		{"human fields", `{"name":"w","steps":[{"name":"a","human":{"task":"","overrides":[1]}}]}`,
			[]want{{"steps[0].human.task", "task name is required"}, {"steps[0].human.overrides", "JSON object"}}},
		{"human overrides", `{"name":"w","steps":[{"name":"a","human":{"task":"t","overrides":{"judgmentsPerUnit":0}}},{"name":"b","human":{"task":"t","overrides":{"color":"red"}}},{"name":"c","human":{"task":"t","overrides":{"judgmentsPerUnit":{"min":5},"priority":3,"skills":["en"]}}}]}`,
			[]want{{"steps[0].human.overrides", "judgmentsPerUnit must be 1 to 100"}, {"steps[1].human.overrides", `unknown field "color"`}}},
		{"human overrides past the bounds", `{"name":"w","steps":[{"name":"a","human":{"task":"t","overrides":{"assignmentSeconds":3000000000}}},{"name":"b","human":{"task":"t","overrides":{"judgmentsPerUnit":101}}},{"name":"c","human":{"task":"t","overrides":{"assignmentSeconds":5}}}]}`,
			[]want{{"steps[0].human.overrides", "assignmentSeconds must be 30 to 86400"}, {"steps[1].human.overrides", "judgmentsPerUnit must be 1 to 100"}, {"steps[2].human.overrides", "assignmentSeconds must be 30 to 86400"}}},
		// A skill or channel a pool cannot store failed every run at the
		// step ("create pool: invalid parameters"); one a template cannot
		// hold matched no contributor.
		{"human overrides skills and channels", `{"name":"w","steps":[{"name":"a","human":{"task":"t","overrides":{"skills":["","e n","en","en"],"channels":["` + strings.Repeat("c", 65) + `"]}}},{"name":"b","human":{"task":"t","overrides":{"channels":["fr","FR:ca"]}}}]}`,
			[]want{{"steps[0].human.overrides", `skills[0]: is required; skills[1]: has invalid character ' ' (allowed: ASCII letters, digits, . _ - :); skills[3]: duplicate "en" (also skills[2]); channels[0]: must be at most 64 bytes`}}},
		{"enums", `{"name":"w","steps":[{"name":"a","job":{"type":"t"},"trigger":"any","onFailure":"ignore"}]}`,
			[]want{{"steps[0].trigger", `not "any"`}, {"steps[0].onFailure", `not "ignore"`}}},
		{"signal fan-out", `{"name":"w","steps":[{"name":"a","signal":{},"forEach":"[1]"}]}`,
			[]want{{"steps[0].forEach", "cannot fan out"}}},
		{"blank if", `{"name":"w","steps":[{"name":"a","job":{"type":"t"},"if":"  "}]}`,
			[]want{{"steps[0].if", "blank"}}},
		{"signal input", `{"name":"w","steps":[{"name":"a","signal":{},"input":"input.x"}]}`,
			[]want{{"steps[0].input", `step "a": a signal step has no input`}}},
		{"long input", `{"name":"w","steps":[{"name":"a","job":{"type":"t"},"input":"` + strings.Repeat("1", MaxExprLen+1) + `"}]}`,
			[]want{{"steps[0].input", `step "a": input is longer than 4096 bytes`}}},
		{"blank input", `{"name":"w","steps":[{"name":"a","human":{"task":"t"},"input":" "}]}`,
			[]want{{"steps[0].input", "blank"}}},
		{"wrong JSON type", `{"name":"w","steps":[{"name":"a","after":"b","job":{"type":"t"}}]}`,
			[]want{{"steps.after", "must be an array, not a JSON string"}}},
		{"unknown field", `{"name":"w","steps":[{"name":"a","jobs":{}}]}`,
			[]want{{"", `unknown field "jobs"`}}},
		{"trailing data", `{"name":"w","steps":[]} {}`, []want{{"", "data after"}}},
		{"not JSON", `{"name":`, []want{{"", "ends too early"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := problems(t, tc.doc)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				if got[i].Field != w.field || !strings.Contains(got[i].Message, w.message) {
					t.Errorf("problem %d = %+v, want field %q and message containing %q", i, got[i], w.field, w.message)
				}
			}
		})
	}
}

// TestValidationListsEveryProblem: one error value carries all of them, in
// document order, and is capped.
func TestValidationListsEveryProblem(t *testing.T) {
	t.Parallel()
	got := problems(t, `{"name":"","steps":[
		{"name":"a","after":["x"]},
		{"name":"a","job":{"type":"t"},"trigger":"sometimes"}]}`)
	fields := make([]string, len(got))
	for i, fe := range got {
		fields[i] = fe.Field
	}
	want := "name steps[1].name steps[0] steps[0].after[0] steps[1].trigger"
	if strings.Join(fields, " ") != want {
		t.Fatalf("fields %v, want %s", fields, want)
	}

	var b strings.Builder
	b.WriteString(`{"name":"w","steps":[`)
	for i := range 150 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"name":"s","job":{"type":"t"}}`)
	}
	b.WriteString("]}")
	got = problems(t, b.String())
	if len(got) != MaxProblems+1 || got[MaxProblems].Message != "and 49 more problems" {
		t.Fatalf("%d problems, last %+v", len(got), got[len(got)-1])
	}
}
