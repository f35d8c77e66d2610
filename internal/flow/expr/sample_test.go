package expr

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/docket-run/docket/internal/flow"
)

// TestSampleIsDeterministicPerRunAndStep: the same run and step always
// draw the same answer, across evaluations and compilations; about rate
// of the runs are in; 0 takes none and 1 takes all.
func TestSampleIsDeterministicPerRunAndStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := compile(t, setup(t), "sample(0.1)", "")
	again := compile(t, setup(t), "sample(0.1)", "")
	in := input(t, `{}`, `{}`, nil)
	const runs = 4000
	taken := 0
	for i := range runs {
		run := fmt.Sprintf("0190a1b2-0000-7000-8000-%012d", i)
		got, err := w.ConditionOfRun(ctx, run, "c", in)
		if err != nil {
			t.Fatal(err)
		}
		if got2, _ := again.ConditionOfRun(ctx, run, "c", in); got2 != got {
			t.Fatalf("run %s: %v, then %v", run, got, got2)
		}
		want, _ := Sample(0.1, run+"/c")
		if got != want {
			t.Fatalf("run %s: if says %v, Sample %v", run, got, want)
		}
		if got {
			taken++
		}
	}
	if frac := float64(taken) / runs; math.Abs(frac-0.1) > 0.02 {
		t.Fatalf("sample(0.1) took %d of %d runs (%.3f)", taken, runs, frac)
	}
	for _, tc := range []struct {
		rate float64
		want bool
	}{{0, false}, {1, true}} {
		for i := range 200 {
			if got, err := Sample(tc.rate, fmt.Sprint(i)); got != tc.want || err != nil {
				t.Fatalf("Sample(%v, %d) = %v, %v", tc.rate, i, got, err)
			}
		}
	}
	// Steps draw independently: the same run is not in every sample.
	differ := false
	for i := range 100 {
		a, _ := Sample(0.5, fmt.Sprintf("r%d/a", i))
		b, _ := Sample(0.5, fmt.Sprintf("r%d/b", i))
		differ = differ || a != b
	}
	if !differ {
		t.Fatal("steps a and b drew the same 100 times")
	}
}

// TestSampleBadRate: a rate outside 0..1 fails the step's `if`; a rate
// that is not a number does not compile.
func TestSampleBadRate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := compile(t, b, "sample(1.5)", "")
	_, err := w.ConditionOfRun(context.Background(), "r", "c", input(t, `{}`, `{}`, nil))
	if err == nil || !strings.Contains(err.Error(), "the rate must be between 0 and 1, not 1.5") {
		t.Fatalf("err = %v", err)
	}
	_, err = b.env.Compile(def(`sample("x")`, ""))
	var ve *flow.ValidationError
	if err == nil || !strings.Contains(err.Error(), "steps[2].if") {
		t.Fatalf("err = %v (%T, %v)", err, err, ve)
	}
}

// TestSampleWithConfidence: a review condition mixing confidence and a
// sample compiles and reads the parent's confidence.
func TestSampleWithConfidence(t *testing.T) {
	t.Parallel()
	w := compile(t, setup(t), "steps.b.confidence < 0.8 || sample(0.0)", "")
	got, err := w.ConditionOfRun(context.Background(), "r", "c", input(t, `{}`, `{}`, nil)) // b's confidence is 0.6
	if err != nil || !got {
		t.Fatalf("got %v, %v", got, err)
	}
}
