package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"os"

	"github.com/spf13/cobra"

	"github.com/docket-run/docket/remote"
)

// ServerDefault is the server the job and worker commands talk to when
// neither --server nor DOCKET_SERVER says otherwise: docket serve's default
// listen address.
const ServerDefault = "http://127.0.0.1:8080"

// apiFlags are --server and --api-key, read from DOCKET_SERVER and
// DOCKET_API_KEY by default.
type apiFlags struct {
	server string
	key    string
}

func addAPIFlags(flags interface {
	StringVar(p *string, name, value, usage string)
}) *apiFlags {
	f := &apiFlags{}
	server := os.Getenv("DOCKET_SERVER")
	if server == "" {
		server = ServerDefault
	}
	flags.StringVar(&f.server, "server", server, "docket server URL (env DOCKET_SERVER)")
	// The key's default is read when used, so --help never shows it.
	flags.StringVar(&f.key, "api-key", "", "API key (env DOCKET_API_KEY)")
	return f
}

// client is the API client of the flags: package remote's, which speaks
// the remote-worker protocol and decodes problems into *remote.Error.
func (f *apiFlags) client() (*remote.Client, error) {
	u, err := url.Parse(f.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErrorf("--server %q: want a URL like %s", f.server, ServerDefault)
	}
	key := f.key
	if key == "" {
		key = os.Getenv("DOCKET_API_KEY")
	}
	if key == "" {
		return nil, usageErrorf("no API key: pass --api-key or set DOCKET_API_KEY (make one with docket keys create)")
	}
	return remote.NewClient(f.server, key, nil)
}

// outputFlag adds -o/--output (table or json).
func outputFlag(cmd *cobra.Command) *string {
	return cmd.PersistentFlags().StringP("output", "o", "table", "output format: table or json")
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return usageErrorf("--output %q: want table or json", o)
	}
	return nil
}

// writeJSON prints a server answer indented.
func writeJSON(w io.Writer, raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}
