package flow

import (
	"fmt"
	"strings"
)

// Instance is what a run knows of one step instance.
type Instance struct {
	Index      int
	State      StepState
	Output     []byte   // JSON; nil when there is none (yet)
	Confidence *float64 // set for human steps once finalized
}

// Record is the instances of one step in one run. Before a step is
// released it has one PENDING instance (index 0); releasing a fan-out step
// replaces it with one instance per item, so a fan-out step over an empty
// list has none.
type Record struct {
	FanOut    bool       // the step has forEach: its output is a list
	Instances []Instance // in index order
}

// State folds the instances of a step into one state, the one its
// dependents and the run see:
//
//   - an instance not done → RUNNING if one runs, else PENDING;
//   - otherwise any FAILED → FAILED, else any CANCELED → CANCELED,
//     else all SKIPPED → SKIPPED, else SUCCEEDED (a fan-out step with some
//     skipped instances succeeded; their outputs are null);
//   - a fan-out step with no instances (an empty list) SUCCEEDED, with
//     output [].
func (r *Record) State() StepState {
	if len(r.Instances) == 0 {
		if r.FanOut {
			return StepSucceeded
		}
		return StepPending
	}
	count := map[StepState]int{}
	for _, in := range r.Instances {
		count[in.State]++
	}
	switch n := len(r.Instances); {
	case count[StepRunning] > 0:
		return StepRunning
	case count[StepPending] > 0:
		return StepPending
	case count[StepFailed] > 0:
		return StepFailed
	case count[StepCanceled] > 0:
		return StepCanceled
	case count[StepSkipped] == n:
		return StepSkipped
	}
	return StepSucceeded
}

// Action is what Decide says to do with a PENDING step.
type Action string

// The actions.
const (
	// ActionWait: a parent has not ended yet.
	ActionWait Action = "wait"
	// ActionRelease: evaluate `if` (false → SKIPPED), then `forEach`, then
	// create the job, unit or signal wait of each instance.
	ActionRelease Action = "release"
	// ActionSkip: the step will not run; its instances become SKIPPED.
	ActionSkip Action = "skip"
	// ActionCancel: the run is failing or canceled; the step's instances
	// become CANCELED.
	ActionCancel Action = "cancel"
)

// Decision is Decide's answer with its reason, for logs and the API.
type Decision struct {
	Action Action
	Reason string
}

// Decide says what to do with a PENDING step of a running run, given the
// folded states of the steps (Record.State; a missing name is PENDING).
// The rules, in order:
//
//  1. No parents: release.
//  2. A parent is PENDING or RUNNING: wait.
//  3. A parent is CANCELED, or FAILED with onFailure "fail": cancel (the
//     run is canceled or failing; no trigger runs after that).
//  4. Trigger all_done: release, whatever the other ends (SUCCEEDED,
//     SKIPPED, FAILED with onFailure "continue").
//  5. Trigger all_success (the default):
//     a parent FAILED with onFailure "continue" → skip (the failure was
//     tolerated, but this step needed that parent's success);
//     every parent SKIPPED → skip (steps that only depend on skipped steps
//     are skipped);
//     otherwise (each parent SUCCEEDED or SKIPPED, at least one SUCCEEDED)
//     → release: a skipped optional branch does not block its join.
func Decide(g *Graph, step string, states map[string]StepState) Decision {
	s := g.Step(step)
	if s == nil {
		return Decision{ActionCancel, fmt.Sprintf("step %q is not in the workflow", step)}
	}
	parents := g.Parents(step)
	if len(parents) == 0 {
		return Decision{ActionRelease, "no parents"}
	}
	var failed, skipped []string
	for _, p := range parents {
		st := states[p]
		if st == "" {
			st = StepPending
		}
		switch st {
		case StepPending, StepRunning:
			return Decision{ActionWait, fmt.Sprintf("parent %q is %s", p, st)}
		case StepCanceled:
			return Decision{ActionCancel, fmt.Sprintf("parent %q was canceled", p)}
		case StepFailed:
			if g.Step(p).OnFailure.OrDefault() == OnFailureFail {
				return Decision{ActionCancel, fmt.Sprintf("parent %q failed the run", p)}
			}
			failed = append(failed, p)
		case StepSkipped:
			skipped = append(skipped, p)
		}
	}
	if s.Trigger.OrDefault() == TriggerAllDone {
		return Decision{ActionRelease, "every parent is done (trigger all_done)"}
	}
	if len(failed) > 0 {
		return Decision{ActionSkip, fmt.Sprintf("parent %s failed (onFailure continue) and the trigger is all_success", quoteList(failed))}
	}
	if len(skipped) == len(parents) {
		return Decision{ActionSkip, fmt.Sprintf("every parent was skipped (%s)", quoteList(skipped))}
	}
	return Decision{ActionRelease, "every parent succeeded or was skipped (trigger all_success)"}
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// Outcome says whether a RUNNING or PAUSED run is over, given the folded
// states of its steps: FAILED as soon as a step with onFailure "fail" has
// FAILED (its PENDING steps are then canceled; running ones finish),
// SUCCEEDED when every step is done and none failed the run. ok is false
// while the run goes on.
func Outcome(g *Graph, states map[string]StepState) (state RunState, ok bool) {
	done := true
	for _, name := range g.Order() {
		st := states[name]
		if st == StepFailed && g.Step(name).OnFailure.OrDefault() == OnFailureFail {
			return RunFailed, true
		}
		if !st.Done() {
			done = false
		}
	}
	if done {
		return RunSucceeded, true
	}
	return RunRunning, false
}

// RetryBlockers lists, in DAG order, the steps a retry would reset (see
// RetrySteps) that are still RUNNING: downstream of a FAILED or CANCELED
// step but released before the run failed (a trigger of all_done) and not
// ended yet. The state table does not reset a running step, so a retry
// then would keep it, and its output, computed from the failure, would
// stand in the retried run: the retry waits until they end.
func RetryBlockers(g *Graph, states map[string]StepState) []string {
	downstream := map[string]bool{}
	for _, name := range g.Order() {
		if st := states[name]; st == StepFailed || st == StepCanceled {
			for _, d := range g.Descendants(name) {
				downstream[d] = true
			}
		}
	}
	var out []string
	for _, name := range g.Order() {
		if downstream[name] && states[name] == StepRunning {
			out = append(out, name)
		}
	}
	return out
}

// RetrySteps returns the steps a retry of a FAILED run resets to PENDING,
// in topological order: every FAILED or CANCELED step and every done step
// downstream of one. Steps outside that set keep their state and outputs
// (a SUCCEEDED step upstream of the failure is not run again).
func RetrySteps(g *Graph, states map[string]StepState) []string {
	reset := map[string]bool{}
	for _, name := range g.Order() {
		if st := states[name]; st == StepFailed || st == StepCanceled {
			reset[name] = true
			for _, d := range g.Descendants(name) {
				reset[d] = true
			}
		}
	}
	var out []string
	for _, name := range g.Order() {
		if reset[name] && states[name].Done() {
			out = append(out, name)
		}
	}
	return out
}
