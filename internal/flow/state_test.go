package flow

import (
	"errors"
	"testing"
)

// checkTable compares a state machine with the table of allowed pairs,
// for every (from, to) pair of known states, and a few unknown ones.
func checkTable[S ~string](t *testing.T, of string, states []S, allowed map[[2]S]bool, can func(S, S) bool, check func(S, S) error) {
	t.Helper()
	for _, from := range states {
		for _, to := range states {
			want := allowed[[2]S{from, to}]
			if got := can(from, to); got != want {
				t.Errorf("%s %s -> %s: allowed = %v, want %v", of, from, to, got, want)
			}
			err := check(from, to)
			var ite *InvalidTransitionError
			if want != (err == nil) || !want && (!errors.As(err, &ite) || ite.Of != of || ite.From != string(from) || ite.To != string(to)) {
				t.Errorf("%s %s -> %s: check = %v", of, from, to, err)
			}
		}
	}
	if can("", states[0]) || can(states[0], "") || can(S("x"+string(states[0])), states[1]) {
		t.Errorf("%s: unknown states allowed", of)
	}
}

// TestRunTransitionTable: the run state machine, from the rules.
func TestRunTransitionTable(t *testing.T) {
	t.Parallel()
	checkTable(t, "run", RunStates, map[[2]RunState]bool{
		{RunRunning, RunPaused}: true, {RunPaused, RunRunning}: true,
		{RunRunning, RunSucceeded}: true, {RunPaused, RunSucceeded}: true,
		{RunRunning, RunFailed}: true, {RunPaused, RunFailed}: true,
		{RunRunning, RunCanceled}: true, {RunPaused, RunCanceled}: true,
		{RunFailed, RunRunning}: true, // retry
	}, CanRunTransition, CheckRunTransition)
}

// TestStepTransitionTable: the step instance state machine.
func TestStepTransitionTable(t *testing.T) {
	t.Parallel()
	checkTable(t, "step", StepStates, map[[2]StepState]bool{
		{StepPending, StepRunning}: true, {StepPending, StepSkipped}: true,
		{StepPending, StepFailed}: true, {StepPending, StepCanceled}: true,
		{StepRunning, StepSucceeded}: true, {StepRunning, StepFailed}: true, {StepRunning, StepCanceled}: true,
		{StepRunning, StepSkipped}: true, // a signal timed out, onFailure continue
		// retry of the run
		{StepSucceeded, StepPending}: true, {StepFailed, StepPending}: true,
		{StepSkipped, StepPending}: true, {StepCanceled, StepPending}: true,
	}, CanStepTransition, CheckStepTransition)
	for _, s := range StepStates {
		if s.Done() != (s != StepPending && s != StepRunning) {
			t.Errorf("%s.Done() = %v", s, s.Done())
		}
	}
	for _, s := range RunStates {
		if s.Terminal() != (s == RunSucceeded || s == RunFailed || s == RunCanceled) || !s.Valid() {
			t.Errorf("%s: Terminal %v Valid %v", s, s.Terminal(), s.Valid())
		}
	}
	if got := (&InvalidTransitionError{Of: "run", ID: "r1", From: "SUCCEEDED", To: "RUNNING"}).Error(); got != "invalid transition of run r1: SUCCEEDED -> RUNNING" {
		t.Errorf("message %q", got)
	}
}

func TestStepKind(t *testing.T) {
	t.Parallel()
	cases := map[Kind]Step{
		KindJob:    {Job: &JobStep{}},
		KindSignal: {Signal: &SignalStep{}},
		KindHuman:  {Human: &HumanStep{}},
		"":         {Job: &JobStep{}, Signal: &SignalStep{}},
	}
	for want, s := range cases {
		if got := s.Kind(); got != want {
			t.Errorf("Kind() = %q, want %q", got, want)
		}
	}
	if (&Step{}).Kind() != "" {
		t.Error("a step without kind has one")
	}
}
