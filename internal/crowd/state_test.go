package crowd

import (
	"errors"
	"strings"
	"testing"
)

// checkTable compares a state machine with the table of allowed pairs, for
// every (from, to) pair of known states, and a few unknown ones.
func checkTable[S ~string](t *testing.T, of string, states []S, allowed map[[2]S]bool, can func(S, S) bool, check func(S, S) error) {
	t.Helper()
	n := 0
	for _, from := range states {
		for _, to := range states {
			want := allowed[[2]S{from, to}]
			if want {
				n++
			}
			if got := can(from, to); got != want {
				t.Errorf("%s %s -> %s: allowed = %v, want %v", of, from, to, got, want)
			}
			if check == nil {
				continue
			}
			err := check(from, to)
			var ite *InvalidTransitionError
			if want != (err == nil) || !want && (!errors.As(err, &ite) || ite.Of != of || ite.From != string(from) || ite.To != string(to)) {
				t.Errorf("%s %s -> %s: check = %v", of, from, to, err)
			}
		}
	}
	if n != len(allowed) {
		t.Errorf("%s: the table names %d pairs, %d of known states", of, len(allowed), n)
	}
	if can("", states[0]) || can(states[0], "") || can(S("x"+string(states[0])), states[1]) {
		t.Errorf("%s: unknown states allowed", of)
	}
}

func TestUnitTransitionTable(t *testing.T) {
	t.Parallel()
	checkTable(t, "unit", UnitStates, map[[2]UnitState]bool{
		{UnitNew, UnitJudgable}: true, {UnitNew, UnitCanceled}: true,
		{UnitJudgable, UnitPaused}: true, {UnitPaused, UnitJudgable}: true,
		{UnitJudgable, UnitFinalized}: true, {UnitJudgable, UnitCanceled}: true,
		{UnitPaused, UnitCanceled}:    true,
		{UnitFinalized, UnitJudgable}: true, // reopened by quality control
	}, CanUnitTransition, CheckUnitTransition)
	for _, s := range UnitStates {
		if s.Final() != (s == UnitFinalized || s == UnitCanceled) || !s.Valid() {
			t.Errorf("%s: Final %v Valid %v", s, s.Final(), s.Valid())
		}
	}
}

func TestPoolTransitionTable(t *testing.T) {
	t.Parallel()
	checkTable(t, "pool", PoolStatuses, map[[2]PoolStatus]bool{
		{PoolOpen, PoolPaused}: true, {PoolPaused, PoolOpen}: true,
		{PoolOpen, PoolClosed}: true, {PoolPaused, PoolClosed}: true,
		{PoolClosed, PoolCompleted}: true,
		{PoolCompleted, PoolClosed}: true, // one of its units was reopened
	}, CanPoolTransition, CheckPoolTransition)
}

func TestAssignmentTransitionTable(t *testing.T) {
	t.Parallel()
	checkTable(t, "assignment", AssignmentStates, map[[2]AssignmentState]bool{
		{AssignmentActive, AssignmentSubmitted}: true,
		{AssignmentActive, AssignmentExpired}:   true,
		{AssignmentActive, AssignmentReleased}:  true,
	}, CanAssignmentTransition, nil)
}

func TestErrors(t *testing.T) {
	t.Parallel()
	e := &InvalidTransitionError{Of: "pool", ID: "p1", From: "CLOSED", To: "COMPLETED", Reason: "3 units are not final"}
	if got := e.Error(); got != "invalid transition of pool p1: CLOSED -> COMPLETED: 3 units are not final" {
		t.Errorf("message %q", got)
	}
	p := NewProblems("insert units")
	for i := range MaxProblems + 5 {
		p.Add("units", "bad %d", i)
	}
	var ve *ValidationError
	if !errors.As(p.Err(), &ve) || len(ve.Errors) != MaxProblems+1 || !strings.Contains(ve.Errors[MaxProblems].Message, "5 more") {
		t.Fatalf("capped problems: %v", p.Err())
	}
	if NewProblems("x").Err() != nil {
		t.Error("no problems must be a nil error")
	}
}
