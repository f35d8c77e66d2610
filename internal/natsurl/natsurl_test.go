package natsurl

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRedact: no password or token of a NATS URL list reaches a log
// or an error, the malformed URLs included (no user parsed, but an '@':
// what comes before it is masked whole).
func TestRedact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"nats://a:4222", "nats://a:4222"},
		{"nats://alice:pw@a:4222", "nats://alice:xxxxx@a:4222"},
		{"nats://tok@a:4222", "nats://xxxxx@a:4222"},
		{"alice:pw@a:4222", "xxxxx@a:4222"},
		{"nats//alice:pw@a:4222", "xxxxx@a:4222"},
		{"nats:/alice:pw@a:4222", "xxxxx@a:4222"},
		{"nats://a:4222, nats:/alice:pw@b:4222", "nats://a:4222,xxxxx@b:4222"},
		{"nats://a b:pw@c:4222", "(a URL that does not parse)"},
		{"nats://", "nats://"},
	} {
		got := Redact(c.in)
		require.Equal(t, c.want, got, c.in)
		require.False(t, strings.Contains(got, "pw") || strings.Contains(got, "tok"), got)
	}
}
