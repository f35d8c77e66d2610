package postgres

import (
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
	if m.Number != "" {
		or = append(or, v+" = "+arg(m.Number)+"::jsonb")
	}
	if m.Literal != "" {
		or = append(or, v+" = "+arg(m.Literal)+"::jsonb")
	}
	return []string{"(" + strings.Join(or, " OR ") + ")"}
}
