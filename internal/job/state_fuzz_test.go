package job

import (
	"errors"
	"testing"
)

// FuzzCheckTransition: for any pair of strings, CheckTransition allows only
// pairs of known states that the table lists, refuses everything else with
// an *InvalidTransitionError naming both, and never panics.
func FuzzCheckTransition(f *testing.F) {
	for _, from := range States {
		for _, to := range States {
			f.Add(string(from), string(to))
		}
	}
	f.Add("", "QUEUED")
	f.Add("queued", "RUNNING")
	f.Fuzz(func(t *testing.T, from, to string) {
		err := CheckTransition(State(from), State(to))
		if err == nil {
			if !State(from).Valid() || !State(to).Valid() {
				t.Fatalf("%q -> %q allowed between unknown states", from, to)
			}
			if State(from).Terminal() && State(from) == StateSuccess {
				t.Fatalf("SUCCESS is final, yet %q -> %q allowed", from, to)
			}
			return
		}
		var ite *InvalidTransitionError
		if !errors.As(err, &ite) || ite.From != State(from) || ite.To != State(to) {
			t.Fatalf("%q -> %q: error %v does not name the pair", from, to, err)
		}
	})
}

// TestTransitionTable pins the table to DESIGN §3.
func TestTransitionTable(t *testing.T) {
	allowed := map[[2]State]bool{
		{StateCreated, StateQueued}: true, {StateQueued, StateRunning}: true,
		{StateRunning, StateSuccess}: true, {StateRunning, StateRetry}: true, {StateRunning, StateDead}: true,
		{StateRetry, StateQueued}: true, {StateRetry, StateDead}: true,
		{StateCreated, StateCanceled}: true, {StateQueued, StateCanceled}: true, {StateRetry, StateCanceled}: true,
		{StateRunning, StateCanceled}: true,
		{StateDead, StateQueued}:      true, {StateCanceled, StateQueued}: true,
	}
	for _, from := range States {
		for _, to := range States {
			if got := CanTransition(from, to); got != allowed[[2]State{from, to}] {
				t.Errorf("%s -> %s: allowed = %v, DESIGN §3 says %v", from, to, got, allowed[[2]State{from, to}])
			}
		}
	}
}
