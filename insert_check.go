package docket

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/store"
)

// ValidateInsert checks one job exactly as Insert would, without writing
// anything. The error is a *ValidationError naming the field, or, when
// several fields are invalid, an errors.Join of one per field. No clock is
// read: the time only fills the default RunAt, which is not checked.
func ValidateInsert(args JobArgs, opts *InsertOpts) error {
	var p store.JobInsertParams
	return insertParams(&p, uuid.Nil, args, opts, noClock)
}

// noClock stands for "now" where the result does not depend on it, so that
// nothing outside Config.Now reads the time.
var noClock time.Time

// CheckName checks a job type or queue name as Insert does: 1..128 bytes of
// letters, digits and . _ - : /. The error is a *ValidationError naming
// field.
func CheckName(field, name string) error { return validName(field, name) }

// CheckText checks text as every backend can store it (a name, a filter,
// a cursor): UTF-8 without the NUL character. The error is a
// *ValidationError naming field.
func CheckText(field, s string) error {
	if store.TextStorable(s) {
		return nil
	}
	return &ValidationError{Field: field, Message: store.TextMessage}
}

// InsertConflict compares existing, the job that holds an idempotency key,
// with a repeated insert of that key (args and opts, defaults applied as
// Insert applies them). It returns "" when the insert asks for the same job
// and otherwise the first field that differs: "jobType", "payload",
// "queue", "priority", "maxAttempts", "timeout" or "runAt". Payloads are
// compared as JSON values (key order, spacing and number spelling do not
// matter); RunAt is compared only when opts sets it, since its default,
// "now", differs on every call.
func InsertConflict(existing *JobRow, args JobArgs, opts *InsertOpts) (string, error) {
	var p store.JobInsertParams
	if err := insertParams(&p, uuid.Nil, args, opts, noClock); err != nil { // RunAt's default is not compared
		return "", err
	}
	switch {
	case p.Type != existing.Type:
		return "jobType", nil
	case !jsonEqual(p.Payload, existing.Payload):
		return "payload", nil
	case p.Queue != existing.Queue:
		return "queue", nil
	case p.Priority != existing.Priority:
		return "priority", nil
	case p.MaxAttempts != existing.MaxAttempts:
		return "maxAttempts", nil
	case p.Timeout.Milliseconds() != existing.Timeout.Milliseconds():
		return "timeout", nil
	case opts != nil && !opts.RunAt.IsZero() && !sameMicrosecond(opts.RunAt, existing.RunAt):
		return "runAt", nil
	}
	return "", nil
}

// sameMicrosecond: the databases keep timestamps to the microsecond.
func sameMicrosecond(a, b time.Time) bool {
	d := a.Sub(b)
	return d > -time.Microsecond && d < time.Microsecond
}

// jsonEqual reports whether a and b encode the same JSON value. Numbers are
// compared exactly, so 1, 1.0 and 1e0 are equal and large integers are not
// rounded.
func jsonEqual(a, b []byte) bool {
	va, errA := decodeJSONValue(a)
	vb, errB := decodeJSONValue(b)
	return errA == nil && errB == nil && jsonValueEqual(va, vb)
}

func decodeJSONValue(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func jsonValueEqual(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !jsonValueEqual(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !jsonValueEqual(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		if a == b {
			return true
		}
		ca, okA := canonicalNumber(string(a))
		cb, okB := canonicalNumber(string(b))
		return okA && okB && ca == cb
	default: // string, bool, nil
		return a == b
	}
}

// canonicalNumber spells a JSON number as sign, significant digits and
// exponent ("-12e-1" for -1.20), so equal values have equal spellings. It
// does no arithmetic, so a huge exponent in untrusted input costs nothing.
func canonicalNumber(s string) (string, bool) {
	sign := ""
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		sign, s = "-", rest
	}
	mant, expPart, hasExp := strings.Cut(strings.ToLower(s), "e")
	exp := int64(0)
	if hasExp {
		e, err := strconv.ParseInt(expPart, 10, 64)
		if err != nil || e > 1<<40 || e < -(1<<40) {
			return "", false
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	if trimmed == "" {
		return "0", true // -0 == 0
	}
	return sign + trimmed + "e" + strconv.FormatInt(exp, 10), true
}
