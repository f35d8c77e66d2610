package docket_test

import (
	"strconv"
	"testing"

	"github.com/docket-run/docket"
)

// FuzzParseLeaseID: any string either parses into a job and attempt that,
// formatted back with a token, parse the same, or is refused with a
// ValidationError.
func FuzzParseLeaseID(f *testing.F) {
	for _, s := range []string{"0192f5a0-0000-7000-8000-000000000000.1", "0192f5a0-0000-7000-8000-000000000000.1.AbC-_x", "", ".", "x.1", "0192f5a0-0000-7000-8000-000000000000.-1", "0192f5a0-0000-7000-8000-000000000000.99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, attempt, err := docket.ParseLeaseID(s)
		if err != nil {
			if _, ok := err.(*docket.ValidationError); !ok {
				t.Fatalf("error %T is not a ValidationError", err)
			}
			return
		}
		if attempt < 1 {
			t.Fatalf("attempt %d accepted", attempt)
		}
		id2, attempt2, err := docket.ParseLeaseID(id.String() + "." + strconv.Itoa(attempt) + ".tok")
		if err != nil || id2 != id || attempt2 != attempt {
			t.Fatalf("round trip of %q failed: %v %v %d", s, err, id2, attempt2)
		}
	})
}
