package sqlite

import (
	"strings"

	"github.com/docket-run/docket/internal/store"
)

// payloadWindow is the query of a payload search: the newest m.Within
// rows the filters in where select, as j, and the match on them as the
// new where (to which the caller adds its cursor). Keys are quoted labels
// of a JSON path ($."a"."b"), so a key never indexes an array (as in
// PostgreSQL); the value's JSON type is checked, so the string "1" is not
// the number 1, and numbers compare as numbers: the number searched is
// cast to NUMERIC (an INTEGER when it is one, 4.2e1 too), so a 64-bit id
// compares exactly, not as its nearest double.
func payloadWindow(where []string, args []any, m *store.PayloadMatch) (string, []string, []any) {
	q := `SELECT ` + jobColumns + ` FROM (SELECT * FROM docket_jobs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY id DESC LIMIT ?) j`
	args = append(args, m.Within)
	var path strings.Builder
	path.WriteString("$")
	for _, k := range m.Path {
		path.WriteString(`."` + k + `"`)
	}
	p := path.String()
	or := []string{"(json_type(payload, ?) = 'text' AND json_extract(payload, ?) = ?)"}
	args = append(args, p, p, m.Text)
	if m.Number != "" {
		or = append(or, "(json_type(payload, ?) IN ('integer', 'real') AND json_extract(payload, ?) = CAST(? AS NUMERIC))")
		args = append(args, p, p, m.Number)
	}
	if m.Literal != "" {
		or = append(or, "json_type(payload, ?) = ?")
		args = append(args, p, m.Literal)
	}
	// A payload SQLite's JSON functions cannot read (nested deeper than
	// 1,000: the API refuses those, but a workflow step's payload wraps
	// its run's input two levels deeper) is not matched, instead of
	// failing the search; CASE, unlike AND, evaluates json_valid first.
	return q, []string{"CASE WHEN json_valid(payload) THEN (" + strings.Join(or, " OR ") + ") ELSE 0 END"}, args
}
