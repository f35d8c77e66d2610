package workflow

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/flow"
)

// TestPayloadHeadLen: the fan-out bound counts a step job's payload by
// payloadHeadLen without building it, and payload sizes its buffer by
// it: the count is the built length, and the buffer is made once.
func TestPayloadHeadLen(t *testing.T) {
	adv := &advance{run: &flow.Run{ID: uuid.MustParse("0194a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")}}
	in := []byte(`{"input":{"a":[1,2]},"steps":{}}`)
	for _, c := range []struct {
		step  string
		index int
	}{{"a", 0}, {"thumbs", 9}, {"step_with_a_long_name_1", 10}, {"x", 9999}} {
		b := adv.payload(c.step, c.index, in)
		if want := payloadHeadLen(c.step, c.index) + len(in) - 1; len(b) != want || cap(b) != want {
			t.Errorf("%s[%d]: len %d, cap %d, payloadHeadLen gives %d", c.step, c.index, len(b), cap(b), want)
		}
		ref, ok := StepRefOf(b)
		if !ok || ref.RunID != adv.run.ID || ref.Step != c.step || ref.Index != c.index {
			t.Errorf("%s[%d]: %s reads as %+v", c.step, c.index, b, ref)
		}
		if !json.Valid(b) {
			t.Errorf("%s[%d]: %s is not JSON", c.step, c.index, b)
		}
	}
}
