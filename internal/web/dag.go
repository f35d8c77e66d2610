package web

import (
	"fmt"
	"strings"

	"github.com/docket-run/docket"
)

// dagStep is one step of a DAG to draw: its parents and, for a run, the
// state of each of its instances (one, or one per item of a fan-out);
// States is nil for a definition.
type dagStep struct {
	Name   string
	Kind   string // "job", "signal", "human"
	After  []string
	States []docket.StepState
}

// dagChart is a DAG laid out here and drawn by the template as SVG: every
// coordinate is computed on the server, colours come from CSS classes
// (the CSP allows no inline style). A fan-out step is one node whatever
// its instance count, so the drawing grows with the steps of the
// definition, never with the items of a run.
type dagChart struct {
	Width, Height int
	Nodes         []dagNode
	Edges         []dagEdge
}

type dagNode struct {
	Name      string
	Label     string // Name, cut to fit the box
	Kind      string
	Depth     int // layer: the longest path from a root
	X, Y      int // top left
	W, H      int
	TextX     int
	NameY     int
	SubY      int
	Class     string // "ss-running" …: the node's colour
	Instances int    // instances of a run's step; 0 for a definition
	Counts    []stateCount
	Summary   string // "3 succeeded · 1 running" (a run), "job" (a definition)
}

type stateCount struct {
	State docket.StepState
	N     int
}

type dagEdge struct{ X1, Y1, X2, Y2 int }

// Layout of a DAG, in SVG user units.
const (
	dagNodeW = 170
	dagNodeH = 44
	dagGapX  = 50
	dagGapY  = 16
	dagPad   = 8
)

// stepStates is every step state, in the order counts are listed.
var stepStates = []docket.StepState{docket.StepFailed, docket.StepRunning, docket.StepPending,
	docket.StepCanceled, docket.StepSucceeded, docket.StepSkipped}

func stepClass(st docket.StepState) string { return "ss-" + strings.ToLower(string(st)) }

// layoutDAG puts each step in the layer of its depth (0 for a root, else
// one more than its deepest parent), in the given order within a layer,
// and draws an edge from each parent to its child. Unknown parents are
// ignored, and a cycle (a definition that was never validated) cannot
// loop: a step being visited counts as depth 0.
func layoutDAG(steps []dagStep) *dagChart {
	index := make(map[string]int, len(steps))
	for i, s := range steps {
		index[s.Name] = i
	}
	depth := make([]int, len(steps))
	state := make([]int8, len(steps)) // 0 new, 1 visiting, 2 done
	var visit func(i int) int
	visit = func(i int) int {
		switch state[i] {
		case 1:
			return 0
		case 2:
			return depth[i]
		}
		state[i] = 1
		d := 0
		for _, p := range steps[i].After {
			if j, ok := index[p]; ok {
				d = max(d, visit(j)+1)
			}
		}
		depth[i], state[i] = d, 2
		return d
	}
	c := &dagChart{}
	rows := map[int]int{} // depth → nodes placed in it
	layers, tallest := 0, 0
	for i, s := range steps {
		d := visit(i)
		row := rows[d]
		rows[d]++
		layers, tallest = max(layers, d+1), max(tallest, row+1)
		n := dagNode{Name: s.Name, Label: cut(s.Name, 20), Kind: s.Kind, Depth: d,
			X: dagPad + d*(dagNodeW+dagGapX), Y: dagPad + row*(dagNodeH+dagGapY), W: dagNodeW, H: dagNodeH}
		n.TextX, n.NameY, n.SubY = n.X+8, n.Y+18, n.Y+35
		if s.States == nil {
			n.Class, n.Summary = "ss-def", s.Kind
		} else {
			n.Instances = len(s.States)
			n.Counts, n.Class = countStates(s.States)
			parts := make([]string, len(n.Counts))
			for k, sc := range n.Counts {
				parts[k] = fmt.Sprintf("%d %s", sc.N, strings.ToLower(string(sc.State)))
			}
			n.Summary = strings.Join(parts, " · ")
		}
		c.Nodes = append(c.Nodes, n)
	}
	for i, s := range steps {
		child := c.Nodes[i]
		for _, p := range s.After {
			j, ok := index[p]
			if !ok {
				continue
			}
			parent := c.Nodes[j]
			c.Edges = append(c.Edges, dagEdge{X1: parent.X + dagNodeW, Y1: parent.Y + dagNodeH/2, X2: child.X, Y2: child.Y + dagNodeH/2})
		}
	}
	c.Width = 2*dagPad + max(1, layers)*(dagNodeW+dagGapX) - dagGapX
	c.Height = 2*dagPad + max(1, tallest)*(dagNodeH+dagGapY) - dagGapY
	return c
}

// countStates counts instances by state, in stepStates order, and picks
// the node's colour: the first state present in that order, so a step
// with a failed instance is red, else one with a running instance shows
// it running, and a step is green only when every instance succeeded (or
// was skipped).
func countStates(states []docket.StepState) ([]stateCount, string) {
	n := map[docket.StepState]int{}
	for _, st := range states {
		n[st]++
	}
	var out []stateCount
	class := "ss-pending"
	for _, st := range stepStates {
		if n[st] > 0 {
			if out == nil {
				class = stepClass(st)
			}
			out = append(out, stateCount{State: st, N: n[st]})
		}
	}
	return out, class
}

// stepKind names the kind of a definition's step.
func stepKind(s *docket.WorkflowStep) string {
	switch {
	case s.Job != nil:
		return "job"
	case s.Signal != nil:
		return "signal"
	case s.Human != nil:
		return "human"
	}
	return "?"
}

// definitionSteps are the steps of a definition to draw.
func definitionSteps(def *docket.WorkflowDefinition) []dagStep {
	out := make([]dagStep, len(def.Steps))
	for i := range def.Steps {
		s := &def.Steps[i]
		out[i] = dagStep{Name: s.Name, Kind: stepKind(s), After: s.After}
	}
	return out
}

// runSteps are the steps of a run to draw: the definition's, each with
// the states of its instances (a step the run does not list is PENDING).
func runSteps(def *docket.WorkflowDefinition, run *docket.Run) []dagStep {
	states := map[string][]docket.StepState{}
	for _, s := range run.Steps {
		states[s.Name] = append(states[s.Name], s.State)
	}
	out := definitionSteps(def)
	for i := range out {
		out[i].States = states[out[i].Name]
		if len(out[i].States) == 0 {
			out[i].States = []docket.StepState{docket.StepPending}
		}
	}
	return out
}

// cut shortens s to at most n runes, marking the cut with "…".
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
