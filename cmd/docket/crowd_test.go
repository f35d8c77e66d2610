package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/api"
	"github.com/docket-run/docket/internal/testdb"
)

const cliTask = `{"title": "Same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true,
             "options": [{"value": "yes"}, {"value": "no"}]}],
 "judgmentsPerUnit": {"min": 3}, "skills": ["en"]}`

// docketCLI runs the docket command in process against url with key.
func docketCLI(t *testing.T, url, key string, args ...string) (string, error) {
	t.Helper()
	cmd := rootCommand()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	full := append([]string{args[0], "--server", url, "--api-key", key}, args[1:]...)
	cmd.SetArgs(full)
	err := cmd.ExecuteContext(context.Background())
	if err != nil {
		err = fmt.Errorf("%w (stderr: %s)", err, stderr.String())
	}
	return stdout.String(), err
}

func TestCLICrowdCommands(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
			require.NoError(t, err)
			t.Cleanup(func() { _ = client.Close() })
			srv := httptest.NewServer(api.New(api.Config{Client: client}))
			t.Cleanup(srv.Close)
			admin, _, err := client.CreateAPIKey(ctx, "admin", docket.RoleAdmin)
			require.NoError(t, err)

			file := filepath.Join(t.TempDir(), "task.json")
			require.NoError(t, os.WriteFile(file, []byte(cliTask), 0o600))
			out, err := docketCLI(t, srv.URL, admin, "task", "put", "same-product", "-f", file)
			require.NoError(t, err)
			require.Contains(t, out, "version 1")
			require.Contains(t, out, "new version")
			out, err = docketCLI(t, srv.URL, admin, "task", "put", "same-product", "-f", file)
			require.NoError(t, err)
			require.Contains(t, out, "unchanged")
			out, err = docketCLI(t, srv.URL, admin, "task", "get", "same-product")
			require.NoError(t, err)
			require.Contains(t, out, `"title": "Same product?"`)
			require.NoError(t, os.WriteFile(file, []byte(`{"title": ""}`), 0o600))
			_, err = docketCLI(t, srv.URL, admin, "task", "put", "bad", "-f", file)
			require.ErrorContains(t, err, "title")

			id, err := docketCLI(t, srv.URL, admin, "contributor", "create", "alice", "--skills", "en")
			require.NoError(t, err)
			id = strings.TrimSpace(id)
			secret, err := docketCLI(t, srv.URL, admin, "contributor", "key", id)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(secret, "dk_"), secret)

			def, err := docket.DecodeWorkflow([]byte(`{"name": "match", "steps": [{"name": "label", "human": {"task": "same-product"}}]}`))
			require.NoError(t, err)
			_, _, err = client.WorkflowPut(ctx, def)
			require.NoError(t, err)
			pool, _, err := client.PoolEnsure(ctx, "match", 1, "label", "same-product")
			require.NoError(t, err)
			inputs := make([]json.RawMessage, 10)
			for i := range inputs {
				inputs[i] = json.RawMessage(fmt.Sprintf(`{"n": %d, "truth": "yes"}`, i))
			}
			_, err = client.UnitsAdd(ctx, pool.ID, inputs)
			require.NoError(t, err)
			pid := pool.ID.String()

			out, err = docketCLI(t, srv.URL, admin, "pool", "list", "--workflow", "match")
			require.NoError(t, err)
			require.Contains(t, out, pid)
			require.Contains(t, out, "OPEN")
			out, err = docketCLI(t, srv.URL, admin, "pool", "pause", pid)
			require.NoError(t, err)
			require.Contains(t, out, "PAUSED")
			out, err = docketCLI(t, srv.URL, admin, "pool", "resume", pid)
			require.NoError(t, err)
			require.Contains(t, out, "OPEN")
			out, err = docketCLI(t, srv.URL, admin, "pool", "get", pid)
			require.NoError(t, err)
			require.Contains(t, out, `"judgable": 10`)

			// Five simulated contributors, always right: every unit is
			// finalized with "yes" after three judgments.
			out, err = docketCLI(t, srv.URL, admin, "crowd", "simulate", "--pool", pid, "--contributors", "5", "--accuracy", "1")
			require.NoError(t, err)
			require.Contains(t, out, "submitted 30 judgments")
			require.Contains(t, out, "30 matching")
			got, err := client.PoolGet(ctx, pool.ID)
			require.NoError(t, err)
			require.Equal(t, 10, got.Counts.Finalized)
			require.Equal(t, 30, got.Counts.Judgments)

			out, err = docketCLI(t, srv.URL, admin, "pool", "export", pid)
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 10)
			for _, l := range lines {
				var line struct {
					Result     map[string]any `json:"result"`
					Confidence float64        `json:"confidence"`
				}
				require.NoError(t, json.Unmarshal([]byte(l), &line))
				require.Equal(t, "yes", line.Result["same"])
				require.Equal(t, 1.0, line.Confidence)
			}
			out, err = docketCLI(t, srv.URL, admin, "pool", "export", pid, "--format", "csv")
			require.NoError(t, err)
			require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 11)
			_, err = docketCLI(t, srv.URL, admin, "pool", "export", pid, "--format", "xml")
			require.ErrorContains(t, err, "400")
		})
	}
}
