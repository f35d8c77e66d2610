package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// TestBootstrapKeysWarnsAboutOtherBootstrapKeys: a new DOCKET_ADMIN_KEY
// leaves the previous bootstrap keys valid; every start with it set warns
// about them by id, and revokes nothing.
func TestBootstrapKeysWarnsAboutOtherBootstrapKeys(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
			require.NoError(t, err)
			t.Cleanup(func() { _ = client.Close() })
			// start runs bootstrapKeys as docket serve does and returns the
			// key ids its warning names (nil without one).
			start := func(adminKey string) []string {
				t.Helper()
				var logs bytes.Buffer
				logger := slog.New(slog.NewJSONHandler(&logs, nil))
				require.NoError(t, bootstrapKeys(ctx, client, adminKey, io.Discard, io.Discard, logger))
				for line := range strings.Lines(logs.String()) {
					var rec struct {
						Msg    string   `json:"msg"`
						KeyIDs []string `json:"key_ids"`
					}
					require.NoError(t, json.Unmarshal([]byte(line), &rec))
					if strings.HasPrefix(rec.Msg, "other bootstrap admin keys are still valid") {
						require.Contains(t, rec.Msg, "docket keys revoke")
						return rec.KeyIDs
					}
				}
				return nil
			}
			keyOf := func(secret string) *docket.APIKey {
				t.Helper()
				k, err := client.AuthenticateAPIKey(ctx, secret)
				require.NoError(t, err)
				return k
			}

			require.Nil(t, start(""), "first start: a key is generated")
			keys, err := client.APIKeys(ctx)
			require.NoError(t, err)
			require.Len(t, keys, 1)
			generated := keys[0].ID.String()

			a, b := "first-admin-key-0123456789", "second-admin-key-0123456789"
			require.Equal(t, []string{generated}, start(a))
			require.Equal(t, []string{generated}, start(a), "every start says so")
			require.ElementsMatch(t, []string{generated, keyOf(a).ID.String()}, start(b))
			keyOf(a) // nothing was revoked

			for _, k := range keys {
				require.NoError(t, client.RevokeAPIKey(ctx, k.ID))
			}
			require.NoError(t, client.RevokeAPIKey(ctx, keyOf(a).ID))
			require.Nil(t, start(b), "only the current key is left")
		})
	}
}
