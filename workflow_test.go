package docket_test

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docket-run/docket"
)

// designExample is the definition of DESIGN §5, as the API receives it.
const designExample = `{"name": "product-match",
 "steps": [
  {"name": "fetch",   "job":   {"type": "fetch-pair"}},
  {"name": "label",   "after": ["fetch"], "human": {"task": "same-product"}},
  {"name": "review",  "after": ["label"], "if": "steps.label.confidence < 0.8",
                      "human": {"task": "qa-review"}},
  {"name": "approve", "after": ["fetch"], "signal": {"timeout": "24h"}},
  {"name": "thumbs",  "after": ["fetch"], "forEach": "steps.fetch.output.images",
                      "job":   {"type": "thumbnail"}},
  {"name": "publish", "after": ["label", "review", "approve", "thumbs"],
                      "job":   {"type": "publish"}}]}`

func buildDesignExample() *docket.WorkflowBuilder {
	return docket.NewWorkflow("product-match").
		Job("fetch", "fetch-pair").
		Human("label", "same-product", docket.After("fetch")).
		Human("review", "qa-review", docket.After("label"), docket.If("steps.label.confidence < 0.8")).
		Signal("approve", docket.After("fetch"), docket.StepTimeout(24*time.Hour)).
		Job("thumbs", "thumbnail", docket.After("fetch"), docket.ForEach("steps.fetch.output.images")).
		Job("publish", "publish", docket.After("label", "review", "approve", "thumbs"))
}

func TestWorkflowBuilderMatchesJSON(t *testing.T) {
	t.Parallel()
	fromJSON, err := docket.DecodeWorkflow([]byte(designExample))
	if err != nil {
		t.Fatal(err)
	}
	built, err := buildDesignExample().Definition()
	if err != nil {
		t.Fatal(err)
	}
	h1, err := docket.WorkflowHash(fromJSON)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := docket.WorkflowHash(built)
	if err != nil {
		t.Fatal(err)
	}
	if h1 != h2 {
		t.Fatalf("JSON form %s, builder %s", h1, h2)
	}
	// A different step order and a spelled-out default are the same version;
	// one more attempt is not.
	reordered, err := docket.NewWorkflow("product-match").
		Job("publish", "publish", docket.After("thumbs", "approve", "review", "label")).
		Job("thumbs", "thumbnail", docket.After("fetch"), docket.ForEach("steps.fetch.output.images")).
		Signal("approve", docket.After("fetch"), docket.StepTimeout(1440*time.Minute)).
		Human("review", "qa-review", docket.After("label"), docket.If("steps.label.confidence < 0.8")).
		Human("label", "same-product", docket.After("fetch")).
		Job("fetch", "fetch-pair", docket.StepQueue("fetch-pair")).
		Definition()
	if err != nil {
		t.Fatal(err)
	}
	if h3, _ := docket.WorkflowHash(reordered); h3 != h1 {
		t.Fatalf("reordered builder hash %s, want %s", h3, h1)
	}
	changed, err := buildDesignExample().Job("extra", "t", docket.StepMaxAttempts(3)).Definition()
	if err != nil {
		t.Fatal(err)
	}
	if h4, _ := docket.WorkflowHash(changed); h4 == h1 {
		t.Fatal("a changed definition has the same hash")
	}
}

func TestWorkflowBuilderProblems(t *testing.T) {
	t.Parallel()
	_, err := docket.NewWorkflow("w").
		Signal("wait", docket.StepQueue("q")).
		Job("a", "t", docket.After("b"), docket.StepTimeout(-time.Second)).
		Job("b", "t", docket.After("a")).
		Human("h", "task", docket.StepPriority(3)).
		Definition()
	var ve *docket.WorkflowValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %T %v", err, err)
	}
	var got []string
	for _, fe := range ve.Errors {
		got = append(got, fe.Field+": "+fe.Message)
	}
	want := []string{
		`steps[0]: step "wait": StepQueue applies to job steps only`,
		`steps[1]: step "a": StepTimeout must be positive, not -1s`,
		`steps[3]: step "h": StepPriority applies to job steps only`,
		`steps[1].job.timeout: step "a": timeout must be positive`,
		`steps[2].after[0]: step "b": after[0] makes a cycle: a → b → a`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := docket.DecodeWorkflow([]byte(`{"name":"w","steps":[{"name":"a","after":["x"],"job":{"type":"t"}}]}`)); !errors.As(err, &ve) ||
		ve.Errors[0].Field != "steps[0].after[0]" {
		t.Fatalf("DecodeWorkflow: %v", err)
	}
}

// TestWorkflowBuilderStepInput: StepInput is the JSON form's "input";
// on a signal step it is a problem.
func TestWorkflowBuilderStepInput(t *testing.T) {
	t.Parallel()
	fromJSON, err := docket.DecodeWorkflow([]byte(`{"name":"w","steps":[
		{"name":"each","forEach":"input.urls","input":"{'url': item}","job":{"type":"fetch"}},
		{"name":"label","input":"input.pair","human":{"task":"same"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	built, err := docket.NewWorkflow("w").
		Job("each", "fetch", docket.ForEach("input.urls"), docket.StepInput("{'url': item}")).
		Human("label", "same", docket.StepInput("input.pair")).
		Definition()
	if err != nil {
		t.Fatal(err)
	}
	if h1, h2 := mustWorkflowHash(t, fromJSON), mustWorkflowHash(t, built); h1 != h2 {
		t.Fatalf("JSON form %s, builder %s", h1, h2)
	}
	if err := docket.ValidateWorkflow(built); err != nil {
		t.Fatal(err)
	}
	_, err = docket.NewWorkflow("w").Signal("wait", docket.StepInput("input")).Definition()
	var ve *docket.WorkflowValidationError
	if !errors.As(err, &ve) || ve.Errors[0].Field != "steps[0]" || !strings.Contains(ve.Errors[0].Message, "StepInput applies to job and human steps only") {
		t.Fatalf("StepInput on a signal step: %v", err)
	}
	_, err = docket.NewWorkflow("w").Job("a", "t", docket.StepInput("item")).Definition()
	if err != nil {
		t.Fatalf("the structure is valid (the expression is checked when stored): %v", err)
	}
	if err := docket.ValidateWorkflow(mustDefinition(t, docket.NewWorkflow("w").Job("a", "t", docket.StepInput("item")))); !errors.As(err, &ve) ||
		ve.Errors[0].Field != "steps[0].input" || !strings.Contains(ve.Errors[0].Message, "item and index exist only in a fan-out step") {
		t.Fatalf("item outside a fan-out: %v", err)
	}
}

func mustWorkflowHash(t *testing.T, def *docket.WorkflowDefinition) string {
	t.Helper()
	h, err := docket.WorkflowHash(def)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestWorkflowBuilderNilOption: a nil StepOption (an option chosen by a
// condition that chose none) is no option, not a panic.
func TestWorkflowBuilderNilOption(t *testing.T) {
	t.Parallel()
	var none docket.StepOption
	def, err := docket.NewWorkflow("w").Job("a", "t", none, docket.StepMaxAttempts(3)).Signal("b", none).Definition()
	if err != nil {
		t.Fatal(err)
	}
	if def.Steps[0].Job.MaxAttempts != 3 || def.Steps[1].Signal == nil {
		t.Fatalf("steps %+v", def.Steps)
	}
}

// TestWhereCELEnters: the public package links CEL, because every process
// that completes jobs advances workflow runs and evaluates their `if` and
// `forEach` (docs/dependencies.md). It enters through one door: of the
// module's packages, only internal/flow/expr imports cel.dev, and the root
// reaches it only through internal/workflow.
func TestWhereCELEnters(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not found to list the dependencies: %v", err)
	}
	const module = "github.com/docket-run/docket"
	out, err := exec.Command(goBin, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	importers := map[string][]string{} // package → the module's packages importing it
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], module) {
			continue
		}
		for _, imp := range fields[1:] {
			importers[imp] = append(importers[imp], fields[0])
		}
	}
	var celUsers []string
	for imp, by := range importers {
		if strings.HasPrefix(imp, "cel.dev/") {
			celUsers = append(celUsers, by...)
		}
	}
	slices.Sort(celUsers)
	celUsers = slices.Compact(celUsers)
	if want := []string{module + "/internal/flow/expr"}; !slices.Equal(celUsers, want) {
		t.Errorf("packages of the module importing cel.dev: %v, want %v", celUsers, want)
	}
	if by := importers[module+"/internal/flow/expr"]; !slices.Equal(by, []string{module + "/internal/workflow"}) {
		t.Errorf("internal/flow/expr is imported by %v, want internal/workflow only", by)
	}
	if !contains(importers[module+"/internal/workflow"], module) {
		t.Errorf("the root does not import internal/workflow: the check would see nothing")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
