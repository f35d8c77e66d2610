package flow

import (
	"fmt"
	"slices"
	"testing"
)

// joinGraph: a and b are parents of c; a has onFailure continue, b fail.
func joinGraph(t *testing.T, trigger Trigger) *Graph {
	t.Helper()
	g, err := NewGraph(&Definition{Name: "w", Steps: []Step{
		{Name: "a", Job: &JobStep{Type: "t"}, OnFailure: OnFailureContinue},
		{Name: "b", Job: &JobStep{Type: "t"}},
		{Name: "c", Job: &JobStep{Type: "t"}, After: []string{"a", "b"}, Trigger: trigger},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestDecide(t *testing.T) {
	t.Parallel()
	const (
		P, R, S, F, K, C = StepPending, StepRunning, StepSucceeded, StepFailed, StepSkipped, StepCanceled
	)
	cases := []struct {
		a, b                StepState
		allSuccess, allDone Action
	}{
		{S, S, ActionRelease, ActionRelease},
		{P, S, ActionWait, ActionWait},
		{S, R, ActionWait, ActionWait},
		{F, R, ActionWait, ActionWait}, // waits even though it will not run: b may still fail the run
		{K, S, ActionRelease, ActionRelease},
		{S, K, ActionRelease, ActionRelease},
		{K, K, ActionSkip, ActionRelease},
		{F, S, ActionSkip, ActionRelease}, // a failed, tolerated
		{F, K, ActionSkip, ActionRelease},
		{S, F, ActionCancel, ActionCancel}, // b failed the run
		{F, F, ActionCancel, ActionCancel},
		{C, S, ActionCancel, ActionCancel},
		{S, C, ActionCancel, ActionCancel},
	}
	for _, trigger := range []Trigger{"", TriggerAllDone} {
		g := joinGraph(t, trigger)
		for _, tc := range cases {
			want := tc.allSuccess
			if trigger == TriggerAllDone {
				want = tc.allDone
			}
			got := Decide(g, "c", map[string]StepState{"a": tc.a, "b": tc.b})
			if got.Action != want || got.Reason == "" {
				t.Errorf("trigger %q, a %s, b %s: %+v, want %s", trigger, tc.a, tc.b, got, want)
			}
		}
		if d := Decide(g, "a", nil); d.Action != ActionRelease {
			t.Errorf("root: %+v", d)
		}
		if d := Decide(g, "c", map[string]StepState{"a": S}); d.Action != ActionWait {
			t.Errorf("missing state counts as pending: %+v", d)
		}
	}
}

func TestRecordState(t *testing.T) {
	t.Parallel()
	inst := func(states ...StepState) []Instance {
		out := make([]Instance, len(states))
		for i, s := range states {
			out[i] = Instance{Index: i, State: s}
		}
		return out
	}
	cases := []struct {
		r    Record
		want StepState
	}{
		{Record{}, StepPending},
		{Record{FanOut: true}, StepSucceeded},
		{Record{Instances: inst(StepPending)}, StepPending},
		{Record{FanOut: true, Instances: inst(StepSucceeded, StepRunning, StepPending)}, StepRunning},
		{Record{FanOut: true, Instances: inst(StepSucceeded, StepPending)}, StepPending},
		{Record{FanOut: true, Instances: inst(StepSucceeded, StepSkipped)}, StepSucceeded},
		{Record{FanOut: true, Instances: inst(StepSkipped, StepSkipped)}, StepSkipped},
		{Record{FanOut: true, Instances: inst(StepSucceeded, StepFailed, StepCanceled)}, StepFailed},
		{Record{FanOut: true, Instances: inst(StepSucceeded, StepCanceled)}, StepCanceled},
	}
	for i, tc := range cases {
		if got := tc.r.State(); got != tc.want {
			t.Errorf("case %d: %s, want %s", i, got, tc.want)
		}
	}
}

func TestOutcomeAndRetry(t *testing.T) {
	t.Parallel()
	g, err := NewGraph(loadExample(t))
	if err != nil {
		t.Fatal(err)
	}
	all := func(s StepState) map[string]StepState {
		m := map[string]StepState{}
		for _, n := range g.Order() {
			m[n] = s
		}
		return m
	}
	if st, ok := Outcome(g, all(StepSucceeded)); !ok || st != RunSucceeded {
		t.Errorf("all succeeded: %s %v", st, ok)
	}
	states := all(StepSucceeded)
	states["publish"] = StepPending
	if _, ok := Outcome(g, states); ok {
		t.Error("a pending step ended the run")
	}
	states["review"] = StepSkipped
	states["publish"] = StepSucceeded
	if st, ok := Outcome(g, states); !ok || st != RunSucceeded {
		t.Errorf("with a skipped step: %s %v", st, ok)
	}
	states["label"] = StepFailed
	states["review"] = StepCanceled
	states["publish"] = StepCanceled
	states["thumbs"] = StepRunning
	if st, ok := Outcome(g, states); !ok || st != RunFailed {
		t.Errorf("a failed step: %s %v", st, ok)
	}
	// Retry: label and everything downstream; thumbs still runs, fetch and
	// approve keep their outputs.
	if got := RetrySteps(g, states); !slices.Equal(got, []string{"label", "review", "publish"}) {
		t.Errorf("RetrySteps = %v", got)
	}

	cont := joinGraph(t, "")
	if st, ok := Outcome(cont, map[string]StepState{"a": StepFailed, "b": StepSucceeded, "c": StepSkipped}); !ok || st != RunSucceeded {
		t.Errorf("a failure with onFailure continue: %s %v", st, ok)
	}
	if got := RetrySteps(cont, map[string]StepState{"a": StepFailed, "b": StepSucceeded, "c": StepSkipped}); fmt.Sprint(got) != "[a c]" {
		t.Errorf("RetrySteps = %v", got)
	}
}

// TestRetryBlockers: only a RUNNING step downstream of a FAILED or
// CANCELED one blocks a retry; a running step elsewhere does not.
func TestRetryBlockers(t *testing.T) {
	t.Parallel()
	g := joinGraph(t, TriggerAllDone)
	states := map[string]StepState{"a": StepFailed, "b": StepRunning, "c": StepRunning}
	if got := RetryBlockers(g, states); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("blockers = %v, want [c] (b runs but is not downstream of a)", got)
	}
	states["c"] = StepSucceeded
	if got := RetryBlockers(g, states); len(got) != 0 {
		t.Fatalf("blockers = %v, want none once c ended", got)
	}
	states = map[string]StepState{"a": StepSucceeded, "b": StepRunning, "c": StepRunning}
	if got := RetryBlockers(g, states); len(got) != 0 {
		t.Fatalf("blockers = %v, want none: nothing failed", got)
	}
}
