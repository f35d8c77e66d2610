package flow

import (
	"errors"
	"os"
	"testing"
)

// FuzzDecodeValidate: arbitrary bytes never panic Decode, Validate,
// NewGraph or Hash; every refusal is a *ValidationError with at least one
// problem; a valid definition's canonical form decodes to a valid
// definition with the same hash.
func FuzzDecodeValidate(f *testing.F) {
	if data, err := os.ReadFile("testdata/product-match.json"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(`{"name":"w","steps":[{"name":"a","after":["b"],"job":{"type":"t"}},{"name":"b","after":["a"],"signal":{}}]}`))
	f.Add([]byte(`{"name":"w","steps":[{"name":"a","human":{"task":"x","overrides":{"k":1e400}}}]}`))
	f.Add([]byte(`{"name":"w","steps":[{"name":"a","job":{"type":"t","timeout":"9999999999h"}}]}`))
	f.Add([]byte(`{"name":"w","steps":[{"name":"l","human":{"task":"x"}},{"name":"r","after":["l"],"human":{"task":"q","review":"l"}},{"name":"s","human":{"task":"q","review":"s"}}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"steps":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		def, err := Decode(data)
		if err == nil {
			err = Validate(def)
		}
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("error %T %v", err, err)
			}
			return
		}
		g, err := NewGraph(def)
		if err != nil {
			t.Fatalf("valid definition, NewGraph: %v", err)
		}
		if len(g.Order()) != len(def.Steps) {
			t.Fatal("order misses steps")
		}
		canon, err := Canonical(def)
		if err != nil {
			t.Fatalf("Canonical: %v", err)
		}
		again, err := Decode(canon)
		if err != nil {
			t.Fatalf("canonical form %s does not decode: %v", canon, err)
		}
		if err := Validate(again); err != nil {
			t.Fatalf("canonical form %s is invalid: %v", canon, err)
		}
		h1, _ := Hash(def)
		h2, _ := Hash(again)
		if h1 != h2 {
			t.Fatalf("hash changed through the canonical form %s", canon)
		}
	})
}
