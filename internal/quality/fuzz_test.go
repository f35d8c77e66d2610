package quality

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/docket-run/docket/internal/task"
)

// FuzzSettingsDecode: arbitrary bytes never panic Decode; every refusal is
// a *task.ValidationError with at least one problem, one per key; accepted settings are
// valid and go through their JSON form unchanged.
func FuzzSettingsDecode(f *testing.F) {
	f.Add([]byte(`{"quizSize": 3, "testEvery": 5, "minTrust": 0.7, "minTests": 3, "trustSmoothing": 0.5}`))
	f.Add([]byte(`{"certainty": 0.99, "testEveryTrusted": 30, "minSeconds": 1.5, "tooFastLimit": 2, "patternWindow": 10, "patternMaxShare": 0.8, "patternFirstOption": true, "testFeedback": "verdict"}`))
	f.Add([]byte(`{"quizSize": 1.5, "quizSize": null, "x": {}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"minTrust": 1e400}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(data)
		if err != nil {
			var ve *task.ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("error %T %v", err, err)
			}
			named := map[string]bool{}
			for _, fe := range ve.Errors {
				if named[fe.Field] {
					t.Fatalf("%q named twice: %v", fe.Field, ve.Errors)
				}
				named[fe.Field] = true
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted invalid settings %+v: %v", s, err)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(b)
		if err != nil || again != s {
			t.Fatalf("round trip of %s: %+v, %v", b, again, err)
		}
	})
}
