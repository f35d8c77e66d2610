package flow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// FieldError is one problem of a definition: Field is a path into its JSON
// form ("name", "steps[2].after[0]", "steps[1].job.type"; empty for the
// document as a whole) and Message says what is wrong, naming the step.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError lists every problem found in a definition, in document
// order (structural problems before expression problems). The HTTP layer
// answers it as problem+json with one `errors` entry per FieldError.
type ValidationError struct {
	Errors []FieldError
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("invalid workflow definition: ")
	for i, fe := range e.Errors {
		if i > 0 {
			b.WriteString("; ")
		}
		if fe.Field != "" {
			b.WriteString(fe.Field + ": ")
		}
		b.WriteString(fe.Message)
	}
	return b.String()
}

func invalid(field, message string) *ValidationError {
	return &ValidationError{Errors: []FieldError{{Field: field, Message: message}}}
}

// MaxProblems caps the problems one ValidationError lists; the last entry
// then says how many more there were.
const MaxProblems = 100

// Problems collects field errors; the CEL validation of flow/expr adds its
// own to the structural ones through it.
type Problems struct {
	list    []FieldError
	dropped int
}

// Add records one problem.
func (p *Problems) Add(field, format string, args ...any) {
	if len(p.list) >= MaxProblems {
		p.dropped++
		return
	}
	p.list = append(p.list, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Len is the number of problems recorded.
func (p *Problems) Len() int { return len(p.list) + p.dropped }

// Err returns a *ValidationError of the problems, or nil when there are none.
func (p *Problems) Err() error {
	if p.Len() == 0 {
		return nil
	}
	list := slices.Clone(p.list)
	if p.dropped > 0 {
		list = append(list, FieldError{Message: fmt.Sprintf("and %d more problems", p.dropped)})
	}
	return &ValidationError{Errors: list}
}

// reservedWords cannot be step names: CEL could not select them
// (`steps.in` does not parse).
var reservedWords = []string{
	"as", "break", "const", "continue", "else", "false", "for", "function",
	"if", "import", "in", "let", "loop", "namespace", "null", "package",
	"return", "true", "var", "void", "while",
}

// CheckStepName checks a step name: 1..MaxNameLen bytes, a lowercase letter
// then lowercase letters, digits and underscores, not a CEL reserved word.
// Such a name is a CEL identifier, so expressions write `steps.<name>`.
// It returns "" when the name is valid, and otherwise what is wrong.
func CheckStepName(name string) string {
	switch {
	case name == "":
		return "is required"
	case len(name) > MaxNameLen:
		return fmt.Sprintf("must be at most %d bytes", MaxNameLen)
	case name[0] < 'a' || name[0] > 'z':
		return "must start with a lowercase letter (a-z)"
	case slices.Contains(reservedWords, name):
		return fmt.Sprintf("%q is a reserved word of CEL", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Sprintf("has invalid character %q (allowed: a-z, 0-9, _)", r)
		}
	}
	return ""
}

// CheckWorkflowName checks a workflow or task name: 1..MaxWorkflowNameLen
// bytes of letters, digits, '.', '_' and '-', starting with a letter or
// digit, so that it is one segment of a URL path.
func CheckWorkflowName(name string) string {
	if name != "" && strings.ContainsRune("._-", rune(name[0])) {
		return "must start with a letter or digit"
	}
	return checkToken(name, "._-")
}

// checkJobName checks a job type or queue name as docket.CheckName does:
// letters, digits and . _ - : /
func checkJobName(name string) string { return checkToken(name, "._-:/") }

func checkToken(name, punct string) string {
	if name == "" {
		return "is required"
	}
	if len(name) > MaxWorkflowNameLen {
		return fmt.Sprintf("must be at most %d bytes", MaxWorkflowNameLen)
	}
	for _, r := range name {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && !strings.ContainsRune(punct, r) {
			return fmt.Sprintf("has invalid character %q (allowed: ASCII letters, digits, %s)",
				r, strings.Join(strings.Split(punct, ""), " "))
		}
	}
	return ""
}

// Validate checks the structure of def: names, kinds, fields, limits,
// parents and cycles. It returns nil or a *ValidationError listing every
// problem. Expressions are only checked for size here; flow/expr compiles
// them.
func Validate(def *Definition) error {
	var p Problems
	ValidateInto(&p, def)
	return p.Err()
}

// ValidateInto records the structural problems of def in p.
func ValidateInto(p *Problems, def *Definition) {
	if def == nil {
		p.Add("", "the definition is required")
		return
	}
	if msg := CheckWorkflowName(def.Name); msg != "" {
		p.Add("name", "workflow name %s", msg)
	}
	switch {
	case len(def.Steps) == 0:
		p.Add("steps", "a workflow needs at least one step")
		return
	case len(def.Steps) > MaxSteps:
		p.Add("steps", "a workflow has at most %d steps, this one has %d", MaxSteps, len(def.Steps))
		return
	}
	index := map[string]int{} // first step of each name
	for i := range def.Steps {
		s := &def.Steps[i]
		f := fmt.Sprintf("steps[%d]", i)
		if msg := CheckStepName(s.Name); msg != "" {
			p.Add(f+".name", "step %d: name %s", i, msg)
		} else if first, dup := index[s.Name]; dup {
			p.Add(f+".name", "step %q: duplicate name (also steps[%d])", s.Name, first)
		} else {
			index[s.Name] = i
		}
	}
	for i := range def.Steps {
		validateStep(p, def, i, index)
	}
	cycles := findCycles(def, index)
	for _, c := range cycles {
		p.Add(fmt.Sprintf("steps[%d].after[%d]", c.step, c.after), "step %q: after[%d] makes a cycle: %s",
			def.Steps[c.step].Name, c.after, strings.Join(c.path, " → "))
	}
	validateReviews(p, def, index, len(cycles) == 0)
}

// label names step i in messages.
func label(s *Step, i int) string {
	if CheckStepName(s.Name) == "" {
		return fmt.Sprintf("step %q", s.Name)
	}
	return fmt.Sprintf("step %d", i)
}

func validateStep(p *Problems, def *Definition, i int, index map[string]int) {
	s := &def.Steps[i]
	f := fmt.Sprintf("steps[%d]", i)
	who := label(s, i)
	var kinds []string
	if s.Job != nil {
		kinds = append(kinds, "job")
		validateJob(p, f+".job", who, s.Job)
	}
	if s.Signal != nil {
		kinds = append(kinds, "signal")
		checkTimeout(p, f+".signal.timeout", who, s.Signal.Timeout)
	}
	if s.Human != nil {
		kinds = append(kinds, "human")
		if msg := CheckWorkflowName(s.Human.Task); msg != "" {
			p.Add(f+".human.task", "%s: task name %s", who, msg)
		}
		if o := bytes.TrimSpace(s.Human.Overrides); len(o) > 0 && !bytes.Equal(o, []byte("null")) && (o[0] != '{' || !json.Valid(o)) {
			p.Add(f+".human.overrides", "%s: overrides must be a JSON object", who)
		} else if _, err := ParseOverrides(o); err != nil {
			p.Add(f+".human.overrides", "%s: %v", who, err)
		}
	}
	switch len(kinds) {
	case 0:
		p.Add(f, "%s: needs exactly one of job, signal, human (it has none)", who)
	case 1:
	default:
		p.Add(f, "%s: needs exactly one of job, signal, human (it has %s)", who, strings.Join(kinds, " and "))
	}
	seen := map[string]int{}
	for j, parent := range s.After {
		af := fmt.Sprintf("%s.after[%d]", f, j)
		if k, dup := seen[parent]; dup {
			p.Add(af, "%s: after lists %q twice (also after[%d])", who, parent, k)
			continue
		}
		seen[parent] = j
		if _, ok := index[parent]; !ok {
			p.Add(af, "%s: after names unknown step %q", who, parent)
		}
	}
	checkExpr(p, f+".if", who, "if", s.If)
	checkExpr(p, f+".forEach", who, "forEach", s.ForEach)
	if s.ForEach != "" && s.Signal != nil {
		p.Add(f+".forEach", "%s: a signal step cannot fan out (a signal is sent to one step instance)", who)
	}
	checkExpr(p, f+".input", who, "input", s.Input)
	if s.Input != "" && s.Signal != nil {
		p.Add(f+".input", "%s: a signal step has no input (only job and human steps carry one)", who)
	}
	if s.Trigger != "" && s.Trigger != TriggerAllSuccess && s.Trigger != TriggerAllDone {
		p.Add(f+".trigger", "%s: trigger must be %q or %q, not %q", who, TriggerAllSuccess, TriggerAllDone, s.Trigger)
	}
	if s.OnFailure != "" && s.OnFailure != OnFailureFail && s.OnFailure != OnFailureContinue {
		p.Add(f+".onFailure", "%s: onFailure must be %q or %q, not %q", who, OnFailureFail, OnFailureContinue, s.OnFailure)
	}
}

func validateJob(p *Problems, f, who string, j *JobStep) {
	if msg := checkJobName(j.Type); msg != "" {
		p.Add(f+".type", "%s: job type %s", who, msg)
	}
	if j.Queue != "" {
		if msg := checkJobName(j.Queue); msg != "" {
			p.Add(f+".queue", "%s: queue %s", who, msg)
		}
	}
	if j.Priority != nil && (*j.Priority < 0 || *j.Priority > 9) {
		p.Add(f+".priority", "%s: priority must be between 0 and 9", who)
	}
	if j.MaxAttempts < 0 || j.MaxAttempts > 1000 {
		p.Add(f+".maxAttempts", "%s: maxAttempts must be between 1 and 1000 (0 or absent: the default)", who)
	}
	checkTimeout(p, f+".timeout", who, j.Timeout)
	// The job keeps its timeout to the millisecond: under one it would
	// read as none (the worker's).
	if v, err := j.Timeout.Parse(); err == nil && v > 0 && v < time.Millisecond {
		p.Add(f+".timeout", "%s: timeout must be at least 1ms", who)
	}
}

func checkTimeout(p *Problems, f, who string, d Duration) {
	v, err := d.Parse()
	switch {
	case err != nil:
		p.Add(f, "%s: timeout %q is not a duration like \"30s\" or \"24h\"", who, string(d))
	case v < 0:
		p.Add(f, "%s: timeout must be positive", who)
	case d != "" && v == 0:
		p.Add(f, "%s: timeout must be positive (omit it for none)", who)
	}
}

func checkExpr(p *Problems, f, who, what, src string) {
	switch {
	case len(src) > MaxExprLen:
		p.Add(f, "%s: %s is longer than %d bytes", who, what, MaxExprLen)
	case src != "" && strings.TrimSpace(src) == "":
		p.Add(f, "%s: %s is blank (omit it instead)", who, what)
	case !utf8.ValidString(src):
		p.Add(f, "%s: %s is not valid UTF-8", who, what)
	}
}

type cycle struct {
	step, after int      // steps[step].after[after] closes the cycle
	path        []string // a → b → … → a, parents before children
}

// findCycles reports one cycle per back edge of a depth-first walk along
// `after` edges, visiting steps in document order. Unknown parents are
// ignored (reported elsewhere).
func findCycles(def *Definition, index map[string]int) []cycle {
	const (
		unvisited = iota
		onStack
		done
	)
	color := make([]int, len(def.Steps))
	var stack []int
	var out []cycle
	var visit func(i int)
	visit = func(i int) {
		color[i] = onStack
		stack = append(stack, i)
		seen := map[string]bool{}
		for j, parent := range def.Steps[i].After {
			k, ok := index[parent]
			if !ok || seen[parent] {
				continue // unknown or repeated: reported by validateStep
			}
			seen[parent] = true
			switch color[k] {
			case unvisited:
				visit(k)
			case onStack:
				// stack[at:] = k, child of k, …, i; and k is a parent of i.
				at := slices.Index(stack, k)
				path := []string{parent}
				for s := len(stack) - 1; s >= at; s-- {
					path = append(path, def.Steps[stack[s]].Name)
				}
				out = append(out, cycle{step: i, after: j, path: path})
			}
		}
		stack = stack[:len(stack)-1]
		color[i] = done
	}
	for i := range def.Steps {
		if color[i] == unvisited && index[def.Steps[i].Name] == i {
			visit(i)
		}
	}
	return out
}
