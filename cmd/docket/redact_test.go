package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRedactNATSURLs: serve's error about a wrong NATS URL shows no
// password or token, the malformed URLs included (no user parsed, but an
// '@': what comes before it is masked whole), which are the ones it
// reports.
func TestRedactNATSURLs(t *testing.T) {
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
	} {
		got := redactNATSURLs(c.in)
		require.Equal(t, c.want, got, c.in)
		require.False(t, strings.Contains(got, "pw") || strings.Contains(got, "tok"), got)
	}
}
