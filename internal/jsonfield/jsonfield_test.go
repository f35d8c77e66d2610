package jsonfield

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// The text encoding/json gives an unknown field is what Unknown reads: if
// a Go release words it otherwise, this test fails, not the API's 400s.
func TestUnknownReadsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, want string }{
		{`{"known":1,"nope":2}`, "nope"},
		{`{"":1}`, ""},
		{`{"say \"hi\"":1}`, `say "hi"`},
		{`{"é":1}`, "é"},
	} {
		dec := json.NewDecoder(bytes.NewReader([]byte(tc.body)))
		dec.DisallowUnknownFields()
		var into struct {
			Known int `json:"known"`
		}
		err := dec.Decode(&into)
		name, ok := Unknown(err)
		if !ok || name != tc.want {
			t.Fatalf("%s: Unknown(%v) = %q, %v; want %q, true", tc.body, err, name, ok, tc.want)
		}
	}
	for _, err := range []error{nil, errors.New("json: cannot unmarshal"), &json.SyntaxError{}} {
		if _, ok := Unknown(err); ok {
			t.Fatalf("Unknown(%v) reported an unknown field", err)
		}
	}
}
