package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAttemptContextAsStandard: an attempt's context ends exactly as the
// standard pair it stands for (context.WithDeadlineCause over
// context.WithCancelCause), whatever the order of the execution's
// cancellation, the attempt's end and its deadline, and whenever it is
// built (before them, between them, after them, or never): Err, Cause, the
// deadline, Done, the execution's own cause, and a context derived from it.
func TestAttemptContextAsStandard(t *testing.T) {
	t.Parallel()
	var seqs [][]string
	var perm func(prefix []string, rest []string)
	perm = func(prefix, rest []string) {
		seqs = append(seqs, prefix)
		for i, e := range rest {
			next := append(append([]string{}, rest[:i]...), rest[i+1:]...)
			perm(append(append([]string{}, prefix...), e), next)
		}
	}
	perm(nil, []string{"cancel", "end", "deadline"})
	for _, seq := range seqs {
		for buildAt := 0; buildAt <= len(seq)+1; buildAt++ { // len+1: never built
			name := fmt.Sprintf("%s/build%d", strings.Join(append([]string{"start"}, seq...), ","), buildAt)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				checkAttemptContext(t, seq, buildAt)
			})
		}
	}
}

func checkAttemptContext(t *testing.T, seq []string, buildAt int) {
	parent := context.WithoutCancel(context.Background())
	deadline := time.Now().Add(time.Hour)
	for _, e := range seq {
		if e == "deadline" {
			deadline = time.Now().Add(20 * time.Millisecond)
		}
	}
	refExec, refCancel := context.WithCancelCause(parent)
	defer refCancel(nil)
	refAttempt, refEnd := context.WithDeadlineCause(refExec, deadline, errTimeout)
	defer refEnd()
	ex := &execution{}
	a := &ex.actx
	a.ex, a.parent = ex, parent
	a.setDeadline(deadline)

	var child, refChild context.Context
	build := func() {
		_ = a.Done()
		var cancel context.CancelFunc
		child, cancel = context.WithCancel(a)
		t.Cleanup(cancel)
		refChild, cancel = context.WithCancel(refAttempt)
		t.Cleanup(cancel)
	}
	for i, e := range seq {
		if i == buildAt {
			build()
		}
		switch e {
		case "cancel":
			refCancel(errLeaseLost)
			a.cancel(errLeaseLost)
		case "end":
			refEnd()
			a.end()
		case "deadline":
			time.Sleep(time.Until(deadline))
			for time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			select {
			case <-refAttempt.Done(): // ended before, or now by its timer
			case <-time.After(10 * time.Second):
				t.Fatal("the standard context's deadline never fired")
			}
			if i >= buildAt { // built: its own timer fires too
				select {
				case <-a.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the built context's deadline never fired")
				}
			}
		}
	}
	if buildAt == len(seq) {
		build()
	}

	if got, want := errors.Is(a.execCauseNow(), errLeaseLost), errors.Is(context.Cause(refExec), errLeaseLost); got != want {
		t.Fatalf("execution's cause: lease lost %v, want %v", got, want)
	}
	if got, want := a.causeNow(), context.Cause(refAttempt); got != want {
		t.Fatalf("causeNow %v, want %v", got, want)
	}
	if got, want := a.Err(), refAttempt.Err(); got != want {
		t.Fatalf("Err %v, want %v", got, want)
	}
	d, ok := a.Deadline()
	if rd, rok := refAttempt.Deadline(); !d.Equal(rd) || ok != rok {
		t.Fatalf("Deadline %v %v, want %v %v", d, ok, rd, rok)
	}
	if ex2 := executionFrom(a); ex2 != ex {
		t.Fatal("the execution is not in the context")
	}
	if buildAt > len(seq) {
		if a.built.Load() != nil {
			t.Fatal("built without being asked")
		}
		return
	}
	if got, want := context.Cause(a), context.Cause(refAttempt); got != want {
		t.Fatalf("context.Cause %v, want %v", got, want)
	}
	ended := refAttempt.Err() != nil
	select {
	case <-a.Done():
		if !ended {
			t.Fatal("Done closed, the standard one is not")
		}
	default:
		if ended {
			t.Fatal("Done open, the standard one is closed")
		}
	}
	if got, want := child.Err(), refChild.Err(); got != want {
		t.Fatalf("derived Err %v, want %v", got, want)
	}
	if got, want := context.Cause(child), context.Cause(refChild); got != want {
		t.Fatalf("derived cause %v, want %v", got, want)
	}
	if executionFrom(child) != ex {
		t.Fatal("the execution is not in a derived context")
	}
}
