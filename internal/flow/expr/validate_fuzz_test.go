package expr

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/docket-run/docket/internal/flow"
)

// FuzzValidate: arbitrary bytes, decoded and validated with their
// expressions, never panic; every refusal is a *flow.ValidationError with
// at least one problem; a definition that passes evaluates each step's
// expressions against a sample input without panicking, and every failure
// there is an *EvalError.
func FuzzValidate(f *testing.F) {
	if data, err := os.ReadFile("../testdata/product-match.json"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(`{"name":"w","steps":[{"name":"a","job":{"type":"t"}},{"name":"b","after":["a"],"if":"steps.a.output.n > 1","forEach":"steps.a.output.xs","job":{"type":"t"}}]}`))
	f.Add([]byte(`{"name":"w","steps":[{"name":"a","job":{"type":"t"},"if":"[1,2].map(x, x / 0) == []"}]}`))
	f.Add([]byte(`{"name":"w","steps":[{"name":"a","job":{"type":"t"},"forEach":"input.xs.filter(x, item)"}]}`))
	f.Add([]byte(`{"name":"w","steps":[{"name":"a","job":{"type":"t"},"if":"((((((((((((((((1))))))))))))))))"}]}`))
	f.Add([]byte(`{"name":"w","steps":[{"name":"a","human":{"task":"t"}},{"name":"b","after":["a"],"if":"steps.a.confidence < 0.8 || sample(input.n / 10.0) || sample(-1.0)","human":{"task":"q","review":"a"}}]}`))
	f.Add([]byte(`{"name":"w","steps":[{"name":"a","human":{"task":"t"}},{"name":"b","after":["a"],"if":"judges.a.exists(j, j.prior < 5) || judges[\"a\"] == []","human":{"task":"q","review":"a"}}]}`))
	env, err := NewEnv()
	if err != nil {
		f.Fatal(err)
	}
	sample, err := flow.StepInput([]byte(`{"n":3,"xs":[1,"a",{"k":null}],"ok":true}`), nil, nil, &flow.Item{Value: []byte(`{"size":4}`), Index: 1})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		def, err := flow.Decode(data)
		var w *Workflow
		if err == nil {
			w, err = env.Compile(def)
		}
		if err != nil {
			var ve *flow.ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("error %T %v", err, err)
			}
			return
		}
		for _, s := range def.Steps {
			var ee *EvalError
			if _, err := w.Condition(ctx, s.Name, sample); err != nil && !errors.As(err, &ee) {
				t.Fatalf("step %q if: %T %v", s.Name, err, err)
			}
			if s.ForEach != "" {
				if _, err := w.Items(ctx, s.Name, sample); err != nil && !errors.As(err, &ee) {
					t.Fatalf("step %q forEach: %T %v", s.Name, err, err)
				}
			}
		}
	})
}
