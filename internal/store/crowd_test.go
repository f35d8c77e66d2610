package store

import (
	"encoding/json"
	"testing"
)

func TestSameJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"a":1,"b":[1,2]}`, ` { "b" : [1, 2], "a" : 1.0 } `, true},
		{`{"a":1}`, `{"a":2}`, false},
		{`{"a":[1,2]}`, `{"a":[2,1]}`, false},
		{`{"a":null}`, `{}`, false},
		{`"x"`, `"x"`, true},
		{`{`, `{`, false}, // invalid JSON is never the same
	} {
		if got := SameJSON(json.RawMessage(c.a), json.RawMessage(c.b)); got != c.same {
			t.Errorf("SameJSON(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

// FuzzSameJSON: judgment data is untrusted; comparing it never panics, is
// symmetric, and a valid value is the same as itself re-encoded.
func FuzzSameJSON(f *testing.F) {
	f.Add([]byte(`{"same":"yes","boxes":[{"x":0.1}]}`), []byte(`{"same":"no"}`))
	f.Add([]byte(`[1,2,3]`), []byte(`[1, 2, 3]`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		if SameJSON(a, b) != SameJSON(b, a) {
			t.Fatalf("not symmetric: %q %q", a, b)
		}
		var v any
		if json.Unmarshal(a, &v) != nil {
			return
		}
		re, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !SameJSON(a, re) {
			t.Fatalf("%q is not the same as itself re-encoded %q", a, re)
		}
	})
}
