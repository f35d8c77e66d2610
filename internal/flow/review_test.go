package flow

import (
	"strings"
	"testing"
)

// TestReviewValidation: each wrong `review` is named by its field and
// step, and every one of them is listed.
func TestReviewValidation(t *testing.T) {
	t.Parallel()
	type want struct{ field, message string }
	const label = `{"name":"label","human":{"task":"t"}}`
	cases := []struct {
		name string
		doc  string
		want []want
	}{
		{"valid", `{"name":"w","steps":[` + label + `,{"name":"mid","after":["label"],"job":{"type":"j"}},{"name":"qa","after":["mid"],"human":{"task":"r","review":"label"}}]}`, nil},
		{"unknown", `{"name":"w","steps":[` + label + `,{"name":"qa","after":["label"],"human":{"task":"r","review":"lable"}}]}`,
			[]want{{"steps[1].human.review", `step "qa": review names unknown step "lable"`}}},
		{"not human", `{"name":"w","steps":[{"name":"fetch","job":{"type":"j"}},{"name":"qa","after":["fetch"],"human":{"task":"r","review":"fetch"}}]}`,
			[]want{{"steps[1].human.review", `step "qa": review names step "fetch", which is not a human step`}}},
		{"not an ancestor", `{"name":"w","steps":[` + label + `,{"name":"qa","human":{"task":"r","review":"label"}}]}`,
			[]want{{"steps[1].human.review", `step "qa": review names step "label", which is not an ancestor of "qa" (add it to after)`}}},
		{"a descendant", `{"name":"w","steps":[{"name":"qa","human":{"task":"r","review":"label"}},{"name":"label","after":["qa"],"human":{"task":"t"}}]}`,
			[]want{{"steps[0].human.review", `which is not an ancestor of "qa"`}}},
		{"itself", `{"name":"w","steps":[{"name":"qa","human":{"task":"r","review":"qa"}}]}`,
			[]want{{"steps[0].human.review", `step "qa": a step cannot review itself`}}},
		{"review of a review and twice", `{"name":"w","steps":[` + label + `,{"name":"qa","after":["label"],"human":{"task":"r","review":"label"}},{"name":"qa2","after":["qa"],"human":{"task":"r","review":"qa"}},{"name":"qa3","after":["label"],"human":{"task":"r","review":"label"}}]}`,
			[]want{
				{"steps[2].human.review", `step "qa2": review names step "qa", which is a review step itself`},
				{"steps[3].human.review", `step "qa3": step "label" is reviewed by step "qa" already`},
			}},
		{"fan-out", `{"name":"w","steps":[{"name":"label","forEach":"[1,2]","human":{"task":"t"}},{"name":"qa","after":["label"],"forEach":"[1]","human":{"task":"r","review":"label"}}]}`,
			[]want{
				{"steps[1].human.review", `step "qa": a review step cannot fan out`},
				{"steps[1].human.review", `review names step "label", which fans out`},
			}},
		{"with a cycle, no ancestor check", `{"name":"w","steps":[{"name":"label","after":["qa"],"human":{"task":"t"}},{"name":"qa","after":["label"],"human":{"task":"r","review":"label"}}]}`,
			[]want{{"steps[1].after[0]", "makes a cycle"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := problems(t, tc.doc)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				if got[i].Field != w.field || !strings.Contains(got[i].Message, w.message) {
					t.Errorf("problem %d = %+v, want field %q and message containing %q", i, got[i], w.field, w.message)
				}
			}
		})
	}
}

// TestReviewChangesTheHash: `review` changes what a step does, so it is
// part of the definition's canonical form.
func TestReviewChangesTheHash(t *testing.T) {
	t.Parallel()
	a, err := Decode([]byte(`{"name":"w","steps":[{"name":"label","human":{"task":"t"}},{"name":"qa","after":["label"],"human":{"task":"r"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Decode([]byte(`{"name":"w","steps":[{"name":"label","human":{"task":"t"}},{"name":"qa","after":["label"],"human":{"task":"r","review":"label"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	ha, err := Hash(a)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := Hash(b)
	if err != nil {
		t.Fatal(err)
	}
	if ha == hb {
		t.Fatalf("the hash %s does not see review", ha)
	}
}
