package docket_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestImportedKeyPrefix: an imported secret is chosen by an operator, so
// at most 4 of its characters are kept as the prefix; a generated one keeps
// 8 ("dk_" and 5 random characters).
func TestImportedKeyPrefix(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		k, err := client.ImportAPIKey(ctx, "ops", docket.RoleAdmin, "correct-horse-battery-staple")
		require.NoError(t, err)
		require.Equal(t, "corr", k.Prefix)
		k, err = client.ImportAPIKey(ctx, "ops", docket.RoleAdmin, "ééééééééééééééééé")
		require.NoError(t, err)
		require.Equal(t, "éééé", k.Prefix, "whole characters")
		secret, k, err := client.CreateAPIKey(ctx, "ci", docket.RoleProducer)
		require.NoError(t, err)
		require.Equal(t, secret[:8], k.Prefix)
		require.True(t, strings.HasPrefix(k.Prefix, "dk_"))
		keys, err := client.APIKeys(ctx)
		require.NoError(t, err)
		prefixes := make([]string, len(keys))
		for i, k := range keys {
			prefixes[i] = k.Prefix
		}
		require.ElementsMatch(t, []string{"corr", "éééé", secret[:8]}, prefixes, "as stored")
	})
}
