package postgres

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNumericFits: numericFits says yes exactly when PostgreSQL casts the
// number to jsonb, at the bounds of a numeric on both sides.
func TestNumericFits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, n := range []string{
		"0", "-0", "42", "4.2e1", "0.0e999999", "1e131071", "9.9e131071", "123.456e131069", "1e131072", "-1e200000",
		"1e-16383", "1.5e-16382", "1.55e-16382", "1e-16384", "0.000123", "1E+5", "1e99999999999999999999",
	} {
		var ok bool
		err := b.s.pool.QueryRow(context.Background(), `SELECT $1::text::jsonb IS NOT NULL`, n).Scan(&ok)
		require.Equal(t, err == nil, numericFits(n), "%s: PostgreSQL says %v", n, err)
	}
}
