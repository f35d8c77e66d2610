package store

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzJSONUnstorable: on valid JSON, JSONUnstorable never panics, refuses
// every text holding a NUL or a replacement-decoded surrogate in a string
// or key, and passes every UTF-8 text without them that nests at most
// JSONDepthMax deep.
func FuzzJSONUnstorable(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"\u0000"}`, `"\ud800"`, `"\ud83d\ude00"`, `"\\u0000"`, `[[[]]]`, `{"\u0000":1}`, "\"\xff\"", `"\udc00\ud800"`, `1e400`, `[0.5e-399]`, `{"e":"1e999"}`, `-0.0001e+3`} {
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
		if msg == NumberMessage && !hasLongNumber(data) {
			t.Fatalf("%q refused for a long number it does not hold", data)
		}
		if msg == "" && hasLongNumber(data) {
			t.Fatalf("%q holds a number longer than %d digits and was passed", data, JSONNumberDigitsMax)
		}
	})
}

// hasLongNumber: whether a number of data has more than JSONNumberDigitsMax
// digits written out in full, found by the decoder and counted apart from
// numberDigits: its digits with the point moved by the exponent.
func hasLongNumber(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if n, ok := tok.(json.Number); ok && fullDigits(string(n)) > JSONNumberDigitsMax {
			return true
		}
	}
}

func fullDigits(n string) int {
	n = strings.TrimPrefix(n, "-")
	mantissa, exponent, _ := strings.Cut(strings.ToLower(n), "e")
	exp, err := strconv.Atoi(exponent)
	if exponent != "" && (err != nil || exp > 1e9 || exp < -1e9) {
		return JSONNumberDigitsMax + 1 // PostgreSQL refuses it, even on a zero
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" { // zero: its digits after the point only
		return 1 + max(len(frac)-exp, 0)
	}
	// Point after position len(whole)+exp of whole+frac.
	point := len(whole) + exp - (len(whole+frac) - len(digits))
	return max(point, 1) + max(len(frac)-exp, 0)
}

// TestJSONNumberDigits: a number is measured as PostgreSQL prints it, the
// exponent applied; at most JSONNumberDigitsMax digits pass.
func TestJSONNumberDigits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		num  string
		want int64
	}{
		{"0", 1}, {"-0", 1}, {"7", 1}, {"100", 3}, {"1e3", 4}, {"123.45e1", 5}, {"0.00012", 6}, {"0.00012e3", 3},
		{"1.50e1", 3}, {"0e5", 1}, {"0.0e-3", 5}, {"1e400", 401}, {"1e-400", 401}, {"-1E+399", 400},
		{"1e131072", 131073}, {"1e99999999999999999999", 1 << 40}, {"1.7976931348623157e308", 309},
		{"4.9406564584124654e-324", 341},
	} {
		got, end := numberDigits([]byte(tc.num + ","))
		if got < tc.want || (tc.want < 1<<40 && got != tc.want) || end != len(tc.num) {
			t.Errorf("%s: %d digits, end %d; want %d, %d", tc.num, got, end, tc.want, len(tc.num))
		}
		if tc.want < 1<<40 && int64(fullDigits(tc.num)) != tc.want {
			t.Errorf("%s: the test's count %d, want %d", tc.num, fullDigits(tc.num), tc.want)
		}
	}
	for _, ok := range []string{`1e399`, `[1.7976931348623157e308, 5e-324, -4.9406564584124654e-324]`, `"1e999"`, `{"1e999":1}`,
		strings.Repeat("9", 400), `"` + strings.Repeat("9", 500) + `"`, `0.` + strings.Repeat("0", 398), `0e1000000000`} {
		if msg := JSONUnstorable([]byte(ok)); msg != "" {
			t.Errorf("%.60s: refused: %s", ok, msg)
		}
	}
	for _, bad := range []string{`1e400`, `{"a":[1,2,{"b":1e131072}]}`, `1e-400`, `-1E+400`, strings.Repeat("9", 401),
		`0.` + strings.Repeat("0", 400), `12345.` + strings.Repeat("6", 396), `1e99999999999999999999`, `0e10000000000000000000`, `-0.0E-1000000001`} {
		if msg := JSONUnstorable([]byte(bad)); msg != NumberMessage {
			t.Errorf("%.60s: %q, want %q", bad, msg, NumberMessage)
		}
	}
}
