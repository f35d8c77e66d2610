package expr

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/docket-run/docket/internal/flow"
)

// judgesDef: label (human) → mid (job) → qa (human, the `if` under
// test); side (human) beside them, fan (a human fan-out) before qa.
func judgesDef(cond string) *flow.Definition {
	return &flow.Definition{Name: "w", Steps: []flow.Step{
		{Name: "label", Human: &flow.HumanStep{Task: "t"}},
		{Name: "mid", Job: &flow.JobStep{Type: "t"}, After: []string{"label"}},
		{Name: "fan", Human: &flow.HumanStep{Task: "t"}, ForEach: "[1]"},
		{Name: "side", Human: &flow.HumanStep{Task: "t"}},
		{Name: "qa", Human: &flow.HumanStep{Task: "r"}, After: []string{"mid", "fan"}, If: cond},
	}}
}

// TestJudgesValidation: judges.<name> must name a human ancestor without
// forEach, and judges is used only so.
func TestJudgesValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct{ cond, want string }{
		{"judges.nope.size() > 0", "judges.nope: nope is not a step of this workflow"},
		{"judges.mid.size() > 0", "judges.mid: only a human step without forEach has judges"},
		{"judges.fan.size() > 0", "judges.fan: only a human step without forEach has judges"},
		{"judges.side.size() > 0", `judges.side: side is not an ancestor of "qa" (add it to after)`},
		{"size(judges) > 0", `judges may be used only as judges.<name> or judges["<name>"]`},
	} {
		_, err := b.env.Compile(judgesDef(tc.cond))
		var ve *flow.ValidationError
		if err == nil || !strings.Contains(err.Error(), "steps[4].if") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v (%T, %v), want %q", tc.cond, err, err, ve, tc.want)
		}
	}
	w, err := b.env.Compile(judgesDef(`judges.label.exists(j, j.prior < 20) || judges["label"].size() == 0`))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Judges("qa"); len(got) != 1 || got[0] != "label" {
		t.Fatalf("Judges(qa) = %v", got)
	}
	if got := w.Judges("mid"); got != nil {
		t.Fatalf("Judges(mid) = %v", got)
	}
}

// TestJudgesEvaluation: judges comes from the document's "judges".
func TestJudgesEvaluation(t *testing.T) {
	t.Parallel()
	w, err := setup(t).env.Compile(judgesDef(`judges.label.exists(j, j.prior < 1)`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		judges string
		want   bool
	}{
		{`[{"contributorId":"a","trust":null,"prior":0},{"contributorId":"b","trust":0.9,"prior":40}]`, true},
		{`[{"contributorId":"a","trust":0.5,"prior":3}]`, false},
	} {
		doc, _ := json.Marshal(map[string]any{"input": map[string]any{}, "steps": map[string]any{}, "judges": map[string]json.RawMessage{"label": json.RawMessage(tc.judges)}})
		got, err := w.Condition(ctx, "qa", doc)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.judges, got, err, tc.want)
		}
	}
	// Without the document's judges (none were read) the key is missing.
	if _, err := w.Condition(ctx, "qa", []byte(`{"input":{},"steps":{}}`)); err == nil {
		t.Error("no judges: want an evaluation error")
	}
}
