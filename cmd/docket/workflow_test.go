package main

import (
	"bytes"
	"context"
	"encoding/json"
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

const cliWorkflow = `{"name": "product-match",
 "steps": [
  {"name": "fetch",   "job":   {"type": "fetch-pair"}},
  {"name": "label",   "after": ["fetch"], "human": {"task": "same-product"}},
  {"name": "review",  "after": ["label"], "if": "steps.label.confidence < 0.8",
                      "human": {"task": "qa-review"}},
  {"name": "publish", "after": ["label", "review"], "job": {"type": "publish"}}]}`

// cliServer is an API server on a real database, and a key per role.
type cliServer struct {
	url    string
	keys   map[docket.Role]string
	client *docket.Client // the server's
}

func startCLIServer(t *testing.T, backend testdb.Backend) *cliServer {
	t.Helper()
	ctx := context.Background()
	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	srv := httptest.NewServer(api.New(api.Config{Client: client}))
	t.Cleanup(srv.Close)
	s := &cliServer{url: srv.URL, keys: map[docket.Role]string{}, client: client}
	for _, role := range docket.Roles {
		secret, _, err := client.CreateAPIKey(ctx, "cli-"+string(role), role)
		require.NoError(t, err)
		s.keys[role] = secret
	}
	return s
}

type cliResult struct {
	stdout, stderr string
	err            error
}

// run runs docket workflow … in process as role, with stdin.
func (s *cliServer) run(t *testing.T, role docket.Role, stdin string, args ...string) cliResult {
	t.Helper()
	cmd := rootCommand()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(append([]string{"workflow", "--server", s.url, "--api-key", s.keys[role]}, args...))
	err := cmd.ExecuteContext(context.Background())
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

func (s *cliServer) ok(t *testing.T, role docket.Role, stdin string, args ...string) cliResult {
	t.Helper()
	res := s.run(t, role, stdin, args...)
	require.NoError(t, res.err, "docket workflow %s\nstderr: %s", strings.Join(args, " "), res.stderr)
	return res
}

func TestCLIWorkflowCommands(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			s := startCLIServer(t, backend)
			dir := t.TempDir()
			file := filepath.Join(dir, "def.json")
			require.NoError(t, os.WriteFile(file, []byte(cliWorkflow), 0o600))

			// put from a file: a new version.
			res := s.ok(t, docket.RoleProducer, "", "put", "-f", file)
			require.Regexp(t, `(?m)^NAME\s+VERSION\s+STEPS\s+HASH\s+CREATED\s+STORED$`, res.stdout)
			require.Regexp(t, `(?m)^product-match\s+1\s+4\s+sha256:[0-9a-f]{12}\s+\S+\s+new version$`, res.stdout)

			// The same content from stdin: unchanged, version 1.
			res = s.ok(t, docket.RoleProducer, cliWorkflow, "put")
			require.Contains(t, res.stdout, "unchanged (same content as the latest version)")
			var v struct {
				Name    string `json:"name"`
				Version int    `json:"version"`
				Hash    string `json:"hash"`
			}
			res = s.ok(t, docket.RoleProducer, cliWorkflow, "put", "-f", "-", "-o", "json")
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &v), res.stdout)
			require.Equal(t, "product-match", v.Name)
			require.Equal(t, 1, v.Version)

			// A definition without a name needs --name.
			stepsOnly := `{"steps": [{"name": "only", "job": {"type": "t"}}]}`
			res = s.run(t, docket.RoleProducer, stepsOnly, "put")
			require.ErrorContains(t, res.err, `the definition has no "name": add one, or pass --name`)
			res = s.ok(t, docket.RoleProducer, stepsOnly, "put", "--name", "tiny")
			require.Regexp(t, `(?m)^tiny\s+1\s+1\s+`, res.stdout)

			// A changed definition: version 2.
			changed := strings.Replace(cliWorkflow, "< 0.8", "< 0.9", 1)
			res = s.ok(t, docket.RoleAdmin, changed, "put")
			require.Regexp(t, `(?m)^product-match\s+2\s+4\s+.*new version$`, res.stdout)

			// The server's problems, every field named.
			bad := `{"name": "bad", "steps": [{"name": "a", "after": ["ghost"], "job": {"type": "t"}},
			  {"name": "b", "after": ["a"], "forEach": "1", "job": {"type": "t"}}]}`
			res = s.run(t, docket.RoleProducer, bad, "put")
			require.Error(t, res.err)
			require.Contains(t, res.err.Error(), "400")
			require.Contains(t, res.err.Error(), `steps[0].after[0]`)
			require.Contains(t, res.err.Error(), `steps[1].forEach`)
			res = s.run(t, docket.RoleProducer, "{nope", "put")
			require.ErrorContains(t, res.err, "the definition from stdin is not valid JSON")
			res = s.run(t, docket.RoleViewer, cliWorkflow, "put")
			require.ErrorContains(t, res.err, "403")

			// get: the latest, or a version.
			res = s.ok(t, docket.RoleViewer, "", "get", "product-match")
			require.Regexp(t, `(?m)^Version:\s+2$`, res.stdout)
			require.Contains(t, res.stdout, "Definition:\n{")
			require.Contains(t, res.stdout, `< 0.9`)
			res = s.ok(t, docket.RoleViewer, "", "get", "product-match", "--version", "1", "-o", "json")
			var got struct {
				Version    int             `json:"version"`
				Definition json.RawMessage `json:"definition"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
			require.Equal(t, 1, got.Version)
			require.Contains(t, string(got.Definition), `< 0.8`)
			res = s.run(t, docket.RoleViewer, "", "get", "product-match", "--version", "3")
			require.ErrorContains(t, res.err, `workflow "product-match" has no version 3`)
			res = s.run(t, docket.RoleViewer, "", "get", "product-match", "--version", "0")
			require.ErrorContains(t, res.err, "version")

			// The definition that get -o json shows can be put again as is.
			res = s.ok(t, docket.RoleProducer, string(got.Definition), "put")
			require.Regexp(t, `(?m)^product-match\s+3\s+.*new version$`, res.stdout, "version 1's content again is a new version")

			// list, in pages.
			res = s.ok(t, docket.RoleViewer, "", "list")
			require.Regexp(t, `(?m)^NAME\s+VERSION\s+STEPS\s+HASH\s+CREATED$`, res.stdout)
			require.Regexp(t, `(?m)^product-match\s+3\s+4\s+`, res.stdout)
			require.Regexp(t, `(?m)^tiny\s+1\s+1\s+`, res.stdout)
			require.Empty(t, res.stderr)
			res = s.ok(t, docket.RoleViewer, "", "list", "--limit", "1")
			require.NotContains(t, res.stdout, "tiny")
			cursor := strings.TrimSpace(strings.TrimPrefix(res.stderr, "more workflows: add --cursor "))
			require.NotEmpty(t, cursor, res.stderr)
			res = s.ok(t, docket.RoleViewer, "", "list", "--limit", "1", "--cursor", cursor, "-o", "json")
			var page struct {
				Items []struct {
					Name string `json:"name"`
				} `json:"items"`
				NextCursor *string `json:"nextCursor"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &page))
			require.Len(t, page.Items, 1)
			require.Equal(t, "tiny", page.Items[0].Name)
			require.Nil(t, page.NextCursor)
		})
	}
}

func TestReadDefinition(t *testing.T) {
	t.Parallel()
	got, err := readDefinition("-", strings.NewReader(" {\"a\":1}\n"))
	require.NoError(t, err)
	require.Equal(t, `{"a":1}`, string(got))
	path := filepath.Join(t.TempDir(), "d.json")
	require.NoError(t, os.WriteFile(path, []byte(`[1]`), 0o600))
	got, err = readDefinition(path, nil)
	require.NoError(t, err)
	require.Equal(t, `[1]`, string(got))
	_, err = readDefinition(path+".missing", nil)
	require.ErrorContains(t, err, "read the definition")
	_, err = readDefinition("-", strings.NewReader("  "))
	require.ErrorContains(t, err, "the definition from stdin is empty")
	_, err = readDefinition(path, nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, []byte(`{`), 0o600))
	_, err = readDefinition(path, nil)
	require.ErrorContains(t, err, "the definition from "+path+" is not valid JSON")
}
