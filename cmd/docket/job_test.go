package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/api"
)

func TestReadPayload(t *testing.T) {
	t.Parallel()
	got, err := readPayload(` {"a":1} `, nil)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1}`, string(got))

	got, err = readPayload("-", strings.NewReader("[1,2]\n"))
	require.NoError(t, err)
	require.Equal(t, "[1,2]", string(got))

	path := filepath.Join(t.TempDir(), "p.json")
	require.NoError(t, os.WriteFile(path, []byte(`"text"`), 0o600))
	got, err = readPayload("@"+path, nil)
	require.NoError(t, err)
	require.Equal(t, `"text"`, string(got))

	_, err = readPayload("{nope", nil)
	require.ErrorContains(t, err, "payload from PAYLOAD is not valid JSON")
	_, err = readPayload("@"+path+".missing", nil)
	require.ErrorContains(t, err, "read payload")
}

func TestAPIFlagsNeedAKeyAndAURL(t *testing.T) {
	t.Setenv("DOCKET_API_KEY", "")
	_, err := (&apiFlags{server: ServerDefault}).client()
	require.ErrorContains(t, err, "no API key")
	_, err = (&apiFlags{server: "127.0.0.1:8080", key: "k"}).client()
	require.ErrorContains(t, err, "--server")
	t.Setenv("DOCKET_API_KEY", "from-env")
	c, err := (&apiFlags{server: "http://h:1/"}).client()
	require.NoError(t, err)
	require.Equal(t, "http://h:1", c.BaseURL())
}

// docket job list --help states the server's page sizes.
func TestJobListLimitHelp(t *testing.T) {
	t.Parallel()
	cmd, _, err := rootCommand().Find([]string{"job", "list"})
	require.NoError(t, err)
	usage := cmd.Flags().Lookup("limit").Usage
	require.Contains(t, usage, fmt.Sprintf("server default %d, at most %d", api.ListLimitDefault, api.ListLimitMax))
}
