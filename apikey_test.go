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

// TestCreateWorkerKey: a worker key scoped to queues keeps them (a repeat
// once) on every read, authentication included; no queue, too many, or a
// bad name is refused naming the field, nothing written; other keys have
// none.
func TestCreateWorkerKey(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		secret, k, err := client.CreateWorkerKey(ctx, "thumbs", []string{"images", "video", "images"})
		require.NoError(t, err)
		require.Equal(t, docket.RoleWorker, k.Role)
		require.Equal(t, []string{"images", "video"}, k.Queues)
		require.True(t, k.MayLease("video"))
		require.False(t, k.MayLease("mail"))
		got, err := client.AuthenticateAPIKey(ctx, secret)
		require.NoError(t, err)
		require.Equal(t, k.Queues, got.Queues)
		many, err := client.AuthenticateAPIKeys(ctx, []string{secret})
		require.NoError(t, err)
		require.Equal(t, k.Queues, many[secret].Queues)
		anySecret, anyKey, err := client.CreateAPIKey(ctx, "all", docket.RoleWorker)
		require.NoError(t, err)
		require.Nil(t, anyKey.Queues)
		require.True(t, anyKey.MayLease("mail"))
		got, err = client.AuthenticateAPIKey(ctx, anySecret)
		require.NoError(t, err)
		require.Nil(t, got.Queues)
		keys, err := client.APIKeys(ctx)
		require.NoError(t, err)
		require.Len(t, keys, 2)
		require.Equal(t, []string{"images", "video"}, keys[0].Queues)
		require.Nil(t, keys[1].Queues)

		for _, tc := range []struct {
			queues []string
			fields []string
		}{
			{nil, []string{"queues"}},
			{[]string{}, []string{"queues"}},
			{make([]string, docket.LeaseMaxQueues+1), []string{"queues"}},
			{[]string{"ok", "bad name", ""}, []string{"queues[1]", "queues[2]"}},
		} {
			_, _, err := client.CreateWorkerKey(ctx, "bad", tc.queues)
			require.Equal(t, tc.fields, validationFields(t, err), "%q", tc.queues)
		}
		keys, err = client.APIKeys(ctx)
		require.NoError(t, err)
		require.Len(t, keys, 2, "nothing written")
	})
}
