package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/docket-run/docket/internal/api"
	"github.com/docket-run/docket/remote"
)

// The workflow commands talk to a running server over HTTP, like the job
// commands: the server validates definitions (expressions included).

// workflowView is a stored version of a definition as the API shows it.
type workflowView struct {
	Name       string    `json:"name"`
	Version    int       `json:"version"`
	Hash       string    `json:"hash"`
	CreatedAt  time.Time `json:"createdAt"`
	Definition struct {
		Steps []json.RawMessage `json:"steps"`
	} `json:"definition"`
}

type workflowPage struct {
	Items      []workflowView `json:"items"`
	NextCursor *string        `json:"nextCursor"`
}

func workflowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Store and read workflow definitions on a docket server",
		Long: "Store and read workflow definitions (docs/workflows.md) on a running docket server\n" +
			"over its HTTP API. The server is --server (env DOCKET_SERVER, default " + ServerDefault + ");\n" +
			"the key is --api-key (env DOCKET_API_KEY). Errors from the server are printed as\n" +
			"\"docket: <status> <title>: <detail> (field: message)\" and exit with status 1.",
	}
	flags := addAPIFlags(cmd.PersistentFlags())
	output := outputFlag(cmd)
	run := func(fn func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(*output); err != nil {
				return err
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			return fn(cmd.Context(), c, cmd.OutOrStdout(), args)
		}
	}
	cmd.AddCommand(workflowPutCommand(run, output), workflowGetCommand(run, output), workflowListCommand(run, output))
	return cmd
}

func workflowPutCommand(run runFunc, output *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "put [-f FILE]",
		Short: "Store a workflow definition (a new version when it changed)",
		Long: "Store a workflow definition, JSON as in docs/workflows.md, read from FILE (-f) or\n" +
			"stdin (no -f, or -f -). The server checks it completely, expressions included, and\n" +
			"stores a new version when its content changed; the same content again stores\n" +
			"nothing and shows the latest version (STORED says which). The workflow is the\n" +
			"definition's \"name\", or --name when the definition has none.",
		Example: `  docket workflow put -f product-match.json
  cat product-match.json | docket workflow put -o json
  docket workflow put -f steps-only.json --name product-match`,
		Args: cobra.NoArgs,
	}
	file := cmd.Flags().StringP("file", "f", "-", "the definition's file; - for stdin")
	name := cmd.Flags().String("name", "", "the workflow's name, when the definition has none (if it has one, they must agree)")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, _ []string) error {
		def, err := readDefinition(*file, cmd.InOrStdin())
		if err != nil {
			return err
		}
		target := *name
		if target == "" {
			var named struct {
				Name any `json:"name"`
			}
			_ = json.Unmarshal(def, &named)
			s, ok := named.Name.(string)
			if !ok || s == "" {
				return errors.New("the definition has no \"name\": add one, or pass --name")
			}
			target = s
		}
		var raw json.RawMessage
		status, err := c.DoStatus(ctx, "PUT", "/v1/workflows/"+url.PathEscape(target), def, &raw)
		if err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(out, raw)
		}
		var v workflowView
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
		stored := "unchanged (same content as the latest version)"
		if status == http.StatusCreated {
			stored = "new version"
		}
		return printWorkflowTable(out, []workflowView{v}, stored)
	})
	return cmd
}

// readDefinition reads a definition file ("-": stdin) and checks that it
// is JSON; the server checks the rest.
func readDefinition(file string, stdin io.Reader) (json.RawMessage, error) {
	var (
		data []byte
		err  error
	)
	source := file
	if file == "-" {
		source = "stdin"
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("read the definition: %w", err)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("the definition from %s is empty", source)
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("the definition from %s is not valid JSON", source)
	}
	return data, nil
}

func workflowGetCommand(run runFunc, output *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a workflow definition (the latest version, or --version)",
		Long: "Show a version of a workflow: its number, hash and creation time, then the\n" +
			"definition in canonical form (steps sorted by name, defaults dropped). -o json\n" +
			"prints the API's answer; its \"definition\" can be put again as is.",
		Args: cobra.ExactArgs(1),
	}
	version := cmd.Flags().Int("version", 0, "the version to show (default: the latest)")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		path := "/v1/workflows/" + url.PathEscape(args[0])
		if cmd.Flags().Changed("version") {
			path += "?version=" + strconv.Itoa(*version)
		}
		var raw json.RawMessage
		if err := c.Do(ctx, "GET", path, nil, &raw); err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(out, raw)
		}
		var v struct {
			workflowView
			Definition json.RawMessage `json:"definition"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("decode workflow: %w", err)
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "Name:\t%s\n", v.Name)
		fmt.Fprintf(tw, "Version:\t%d\n", v.Version)
		fmt.Fprintf(tw, "Hash:\t%s\n", v.Hash)
		fmt.Fprintf(tw, "Created:\t%s\n", formatTime(&v.CreatedAt))
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(out, "Definition:")
		return writeJSON(out, v.Definition)
	})
	return cmd
}

func workflowListCommand(run runFunc, output *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List workflows (the latest version of each), by name",
		Long: "List workflows by name, the latest version of each, one page at a time. When\n" +
			"there are more, the command to see the next page is printed on stderr.",
		Args: cobra.NoArgs,
	}
	limit := cmd.Flags().Int("limit", 0, fmt.Sprintf("page size (server default %d, at most %d)", api.ListLimitDefault, api.ListLimitMax))
	cursor := cmd.Flags().String("cursor", "", "the next-page cursor of a previous list")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, _ []string) error {
		q := url.Values{}
		if *limit != 0 {
			q.Set("limit", strconv.Itoa(*limit))
		}
		if *cursor != "" {
			q.Set("cursor", *cursor)
		}
		path := "/v1/workflows"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		var raw json.RawMessage
		if err := c.Do(ctx, "GET", path, nil, &raw); err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(out, raw)
		}
		var page workflowPage
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("decode workflow list: %w", err)
		}
		if err := printWorkflowTable(out, page.Items, ""); err != nil {
			return err
		}
		if page.NextCursor != nil && *page.NextCursor != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "more workflows: add --cursor %s\n", *page.NextCursor)
		}
		return nil
	})
	return cmd
}

// printWorkflowTable prints versions, with a STORED column when stored is
// set (put).
func printWorkflowTable(out io.Writer, items []workflowView, stored string) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	header := "NAME\tVERSION\tSTEPS\tHASH\tCREATED"
	if stored != "" {
		header += "\tSTORED"
	}
	fmt.Fprintln(tw, header)
	for _, v := range items {
		hash := v.Hash
		if len(hash) > len("sha256:")+12 {
			hash = hash[:len("sha256:")+12]
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s", v.Name, v.Version, len(v.Definition.Steps), hash, formatTime(&v.CreatedAt))
		if stored != "" {
			fmt.Fprintf(tw, "\t%s", stored)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
