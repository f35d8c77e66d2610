package postgres

import (
	"strconv"
	"strings"

	"github.com/docket-run/docket/internal/store"
)

// payloadWindow writes the FROM of a payload search to sql: the newest
// m.Within rows the filters in where select, as j; it returns the
// predicates on the window (the match), to which the caller adds its
// cursor. The path is a chain of -> with text keys, so a key never
// indexes an array (as in SQLite), and the comparison is jsonb equality
// (numbers as numbers). With finished (the filters select finished
// states only) the window's ids come first from the partial index, as
// jobListSQL reads a page of finished jobs.
func payloadWindow(sql *strings.Builder, where []string, m *store.PayloadMatch, finished bool, arg func(any) string) []string {
	filter := ""
	if len(where) > 0 {
		filter = " WHERE " + strings.Join(where, " AND ")
	}
	if finished {
		sql.WriteString("SELECT " + jobColumns + " FROM (SELECT * FROM docket_jobs WHERE id IN (SELECT id FROM docket_jobs" + filter +
			" ORDER BY id DESC LIMIT " + arg(m.Within) + ")) j")
	} else {
		sql.WriteString("SELECT " + jobColumns + " FROM (SELECT * FROM docket_jobs" + filter + " ORDER BY id DESC LIMIT " + arg(m.Within) + ") j")
	}
	v := "payload"
	for _, k := range m.Path {
		v += " -> " + arg(k) + "::text"
	}
	v = "(" + v + ")"
	or := []string{v + " = to_jsonb(" + arg(m.Text) + "::text)"}
	if m.Number != "" && numericFits(m.Number) {
		or = append(or, v+" = "+arg(m.Number)+"::jsonb")
	}
	if m.Literal != "" {
		or = append(or, v+" = "+arg(m.Literal)+"::jsonb")
	}
	return []string{"(" + strings.Join(or, " OR ") + ")"}
}

// Bounds of a PostgreSQL numeric, so of a number in a jsonb payload.
const (
	numericWeightMax = 131072 // digits before the decimal point
	numericScaleMax  = 16383  // digits after it
)

// numericFits reports whether the JSON number n is a value a numeric (so
// a payload) can hold: one beyond (1e200000) is an error of the cast,
// where it can only match nothing.
func numericFits(n string) bool {
	n = strings.TrimPrefix(n, "-")
	mant, exp, _ := strings.Cut(strings.ToLower(n), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return true // zero, whatever its exponent
	}
	e := 0
	if exp != "" {
		var err error
		if e, err = strconv.Atoi(strings.TrimPrefix(exp, "+")); err != nil || e > numericWeightMax || e < -numericWeightMax {
			return false
		}
	}
	weight := len(intPart) + e - (len(intPart+frac) - len(digits)) // digits before the point, leading zeros dropped
	scale := len(frac) - e                                         // digits after it, as written
	return weight <= numericWeightMax && scale <= numericScaleMax
}
