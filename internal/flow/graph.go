package flow

import (
	"fmt"
	"slices"
)

// Graph answers questions about the DAG of a valid definition. Every list
// it returns is in topological order (parents before children, ties broken
// by name), so the order does not depend on the order of the steps array.
type Graph struct {
	def      *Definition
	order    []string       // topological
	rank     map[string]int // position in order
	step     map[string]*Step
	children map[string][]string
}

// NewGraph validates def structurally and indexes its DAG. The error is the
// *ValidationError of Validate.
func NewGraph(def *Definition) (*Graph, error) {
	if err := Validate(def); err != nil {
		return nil, err
	}
	g := &Graph{
		def:      def,
		rank:     make(map[string]int, len(def.Steps)),
		step:     make(map[string]*Step, len(def.Steps)),
		children: make(map[string][]string, len(def.Steps)),
	}
	waiting := make(map[string]int, len(def.Steps)) // parents not yet ordered
	for i := range def.Steps {
		s := &def.Steps[i]
		g.step[s.Name] = s
		waiting[s.Name] = len(s.After)
		for _, p := range s.After {
			g.children[p] = append(g.children[p], s.Name)
		}
	}
	var ready []string
	for name, n := range waiting {
		if n == 0 {
			ready = append(ready, name)
		}
	}
	for len(ready) > 0 {
		slices.Sort(ready)
		name := ready[0]
		ready = ready[1:]
		g.rank[name] = len(g.order)
		g.order = append(g.order, name)
		for _, c := range g.children[name] {
			if waiting[c]--; waiting[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	if len(g.order) != len(def.Steps) { // Validate refuses cycles
		return nil, fmt.Errorf("workflow %q: graph has a cycle", def.Name)
	}
	for name := range g.children {
		g.sort(g.children[name])
	}
	return g, nil
}

func (g *Graph) sort(names []string) {
	slices.SortFunc(names, func(a, b string) int { return g.rank[a] - g.rank[b] })
}

// Definition returns the definition the graph was built from.
func (g *Graph) Definition() *Definition { return g.def }

// Step returns the step of that name, or nil.
func (g *Graph) Step(name string) *Step { return g.step[name] }

// Order returns every step name in topological order.
func (g *Graph) Order() []string { return slices.Clone(g.order) }

// Parents returns the steps name waits for.
func (g *Graph) Parents(name string) []string {
	s := g.step[name]
	if s == nil {
		return nil
	}
	out := slices.Clone(s.After)
	g.sort(out)
	return out
}

// Children returns the steps that wait for name.
func (g *Graph) Children(name string) []string { return slices.Clone(g.children[name]) }

// Ancestors returns every step name depends on, directly or not.
func (g *Graph) Ancestors(name string) []string {
	return g.closure(name, func(n string) []string { return g.step[n].After })
}

// Descendants returns every step that depends on name, directly or not.
func (g *Graph) Descendants(name string) []string {
	return g.closure(name, func(n string) []string { return g.children[n] })
}

func (g *Graph) closure(name string, next func(string) []string) []string {
	if g.step[name] == nil {
		return nil
	}
	seen := map[string]bool{}
	todo := []string{name}
	var out []string
	for len(todo) > 0 {
		n := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for _, m := range next(n) {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
				todo = append(todo, m)
			}
		}
	}
	g.sort(out)
	return out
}

// IsAncestor reports whether step a is an ancestor of step b.
func (g *Graph) IsAncestor(a, b string) bool {
	return slices.Contains(g.Ancestors(b), a)
}

// Roots returns the steps without parents: they are released when a run
// starts.
func (g *Graph) Roots() []string {
	var out []string
	for _, n := range g.order {
		if len(g.step[n].After) == 0 {
			out = append(out, n)
		}
	}
	return out
}

// Sinks returns the steps without dependents: their outputs are the run's
// output.
func (g *Graph) Sinks() []string {
	var out []string
	for _, n := range g.order {
		if len(g.children[n]) == 0 {
			out = append(out, n)
		}
	}
	return out
}
