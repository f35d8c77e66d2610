package postgres

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestCompileNamed(t *testing.T) {
	t.Parallel()
	p := compileNamed(`SELECT @a, @b_2::int, 'x@a', k.s @> p.s, @a FROM t WHERE x <@ y AND z = @c`)
	require.Equal(t, `SELECT $1, $2::int, 'x@a', k.s @> p.s, $1 FROM t WHERE x <@ y AND z = $3`, p.sql)
	require.Equal(t, []string{"a", "b_2", "c"}, p.names)
	require.Equal(t, []any{1, "two", nil}, p.args(pgx.NamedArgs{"a": 1, "b_2": "two", "unused": 4}))
}

// The hot path's statements rewrite to what pgx.NamedArgs sends.
func TestCompileNamedMatchesPgx(t *testing.T) {
	t.Parallel()
	for name, sql := range map[string]string{
		"judgment":        judgmentInsertSQL,
		"unit finalize":   unitFinalizeSQL,
		"take ordered":    fmt.Sprintf(takeOrderedSQL, openUnit),
		"take random":     fmt.Sprintf(takeRandomSQL, openUnit),
		"take candidates": fmt.Sprintf(takeCandidatesSQL, openUnit),
		"take golden":     fmt.Sprintf(takeOrderedSQL, pickGolden),
	} {
		p := compileNamed(sql)
		args := pgx.NamedArgs{}
		for i, n := range p.names {
			args[n] = i
		}
		want, wantArgs, err := args.RewriteQuery(t.Context(), nil, sql, nil)
		require.NoError(t, err, name)
		require.Equal(t, want, p.sql, name)
		require.Equal(t, wantArgs, p.args(args), name)
	}
}
