package task

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// FieldError is one problem: Field is a path into the JSON document
// ("fields[2].options[0].value", "boxes[1].w"; empty for the document as a
// whole) and Message says what is wrong.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError lists every problem of a template or a judgment. The HTTP
// layer answers it as problem+json with one `errors` entry per FieldError.
type ValidationError struct {
	// Subject is what was invalid: "task template", "judgment" or
	// "golden answer".
	Subject string
	Errors  []FieldError
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("invalid " + e.Subject + ": ")
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

// MaxProblems caps the problems one ValidationError lists; the last entry
// then says how many more there were.
const MaxProblems = 100

// problems collects field errors.
type problems struct {
	list    []FieldError
	dropped int
	// stored: the template is a version stored earlier, checked again as
	// it is loaded; a rule only new versions are held to is not applied
	// (CompileStored).
	stored bool
}

func (p *problems) add(field, format string, args ...any) {
	if len(p.list) >= MaxProblems {
		p.dropped++
		return
	}
	p.list = append(p.list, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (p *problems) len() int { return len(p.list) + p.dropped }

// names reports whether a problem names path, a path inside it or a path
// it is inside of (the document as a whole only by equality).
func (p *problems) names(path string) bool {
	for _, fe := range p.list {
		if fe.Field == path || within(path, fe.Field) || within(fe.Field, path) {
			return true
		}
	}
	return false
}

// has reports whether a problem names path or a path inside it.
func (p *problems) has(path string) bool {
	for _, fe := range p.list {
		if fe.Field == path || within(fe.Field, path) {
			return true
		}
	}
	return false
}

// within reports whether path is inside outer ("a.b[1]" is inside "a" and
// "a.b").
func within(path, outer string) bool {
	return outer != "" && len(path) > len(outer) && strings.HasPrefix(path, outer) &&
		(path[len(outer)] == '.' || path[len(outer)] == '[')
}

// sortBy orders the problems by rank (stable within a rank).
func (p *problems) sortBy(rank func(FieldError) [2]int) {
	slices.SortStableFunc(p.list, func(a, b FieldError) int {
		ra, rb := rank(a), rank(b)
		return cmp.Or(cmp.Compare(ra[0], rb[0]), cmp.Compare(ra[1], rb[1]))
	})
}

func (p *problems) err(subject string) error {
	if p.len() == 0 {
		return nil
	}
	list := slices.Clone(p.list)
	if p.dropped > 0 {
		list = append(list, FieldError{Message: fmt.Sprintf("and %d more problems", p.dropped)})
	}
	return &ValidationError{Subject: subject, Errors: list}
}

const (
	subjectTemplate = "task template"
	subjectJudgment = "judgment"
	subjectAnswer   = "golden answer"
)
