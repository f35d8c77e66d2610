package store

// The text and JSON the databases can store, checked the same way for
// every backend: what PostgreSQL refuses (NUL, bytes that are not UTF-8,
// unpaired surrogate escapes in jsonb) and SQLite's JSON functions cannot
// read (nesting over 1,000) is refused at the edge, never in the middle of
// a batch, or cleaned (CleanText) where the text is a message that must
// not be lost.

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/docket-run/docket/internal/crowd"
)

// JSONUnstorable says why PostgreSQL's jsonb could not store a valid JSON
// text, or returns "" when it can: a string or key holding U+0000, an
// unpaired UTF-16 surrogate escape ("\ud800"), or bytes that are not UTF-8
// (encoding/json passes a json.RawMessage through unchecked). docket
// refuses such a text on every backend alike — at the edge, never in the
// middle of a batch. It refuses a number of more than JSONNumberDigitsMax
// digits written out in full too (numberTooLong).
func JSONUnstorable(data []byte) string {
	if !utf8.Valid(data) {
		return UTF8Message
	}
	if tooDeep(data) {
		return DepthMessage
	}
	if numberTooLong(data) {
		return NumberMessage
	}
	if !bytes.Contains(data, []byte(`\u`)) {
		return "" // NUL and surrogates can only be written as escapes
	}
	// In valid JSON a backslash appears only in a string, as an escape.
	for i := 0; i < len(data)-1; i++ {
		if data[i] != '\\' {
			continue
		}
		i++
		if data[i] != 'u' {
			continue
		}
		r, ok := hex4(data[i+1:])
		if !ok {
			continue
		}
		i += 4
		switch {
		case r == 0:
			return NULMessage
		case r >= 0xdc00 && r <= 0xdfff:
			return SurrogateMessage // a low half without a high one
		case r >= 0xd800 && r <= 0xdbff:
			// A high half must be followed by a low half.
			if len(data) < i+7 || data[i+1] != '\\' || data[i+2] != 'u' {
				return SurrogateMessage
			}
			lo, ok := hex4(data[i+3:])
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return SurrogateMessage
			}
			i += 6
		}
	}
	return ""
}

// JSONDepthMax is how deeply a payload, result or run input may nest
// objects and arrays: SQLite's JSON functions refuse deeper text
// ("malformed JSON"), so one such payload made every jobs search that read
// it fail.
const JSONDepthMax = 1000

// tooDeep reports whether valid JSON text nests objects and arrays more
// than JSONDepthMax deep. Only a text with that many brackets is walked.
func tooDeep(data []byte) bool {
	if bytes.Count(data, []byte("{"))+bytes.Count(data, []byte("[")) <= JSONDepthMax {
		return false
	}
	depth, inString := 0, false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case inString:
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > JSONDepthMax {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// JSONNumberDigitsMax is how many digits a number of a payload, result
// or run input may have written out in full, as PostgreSQL's jsonb keeps
// it (a numeric, printed without exponent): 1e131072 failed the insert
// (numeric overflow, a 500), and 1e131071, eight bytes, came back from
// every read as 131,072 digits, so that a 13 KB payload made a lease
// answer of 196 MB. 400 holds every float64, the smallest subnormal
// printed in full included (341 digits).
const JSONNumberDigitsMax = 400

// numberTooLong reports whether valid JSON text holds a number of more
// than JSONNumberDigitsMax digits written out in full. Only a text with an
// exponent, or a long run of digits, is walked.
func numberTooLong(data []byte) bool {
	if !numberSuspect(data) {
		return false
	}
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case inString:
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '-' || c >= '0' && c <= '9':
			n, end := numberDigits(data[i:])
			if n > JSONNumberDigitsMax {
				return true
			}
			i += end - 1
		}
	}
	return false
}

// numberSuspect is the fast look of numberTooLong: whether data has a
// digit followed by an exponent's e, or more than JSONNumberDigitsMax
// digits and points in a row (in a string or not).
func numberSuspect(data []byte) bool {
	run := 0
	for _, c := range data {
		switch {
		case c >= '0' && c <= '9' || c == '.':
			if run++; run > JSONNumberDigitsMax {
				return true
			}
		case (c == 'e' || c == 'E') && run > 0:
			return true
		default:
			run = 0
		}
	}
	return false
}

// numberDigits reads the JSON number at the start of b and returns how
// many digits PostgreSQL prints it with (its numeric: the integer digits,
// at least one, and as many after the point as the text has there minus
// its exponent), and the number's length in b. An exponent beyond
// ±1,000,000,000 is too long even on a zero (PostgreSQL refuses it:
// numeric overflow), and saturates.
func numberDigits(b []byte) (digits int64, end int) {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	var intLen, fracLen, zeros int64 // zeros: leading zeros of all digits
	significant := false
	digit := func() {
		if b[i] != '0' {
			significant = true
		} else if !significant {
			zeros++
		}
		i++
	}
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		digit()
		intLen++
	}
	if i < len(b) && b[i] == '.' {
		i++
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			digit()
			fracLen++
		}
	}
	var exp int64
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		neg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			neg = b[i] == '-'
			i++
		}
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			exp = min(exp*10+int64(b[i]-'0'), 1<<40)
		}
		if neg {
			exp = -exp
		}
	}
	if exp > 1e9 || exp < -1e9 {
		return 1 << 40, i
	}
	intDigits := int64(1)
	if significant {
		// The power of ten of the first significant digit, plus one.
		intDigits = max(intLen-zeros+exp, 1)
	}
	return intDigits + max(fracLen-exp, 0), i
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// What JSONUnstorable returns.
const (
	NULMessage       = `must not contain the NUL character (\u0000) in a string`
	SurrogateMessage = `must not contain an unpaired UTF-16 surrogate escape (\ud800 … \udfff) in a string`
	UTF8Message      = "must be valid UTF-8"
	DepthMessage     = "must not nest objects and arrays more than 1000 deep"
	NumberMessage    = "must not contain a number of more than 400 digits written out in full (1e400 has 401)"
)

// TextStorable reports whether PostgreSQL can store s as text: UTF-8
// without NUL.
func TextStorable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// TextMessage refuses text TextStorable does not take.
const TextMessage = "must be UTF-8 text without the NUL character"

// checkText names field in pr when s is not text TextStorable takes:
// every params type whose strings reach a statement (a name, a filter, a
// cursor) checks them in its Validate, so that every entry point, the Go
// API's as well as the HTTP API's, refuses them alike on both backends
// (PostgreSQL would fail the statement, SQLite find nothing or store it).
func checkText(pr *crowd.Problems, field, s string) {
	pr.Check(!TextStorable(s), field, "%s", TextMessage)
}

// checkTexts is checkText for each of ss, named field[i].
func checkTexts(pr *crowd.Problems, field string, ss []string) {
	for i, s := range ss {
		checkText(pr, fmt.Sprintf("%s[%d]", field, i), s)
	}
}

// CleanText is s with each NUL and each byte that is not part of valid
// UTF-8 replaced by U+FFFD; s itself when TextStorable(s). It keeps a
// message that must not be lost for what it holds (an attempt's error, a
// progress message, a webhook receiver's answer).
func CleanText(s string) string {
	if TextStorable(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range s { // an invalid byte is one utf8.RuneError
		if r == 0 {
			r = utf8.RuneError
		}
		b.WriteRune(r)
	}
	return b.String()
}
