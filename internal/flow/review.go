package flow

import (
	"fmt"
	"slices"
)

// Review steps: a human step with `review` set reviews the answer of
// another human step (docs/workflows.md, "Review steps").

// The verdicts of a review, the values of its task's verdict field.
const (
	// VerdictField is the choice field of a review task that holds the
	// verdict.
	VerdictField = "verdict"
	// VerdictApprove: the reviewed answer stands.
	VerdictApprove = "approve"
	// VerdictCorrect: the reviewer's answer (the review's other fields,
	// over the reviewed answer) becomes the reviewed step's output.
	VerdictCorrect = "correct"
	// VerdictReject: the reviewed unit is redone by other contributors;
	// their answer becomes the reviewed step's output.
	VerdictReject = "reject"
)

// Verdicts lists the verdicts a review task may offer.
var Verdicts = []string{VerdictApprove, VerdictCorrect, VerdictReject}

// ReviewOf returns the step that step name reviews, "" when it is not a
// review step.
func (g *Graph) ReviewOf(name string) string {
	s := g.step[name]
	if s == nil || s.Human == nil {
		return ""
	}
	return s.Human.Review
}

// ReviewedBy returns the review step of step name, "" when none reviews
// it (a valid definition has at most one).
func (g *Graph) ReviewedBy(name string) string {
	for _, n := range g.order {
		if g.ReviewOf(n) == name {
			return n
		}
	}
	return ""
}

// validateReviews checks the `review` of every human step: it names
// another human step of the definition, an ancestor (reachable through
// after), that is neither a review step nor a fan-out step, and that no
// other step reviews; a review step does not fan out itself. The
// ancestor check needs the after edges to be sound (acyclic).
func validateReviews(p *Problems, def *Definition, index map[string]int, acyclic bool) {
	reviewer := map[string]string{} // reviewed → its first reviewer
	for i := range def.Steps {
		s := &def.Steps[i]
		if s.Human == nil || s.Human.Review == "" {
			continue
		}
		f := fmt.Sprintf("steps[%d].human.review", i)
		who := label(s, i)
		name := s.Human.Review
		if s.ForEach != "" {
			p.Add(f, "%s: a review step cannot fan out (forEach): it reviews one answer", who)
		}
		if name == s.Name {
			p.Add(f, "%s: a step cannot review itself", who)
			continue
		}
		k, ok := index[name]
		if !ok {
			p.Add(f, "%s: review names unknown step %q", who, name)
			continue
		}
		r := &def.Steps[k]
		switch {
		case r.Human == nil:
			p.Add(f, "%s: review names step %q, which is not a human step (only a human step's answer can be reviewed)", who, name)
			continue
		case r.Human.Review != "":
			p.Add(f, "%s: review names step %q, which is a review step itself", who, name)
		case r.ForEach != "":
			p.Add(f, "%s: review names step %q, which fans out (forEach): a review takes one answer", who, name)
		}
		if first, dup := reviewer[name]; dup {
			p.Add(f, "%s: step %q is reviewed by step %q already (one review step per step)", who, name, first)
		} else {
			reviewer[name] = s.Name
		}
		if acyclic && !reaches(def, index, i, name) {
			p.Add(f, "%s: review names step %q, which is not an ancestor of %q (add it to after)", who, name, s.Name)
		}
	}
}

// reaches reports whether step name is an ancestor of steps[i] through
// the after edges (unknown parents are skipped).
func reaches(def *Definition, index map[string]int, i int, name string) bool {
	seen := map[int]bool{i: true}
	todo := []int{i}
	for len(todo) > 0 {
		n := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for _, parent := range def.Steps[n].After {
			if parent == name {
				return true
			}
			k, ok := index[parent]
			if ok && !seen[k] && !slices.Contains(todo, k) {
				seen[k] = true
				todo = append(todo, k)
			}
		}
	}
	return false
}
