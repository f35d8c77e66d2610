package flow

import (
	"errors"
	"testing"
)

// TestRunTransitionTable checks every (from, to) pair of run states against
// the table written out here from the rules.
func TestRunTransitionTable(t *testing.T) {
	t.Parallel()
	allowed := map[[2]RunState]bool{
		{RunRunning, RunPaused}: true, {RunPaused, RunRunning}: true,
		{RunRunning, RunSucceeded}: true, {RunPaused, RunSucceeded}: true,
		{RunRunning, RunFailed}: true, {RunPaused, RunFailed}: true,
		{RunRunning, RunCanceled}: true, {RunPaused, RunCanceled}: true,
		{RunFailed, RunRunning}: true, // retry
	}
	for _, from := range RunStates {
		for _, to := range RunStates {
			want := allowed[[2]RunState{from, to}]
			if got := CanRunTransition(from, to); got != want {
				t.Errorf("run %s -> %s: allowed = %v, want %v", from, to, got, want)
			}
			err := CheckRunTransition(from, to)
			var ite *InvalidTransitionError
			if want != (err == nil) || !want && (!errors.As(err, &ite) || ite.Of != "run" || ite.From != string(from) || ite.To != string(to)) {
				t.Errorf("run %s -> %s: CheckRunTransition = %v", from, to, err)
			}
		}
	}
	if CanRunTransition("running", RunPaused) || CanRunTransition(RunRunning, "") {
		t.Error("unknown run states allowed")
	}
}

// TestStepTransitionTable checks every (from, to) pair of step states.
func TestStepTransitionTable(t *testing.T) {
	t.Parallel()
	allowed := map[[2]StepState]bool{
		{StepPending, StepRunning}: true, {StepPending, StepSkipped}: true,
		{StepPending, StepFailed}: true, {StepPending, StepCanceled}: true,
		{StepRunning, StepSucceeded}: true, {StepRunning, StepFailed}: true, {StepRunning, StepCanceled}: true,
		// retry of the run
		{StepSucceeded, StepPending}: true, {StepFailed, StepPending}: true,
		{StepSkipped, StepPending}: true, {StepCanceled, StepPending}: true,
	}
	for _, from := range StepStates {
		for _, to := range StepStates {
			want := allowed[[2]StepState{from, to}]
			if got := CanStepTransition(from, to); got != want {
				t.Errorf("step %s -> %s: allowed = %v, want %v", from, to, got, want)
			}
			err := CheckStepTransition(from, to)
			var ite *InvalidTransitionError
			if want != (err == nil) || !want && (!errors.As(err, &ite) || ite.Of != "step" || ite.From != string(from) || ite.To != string(to)) {
				t.Errorf("step %s -> %s: CheckStepTransition = %v", from, to, err)
			}
		}
	}
	if CanStepTransition("pending", StepRunning) || CanStepTransition(StepPending, "DONE") {
		t.Error("unknown step states allowed")
	}
	for _, s := range StepStates {
		if s.Done() != (s != StepPending && s != StepRunning) {
			t.Errorf("%s.Done() = %v", s, s.Done())
		}
	}
	if got := (&InvalidTransitionError{Of: "run", ID: "r1", From: "SUCCEEDED", To: "RUNNING"}).Error(); got != "invalid transition of run r1: SUCCEEDED -> RUNNING" {
		t.Errorf("message %q", got)
	}
}
