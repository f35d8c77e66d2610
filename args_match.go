package docket

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/docket-run/docket/internal/store"
)

// Bounds of ArgsMatch.
const (
	// ArgsWithinDefault is how many of the newest jobs an ArgsMatch scans
	// when its Within is 0.
	ArgsWithinDefault = 10_000
	// ArgsWithinMax is the most an ArgsMatch may scan.
	ArgsWithinMax = 100_000
	// ArgsPathMax is the most keys an ArgsMatch's Path may have.
	ArgsPathMax = 8
	// argsKeyMax is the longest key, in bytes.
	argsKeyMax = 64
)

// ArgsMatch selects jobs by one value of their payload (their args): the
// value at Path — object keys, outermost first, each of letters, digits,
// '_' and '-' — equals Value as a JSON string; when Value is also a JSON
// number, or true, false or null, a value of that number (compared as a
// number: 42 matches 42.0) or literal matches too. So Value "42" finds
// {"id": 42} and {"id": "42"}, and a key never indexes an array.
//
// Only the newest Within jobs that the other filters of ListParams select
// are scanned (default ArgsWithinDefault, at most ArgsWithinMax): the cost
// of a search is bounded however many jobs there are, and an older job is
// not found. The cursor (Before) and Limit apply to what matched.
type ArgsMatch struct {
	Path  []string
	Value string
	// StringOnly: only the JSON string Value matches ("42" not 42).
	StringOnly bool
	Within     int
}

// ArgsSearchPrefix starts a search by payload value written as text
// (ParseArgsSearch).
const ArgsSearchPrefix = "args."

// ParseArgsSearch reads a search by payload value written as text, as the
// dashboard's jobs list and GET /v1/jobs?search= take it:
// "args.<key>[.<key>…]:<value>" — the keys up to the first colon, the
// value after it (spaces and colons included). A value starting with a
// double quote must be a JSON string and matches strings only
// (args.id:"42" finds "42" but not 42); otherwise it matches the string
// and, when it is one, the number or literal (args.id:42 finds both).
// Within is ArgsWithinDefault. The error says what is wrong, without the
// name of the field the text came in (the caller's).
func ParseArgsSearch(s string) (*ArgsMatch, error) {
	rest, ok := strings.CutPrefix(s, ArgsSearchPrefix)
	if !ok {
		return nil, errors.New("start with args. then the path, a colon and the value (args.user.id:42)")
	}
	path, value, ok := strings.Cut(rest, ":")
	if !ok {
		return nil, errors.New("a colon must separate the path from the value (args.user.id:42)")
	}
	m := &ArgsMatch{Path: strings.Split(path, "."), Value: value, Within: ArgsWithinDefault}
	if strings.HasPrefix(value, `"`) {
		var str string
		if err := json.Unmarshal([]byte(value), &str); err != nil {
			return nil, errors.New(`a value starting with " must be a JSON string ("42")`)
		}
		m.Value, m.StringOnly = str, true
	}
	if err := m.Validate(); err != nil {
		var verr *ValidationError
		if errors.As(err, &verr) {
			return nil, errors.New(strings.TrimPrefix(verr.Field, "args.") + " " + verr.Message)
		}
		return nil, err
	}
	return m, nil
}

// Validate names the wrong field of m in a *ValidationError (joined when
// several are wrong).
func (m *ArgsMatch) Validate() error {
	var errs []error
	if len(m.Path) == 0 || len(m.Path) > ArgsPathMax {
		errs = append(errs, &ValidationError{Field: "args.path", Message: fmt.Sprintf("must have 1 to %d keys", ArgsPathMax)})
	}
	for _, k := range m.Path {
		if !validArgsKey(k) {
			errs = append(errs, &ValidationError{Field: "args.path", Message: fmt.Sprintf("key %q: keys are 1 to %d ASCII letters, digits, '_' or '-'", k, argsKeyMax)})
			break
		}
	}
	if !utf8.ValidString(m.Value) || strings.ContainsRune(m.Value, 0) {
		// No payload holds such a string (PostgreSQL's text cannot).
		errs = append(errs, &ValidationError{Field: "args.value", Message: "must be UTF-8 text without NUL"})
	}
	if m.Within < 0 || m.Within > ArgsWithinMax {
		errs = append(errs, &ValidationError{Field: "args.within", Message: fmt.Sprintf("must be from 0 (the default, %d) to %d", ArgsWithinDefault, ArgsWithinMax)})
	}
	return errors.Join(errs...)
}

func validArgsKey(k string) bool {
	if k == "" || len(k) > argsKeyMax {
		return false
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// storeMatch is m as the store's filter; m is valid.
func (m *ArgsMatch) storeMatch() *store.PayloadMatch {
	p := &store.PayloadMatch{Path: m.Path, Text: m.Value, Within: m.Within}
	if p.Within == 0 {
		p.Within = ArgsWithinDefault
	}
	switch v := strings.TrimSpace(m.Value); {
	case m.StringOnly:
	case v == "true" || v == "false" || v == "null":
		p.Literal = v
	case v != "" && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') && json.Valid([]byte(v)):
		p.Number = v
	}
	return p
}
