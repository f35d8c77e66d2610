package web

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
)

// requireLaidOut checks that no two nodes overlap, every node lies inside
// the drawing, and every edge runs from its parent's right side to its
// child's left side, left to right.
func requireLaidOut(t *testing.T, steps []dagStep, c *dagChart) {
	t.Helper()
	require.Len(t, c.Nodes, len(steps))
	at := map[string]dagNode{}
	for i, a := range c.Nodes {
		at[a.Name] = a
		require.GreaterOrEqual(t, a.X, 0)
		require.GreaterOrEqual(t, a.Y, 0)
		require.LessOrEqual(t, a.X+a.W, c.Width, "%s", a.Name)
		require.LessOrEqual(t, a.Y+a.H, c.Height, "%s", a.Name)
		for _, b := range c.Nodes[i+1:] {
			apart := a.X+a.W <= b.X || b.X+b.W <= a.X || a.Y+a.H <= b.Y || b.Y+b.H <= a.Y
			require.True(t, apart, "%s at (%d,%d) overlaps %s at (%d,%d)", a.Name, a.X, a.Y, b.Name, b.X, b.Y)
		}
	}
	right, bottom := 0, 0
	for _, n := range c.Nodes {
		right, bottom = max(right, n.X+n.W), max(bottom, n.Y+n.H)
	}
	require.Equal(t, c.Width, right+dagPad, "the drawing is as wide as its nodes")
	require.Equal(t, c.Height, bottom+dagPad, "the drawing is as tall as its nodes")
	edges := 0
	for _, s := range steps {
		for _, p := range s.After {
			if _, ok := at[p]; !ok {
				continue
			}
			edges++
			require.Greater(t, at[s.Name].Depth, at[p].Depth, "%s after %s", s.Name, p)
			require.Contains(t, c.Edges, dagEdge{X1: at[p].X + at[p].W, Y1: at[p].Y + at[p].H/2, X2: at[s.Name].X, Y2: at[s.Name].Y + at[s.Name].H/2})
		}
	}
	require.Len(t, c.Edges, edges)
}

func TestLayoutDAGDiamond(t *testing.T) {
	t.Parallel()
	steps := []dagStep{
		{Name: "top", Kind: "job"},
		{Name: "left", Kind: "job", After: []string{"top"}},
		{Name: "right", Kind: "human", After: []string{"top"}},
		{Name: "join", Kind: "job", After: []string{"left", "right"}},
		{Name: "late", Kind: "signal", After: []string{"top", "join", "nowhere"}}, // an unknown parent is ignored
	}
	c := layoutDAG(steps)
	requireLaidOut(t, steps, c)
	depth := map[string]int{}
	for _, n := range c.Nodes {
		depth[n.Name] = n.Depth
		require.Equal(t, "ss-def", n.Class)
		require.Equal(t, n.Kind, n.Summary)
		require.Zero(t, n.Instances)
	}
	require.Equal(t, map[string]int{"top": 0, "left": 1, "right": 1, "join": 2, "late": 3}, depth, "depth is the longest path from a root")
	require.Equal(t, c.Nodes[1].X, c.Nodes[2].X, "one layer, one column")
	require.NotEqual(t, c.Nodes[1].Y, c.Nodes[2].Y)
}

func TestLayoutDAGFanOutCounts(t *testing.T) {
	t.Parallel()
	ok, bad, run := docket.StepSucceeded, docket.StepFailed, docket.StepRunning
	cases := []struct {
		states []docket.StepState
		class  string
		counts []stateCount
		sum    string
	}{
		{[]docket.StepState{ok, ok, bad, run, ok}, "ss-failed", []stateCount{{bad, 1}, {run, 1}, {ok, 3}}, "1 failed · 1 running · 3 succeeded"},
		{[]docket.StepState{ok, run, docket.StepPending}, "ss-running", []stateCount{{run, 1}, {docket.StepPending, 1}, {ok, 1}}, "1 running · 1 pending · 1 succeeded"},
		{[]docket.StepState{ok, docket.StepSkipped}, "ss-succeeded", []stateCount{{ok, 1}, {docket.StepSkipped, 1}}, "1 succeeded · 1 skipped"},
	}
	for _, tc := range cases {
		c := layoutDAG([]dagStep{{Name: "root", States: []docket.StepState{ok}}, {Name: "each", After: []string{"root"}, States: tc.states}})
		require.Len(t, c.Nodes, 2, "a fan-out is one node")
		n := c.Nodes[1]
		require.Equal(t, len(tc.states), n.Instances)
		require.Equal(t, tc.class, n.Class)
		require.Equal(t, tc.counts, n.Counts)
		require.Equal(t, tc.sum, n.Summary)
	}

	// runSteps: a step the run has not released is one PENDING node; a
	// fan-out of 10,000 instances is still one node.
	def := &docket.WorkflowDefinition{Name: "f", Steps: []docket.WorkflowStep{
		{Name: "a", Job: &docket.JobStep{Type: "t"}},
		{Name: "b", Job: &docket.JobStep{Type: "t"}, After: []string{"a"}, ForEach: "input.items"},
		{Name: "c", Human: &docket.HumanStep{Task: "x"}, After: []string{"b"}},
	}}
	r := &docket.Run{Steps: []*docket.RunStep{{Name: "a", State: ok}}}
	for i := range 10000 {
		r.Steps = append(r.Steps, &docket.RunStep{Name: "b", Index: i, State: ok})
	}
	c := layoutDAG(runSteps(def, r))
	require.Len(t, c.Nodes, 3)
	require.Equal(t, 10000, c.Nodes[1].Instances)
	require.Equal(t, "10000 succeeded", c.Nodes[1].Summary)
	require.Equal(t, "ss-pending", c.Nodes[2].Class)
	require.Equal(t, "human", c.Nodes[2].Kind)
}

// TestLayoutDAGBig: 200 steps with random parents among the earlier ones
// lay out without overlap in a bounded drawing, and a cycle does not loop.
func TestLayoutDAGBig(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var steps []dagStep
	for i := range 200 {
		s := dagStep{Name: fmt.Sprintf("step-%03d-with-a-rather-long-name", i), Kind: "job", States: []docket.StepState{docket.StepSucceeded}}
		for range rng.IntN(3) {
			if i > 0 {
				s.After = append(s.After, steps[rng.IntN(i)].Name)
			}
		}
		steps = append(steps, s)
	}
	c := layoutDAG(steps)
	requireLaidOut(t, steps, c)
	for _, n := range c.Nodes {
		require.LessOrEqual(t, len([]rune(n.Label)), 20, "labels are cut to fit")
	}

	wide := make([]dagStep, 200)
	for i := range wide {
		wide[i] = dagStep{Name: fmt.Sprint(i)}
	}
	c = layoutDAG(wide)
	requireLaidOut(t, wide, c)
	require.Equal(t, 2*dagPad+dagNodeW, c.Width, "200 roots: one column")

	cycle := []dagStep{{Name: "a", After: []string{"b"}}, {Name: "b", After: []string{"a"}}}
	c = layoutDAG(cycle)
	require.Len(t, c.Nodes, 2)
	require.NotEqual(t, c.Nodes[0].X, c.Nodes[1].X)
}
