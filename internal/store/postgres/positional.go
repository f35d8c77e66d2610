package postgres

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// positional is a statement written with named parameters (@name, as
// pgx.NamedArgs takes them) rewritten once to positional ones ($1, $2, …).
// pgx rewrites a NamedArgs statement on every call, parsing the whole SQL
// text: for the long statements of the crowd hot path (the take, the
// judgment) that was about 7% of the server's CPU.
type positional struct {
	sql   string
	names []string // names[i] is the parameter $i+1
}

// compileNamed rewrites sql's @name parameters to $n; the same name is the
// same $n. Quoted strings are left alone, and so is an @ not followed by a
// letter or _ (the @> and <@ operators).
func compileNamed(sql string) positional {
	var (
		b     strings.Builder
		p     positional
		index = map[string]int{}
	)
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == '\'':
			j := i + 1
			for j < len(sql) && sql[j] != '\'' {
				j++
			}
			b.WriteString(sql[i:min(j+1, len(sql))])
			i = j
		case c == '@' && i+1 < len(sql) && isNameStart(sql[i+1]):
			j := i + 1
			for j < len(sql) && (isNameStart(sql[j]) || sql[j] >= '0' && sql[j] <= '9') {
				j++
			}
			name := sql[i+1 : j]
			n, ok := index[name]
			if !ok {
				p.names = append(p.names, name)
				n = len(p.names)
				index[name] = n
			}
			b.WriteString("$" + strconv.Itoa(n))
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	p.sql = b.String()
	return p
}

func isNameStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// args lays out named in the statement's order; a missing name is NULL,
// as with pgx.NamedArgs.
func (p positional) args(named pgx.NamedArgs) []any {
	out := make([]any, len(p.names))
	for i, n := range p.names {
		out[i] = named[n]
	}
	return out
}
