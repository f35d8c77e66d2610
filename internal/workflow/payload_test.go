package workflow_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/workflow"
)

func TestIsStepPayload(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("01890a5d-ac96-774b-bcce-b302099a8057")
	cases := map[string]bool{
		`{"run":{"id":"01890a5d-ac96-774b-bcce-b302099a8057","step":"a","index":0},"input":null}`:         true,
		`{"run": {"id": "01890a5d-ac96-774b-bcce-b302099a8057", "step": "a", "index": 0}, "input": null}`: true, // jsonb
		`{"input":null,"run":{"id":"01890a5d-ac96-774b-bcce-b302099a8057"}}`:                              false,
		`{"run":{"id":"not-a-uuid-at-all-but-36-characters-x"}}`:                                          false,
		`{"run":{"id":"01890a5d"}}`: false,
		`{"to":"a@example.com"}`:    false,
		``:                          false,
	}
	for payload, want := range cases {
		got, ok := workflow.IsStepPayload([]byte(payload))
		if ok != want || (ok && got != id) {
			t.Errorf("IsStepPayload(%s) = %v, %v", payload, got, ok)
		}
	}
	ref, ok := workflow.StepRefOf([]byte(`{"run": {"id": "01890a5d-ac96-774b-bcce-b302099a8057", "step": "b", "index": 3}}`))
	if !ok || ref != (workflow.StepRef{RunID: id, Step: "b", Index: 3}) {
		t.Errorf("StepRefOf = %+v, %v", ref, ok)
	}
}
