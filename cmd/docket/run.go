package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/docket-run/docket/internal/api"
	"github.com/docket-run/docket/remote"
)

// The run commands talk to a running server over HTTP, like the workflow
// commands.

// runView is a run as the API shows it (GET /v1/runs/{id} adds steps).
type runView struct {
	RunID           string          `json:"runId"`
	Workflow        string          `json:"workflow"`
	Version         int             `json:"version"`
	Status          string          `json:"status"`
	Input           json.RawMessage `json:"input"`
	Output          json.RawMessage `json:"output"`
	Error           string          `json:"error"`
	CancelRequested bool            `json:"cancelRequested"`
	IdempotencyKey  string          `json:"idempotencyKey"`
	CreatedAt       time.Time       `json:"createdAt"`
	FinishedAt      *time.Time      `json:"finishedAt"`
	Existing        bool            `json:"existing"`
	Steps           []runStepView   `json:"steps"`
}

type runStepView struct {
	Name       string          `json:"name"`
	Index      int             `json:"index"`
	Kind       string          `json:"kind"`
	Status     string          `json:"status"`
	JobID      string          `json:"jobId"`
	UnitID     string          `json:"unitId"`
	Output     json.RawMessage `json:"output"`
	Error      string          `json:"error"`
	StartedAt  *time.Time      `json:"startedAt"`
	FinishedAt *time.Time      `json:"finishedAt"`
}

func runCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Start, inspect and operate workflow runs on a docket server",
		Long: "Start runs of stored workflows (docs/workflows.md), one or a file of many, read\n" +
			"them with their steps, list them, and cancel, pause, resume, retry or signal them,\n" +
			"over a running server's HTTP API. The server is --server (env DOCKET_SERVER,\n" +
			"default " + ServerDefault + "); the key is --api-key (env DOCKET_API_KEY). Errors from the\n" +
			"server are printed as \"docket: <status> <title>: <detail> (field: message)\" and exit\n" +
			"with status 1.",
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
	cmd.AddCommand(runStartCommand(run, output), runBatchCommand(run, output), runGetCommand(run, output), runListCommand(run, output))
	for _, op := range []struct{ name, short string }{
		{"cancel", "Cancel a run (its queued step jobs are canceled, running ones asked to stop)"},
		{"pause", "Pause a run (no step is released until it is resumed)"},
		{"resume", "Resume a paused run"},
		{"retry", "Retry a FAILED run: its failed steps and everything downstream run again"},
	} {
		cmd.AddCommand(runOpCommand(run, output, op.name, op.short))
	}
	cmd.AddCommand(runSignalCommand(run, output))
	return cmd
}

// readJSONArg reads a JSON value given inline, or from a file ("-": stdin).
func readJSONArg(what, inline, file string, stdin io.Reader) (json.RawMessage, error) {
	var data []byte
	switch {
	case inline != "" && file != "":
		return nil, usageErrorf("give the %s inline or with -f, not both", what)
	case file == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("read the %s: %w", what, err)
		}
		data = b
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read the %s: %w", what, err)
		}
		data = b
	case inline != "":
		data = []byte(inline)
	default:
		return nil, nil
	}
	data = bytes.TrimSpace(data)
	if !json.Valid(data) {
		if inline != "" {
			return nil, usageErrorf("the %s is not valid JSON", what)
		}
		return nil, fmt.Errorf("the %s is not valid JSON", what)
	}
	return data, nil
}

func runStartCommand(run runFunc, output *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "start WORKFLOW",
		Short: "Start a run of a workflow",
		Long: "Start a run of the workflow's latest version (or --version) on an input: JSON given\n" +
			"with --input, or read from a file with -f (- for stdin); none is null. With --key,\n" +
			"starting again returns the run that has the key (EXISTING yes) instead of a new one.",
		Example: `  docket run start product-match --input '{"left": "a.jpg", "right": "b.jpg"}' --key pair-17
  docket run start product-match -f input.json -o json`,
		Args: cobra.ExactArgs(1),
	}
	input := cmd.Flags().String("input", "", "the run's input, JSON")
	file := cmd.Flags().StringP("file", "f", "", "read the input from this file (- for stdin)")
	key := cmd.Flags().String("key", "", "idempotency key: one run per key and workflow")
	version := cmd.Flags().Int("version", 0, "the workflow version (default: the latest)")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		in, err := readJSONArg("input", *input, *file, cmd.InOrStdin())
		if err != nil {
			return err
		}
		body := map[string]any{}
		if in != nil {
			body["input"] = in
		}
		if *key != "" {
			body["idempotencyKey"] = *key
		}
		if *version != 0 {
			body["version"] = *version
		}
		var raw json.RawMessage
		if err := c.Do(ctx, "POST", "/v1/workflows/"+url.PathEscape(args[0])+"/runs", body, &raw); err != nil {
			return err
		}
		return printRun(out, raw, *output, true)
	})
	return cmd
}

// printRun prints one run: the API's answer with -o json, else a table row.
func printRun(out io.Writer, raw json.RawMessage, output string, existing bool) error {
	if output == "json" {
		return writeJSON(out, raw)
	}
	var v runView
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("decode run: %w", err)
	}
	return printRunTable(out, []runView{v}, existing)
}

func printRunTable(out io.Writer, runs []runView, existing bool) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	header := "RUN ID\tWORKFLOW\tVERSION\tSTATUS\tCREATED\tFINISHED"
	if existing {
		header += "\tEXISTING"
	}
	fmt.Fprintln(tw, header)
	for _, r := range runs {
		status := r.Status
		if r.CancelRequested && status != "CANCELED" {
			status += " (cancel requested)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s", r.RunID, r.Workflow, r.Version, status, formatTime(&r.CreatedAt), formatTime(r.FinishedAt))
		if existing {
			fmt.Fprintf(tw, "\t%s", yesNo(r.Existing))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func runBatchCommand(run runFunc, output *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "batch WORKFLOW -f FILE",
		Short: "Start many runs from a JSON-lines or CSV file, with a progress bar",
		Long: "Start one run per row of FILE: JSON lines (.jsonl, .ndjson: one run object a line,\n" +
			"{\"input\": …, \"idempotencyKey\": …}) or CSV (.csv: a header, then one row a run whose\n" +
			"input is the row's cells keyed by the header; --key-column names the column that\n" +
			"is each run's idempotency key). The rows are sent --chunk at a time (POST\n" +
			"/v1/workflows/{name}/runs:batch), with a progress bar on stderr. The server checks\n" +
			"each chunk whole and starts none of it when a row is bad; the command then stops,\n" +
			"naming the rows (runs[i] counts the file's rows from 0) — the chunks before were\n" +
			"started. Fix the file and run the command again: with idempotency keys, rows that\n" +
			"were started are not started twice.",
		Example: `  docket run batch product-match -f pairs.csv --key-column pair_id
  docket run batch product-match -f runs.jsonl --chunk 5000`,
		Args: cobra.ExactArgs(1),
	}
	file := cmd.Flags().StringP("file", "f", "", "the rows: a .jsonl/.ndjson or .csv file (- for stdin, with --format)")
	format := cmd.Flags().String("format", "", "jsonl or csv (default: from the file's extension)")
	keyColumn := cmd.Flags().String("key-column", "", "CSV: the column holding each run's idempotency key")
	chunk := cmd.Flags().Int("chunk", 10000, fmt.Sprintf("rows per request (at most %d)", api.RunBatchMax))
	version := cmd.Flags().Int("version", 0, "the workflow version (default: the latest)")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		if *file == "" {
			return usageErrorf("give the rows with -f FILE")
		}
		if *chunk < 1 || *chunk > api.RunBatchMax {
			return usageErrorf("--chunk %d: want 1 to %d", *chunk, api.RunBatchMax)
		}
		f := *format
		if f == "" {
			switch strings.ToLower(filepath.Ext(*file)) {
			case ".jsonl", ".ndjson":
				f = "jsonl"
			case ".csv":
				f = "csv"
			default:
				return usageErrorf("cannot tell the format of %q from its extension: pass --format jsonl or csv", *file)
			}
		}
		if f != "jsonl" && f != "csv" {
			return usageErrorf("--format %q: want jsonl or csv", f)
		}
		if *keyColumn != "" && f != "csv" {
			return usageErrorf("--key-column applies to CSV files; JSON lines carry their idempotencyKey")
		}
		var rd io.Reader = cmd.InOrStdin()
		if *file != "-" {
			fh, err := os.Open(*file)
			if err != nil {
				return err
			}
			defer fh.Close()
			rd = fh
		}
		chunks, total, err := splitRows(rd, f, *chunk)
		if err != nil {
			return err
		}
		q := url.Values{}
		if *keyColumn != "" {
			q.Set("keyColumn", *keyColumn)
		}
		if *version != 0 {
			q.Set("version", strconv.Itoa(*version))
		}
		path := "/v1/workflows/" + url.PathEscape(args[0]) + "/runs:batch"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		ct := map[string]string{"jsonl": "application/x-ndjson", "csv": "text/csv"}[f]
		bar := newProgress(cmd.ErrOrStderr(), total)
		var all []json.RawMessage
		started, existing, done := 0, 0, 0
		for _, ch := range chunks {
			var res struct {
				Started  int               `json:"started"`
				Existing int               `json:"existing"`
				Items    []json.RawMessage `json:"items"`
			}
			if _, err := c.DoRaw(ctx, "POST", path, ct, ch.body, &res); err != nil {
				bar.finish()
				return chunkError(err, done, ch.rows)
			}
			started += res.Started
			existing += res.Existing
			all = append(all, res.Items...)
			done += ch.rows
			bar.set(done)
		}
		bar.finish()
		if *output == "json" {
			raw, err := json.Marshal(map[string]any{"workflow": args[0], "started": started, "existing": existing, "items": all})
			if err != nil {
				return err
			}
			return writeJSON(out, raw)
		}
		fmt.Fprintf(out, "%d runs of %s: %d started, %d existed already (same idempotency key)\n", total, args[0], started, existing)
		return nil
	})
	return cmd
}

type rowChunk struct {
	body []byte
	rows int
}

// splitRows reads every row of a JSON-lines or CSV file and groups them
// into bodies of at most size rows (CSV: each with the header).
func splitRows(rd io.Reader, format string, size int) ([]rowChunk, int, error) {
	var (
		chunks []rowChunk
		buf    bytes.Buffer
		n      int
		total  int
	)
	flush := func() {
		if n > 0 {
			chunks = append(chunks, rowChunk{body: bytes.Clone(buf.Bytes()), rows: n})
		}
		buf.Reset()
		n = 0
	}
	if format == "jsonl" {
		sc := bufio.NewScanner(rd)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			buf.Write(line)
			buf.WriteByte('\n')
			n++
			total++
			if n == size {
				flush()
			}
		}
		if err := sc.Err(); err != nil {
			return nil, 0, fmt.Errorf("read the rows: %w", err)
		}
		flush()
	} else {
		cr := csv.NewReader(rd)
		cr.FieldsPerRecord = -1 // the server names rows with a wrong count
		header, err := cr.Read()
		if err != nil {
			return nil, 0, fmt.Errorf("read the CSV header: %w", err)
		}
		w := csv.NewWriter(&buf)
		start := func() { _ = w.Write(header) }
		start()
		for {
			rec, err := cr.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, 0, fmt.Errorf("read the CSV: %w", err)
			}
			_ = w.Write(rec)
			n++
			total++
			if n == size {
				w.Flush()
				flush()
				start()
			}
		}
		w.Flush()
		if n > 0 {
			flush()
		}
	}
	if total == 0 {
		return nil, 0, errors.New("the file has no rows")
	}
	return chunks, total, nil
}

var runIndex = regexp.MustCompile(`^runs\[(\d+)\]`)

// chunkError renumbers the rows a refused chunk names (runs[i] of the
// chunk) as rows of the file, and says what was started before.
func chunkError(err error, offset, rows int) error {
	var re *remote.Error
	if !errors.As(err, &re) {
		return err
	}
	if offset == 0 && rows > 0 {
		return fmt.Errorf("rows 0 to %d: %w (nothing was started)", rows-1, err)
	}
	renum := func(s string) string {
		return runIndex.ReplaceAllStringFunc(s, func(m string) string {
			i, _ := strconv.Atoi(m[len("runs[") : len(m)-1])
			return fmt.Sprintf("runs[%d]", i+offset)
		})
	}
	for i := range re.Errors {
		re.Errors[i].Field = renum(re.Errors[i].Field)
	}
	re.Detail = regexp.MustCompile(`runs\[\d+\]`).ReplaceAllStringFunc(re.Detail, renum)
	return fmt.Errorf("rows %d to %d: %w (rows 0 to %d were started; fix the file and run again: rows with an idempotency key are not started twice)", offset, offset+rows-1, re, offset-1)
}

// progress draws a bar on stderr: [#####-----] done/total runs, elapsed.
type progress struct {
	w     io.Writer
	total int
	start time.Time
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, total: total, start: time.Now()}
	p.set(0)
	return p
}

func (p *progress) set(done int) {
	const width = 30
	filled := width * done / max(p.total, 1)
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d runs  %s", strings.Repeat("#", filled), strings.Repeat("-", width-filled), done, p.total, time.Since(p.start).Round(100*time.Millisecond))
}

func (p *progress) finish() { fmt.Fprintln(p.w) }

func runGetCommand(run runFunc, output *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get RUN-ID",
		Short: "Show a run: its state, the step table and the DAG",
		Long: "Show a run: its workflow, version, state, input and output, a table of every step\n" +
			"instance (fan-out instances by index), and the DAG as text — each step under its\n" +
			"parents, with its state and, for a fan-out, the count of instances in each state.\n" +
			"A step with several parents is drawn under the first and referred to under the\n" +
			"others. -o json prints the API's answer.",
		Args: cobra.ExactArgs(1),
	}
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		var raw json.RawMessage
		if err := c.Do(ctx, "GET", "/v1/runs/"+url.PathEscape(args[0]), nil, &raw); err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(out, raw)
		}
		var v runView
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("decode run: %w", err)
		}
		var wf struct {
			Definition struct {
				Steps []struct {
					Name  string   `json:"name"`
					After []string `json:"after"`
				} `json:"steps"`
			} `json:"definition"`
		}
		if err := c.Do(ctx, "GET", fmt.Sprintf("/v1/workflows/%s?version=%d", url.PathEscape(v.Workflow), v.Version), nil, &wf); err != nil {
			return fmt.Errorf("read the run's workflow version: %w", err)
		}
		parents := map[string][]string{}
		for _, s := range wf.Definition.Steps {
			parents[s.Name] = s.After
		}
		return printRunDetail(out, &v, parents)
	})
	return cmd
}

func printRunDetail(out io.Writer, v *runView, parents map[string][]string) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Run:\t%s\n", v.RunID)
	fmt.Fprintf(tw, "Workflow:\t%s (version %d)\n", v.Workflow, v.Version)
	status := v.Status
	if v.CancelRequested && status != "CANCELED" {
		status += " (cancel requested)"
	}
	fmt.Fprintf(tw, "Status:\t%s\n", status)
	if v.IdempotencyKey != "" {
		fmt.Fprintf(tw, "Key:\t%s\n", v.IdempotencyKey)
	}
	fmt.Fprintf(tw, "Created:\t%s\n", formatTime(&v.CreatedAt))
	fmt.Fprintf(tw, "Finished:\t%s\n", formatTime(v.FinishedAt))
	fmt.Fprintf(tw, "Input:\t%s\n", compactJSON(v.Input))
	fmt.Fprintf(tw, "Output:\t%s\n", compactJSON(v.Output))
	if v.Error != "" {
		fmt.Fprintf(tw, "Error:\t%s\n", v.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tINDEX\tKIND\tSTATUS\tJOB/UNIT\tSTARTED\tFINISHED\tOUTPUT/ERROR")
	for _, s := range v.Steps {
		ref := cmpOr(s.JobID, s.UnitID, "-")
		detail := compactJSON(s.Output)
		if s.Error != "" {
			detail = s.Error
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Index, s.Kind, s.Status, ref, formatTime(s.StartedAt), formatTime(s.FinishedAt), truncate(detail, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "DAG:")
	for _, line := range runDAG(v.Steps, parents) {
		fmt.Fprintln(out, "  "+line)
	}
	return nil
}

// runDAG draws the steps as a tree: roots first, each step indented under
// its first parent (in the order the run lists steps, parents first), and
// named again under its other parents as "name (↑ after a, b)". A step's
// label is its state, or for a fan-out its instance count and the count in
// each state.
func runDAG(steps []runStepView, parents map[string][]string) []string {
	var order []string
	states := map[string]map[string]int{}
	count := map[string]int{}
	fanOut := map[string]bool{}
	for _, s := range steps {
		if _, ok := states[s.Name]; !ok {
			order = append(order, s.Name)
			states[s.Name] = map[string]int{}
		}
		states[s.Name][s.Status]++
		count[s.Name]++
		if s.Index > 0 {
			fanOut[s.Name] = true
		}
	}
	rank := map[string]int{}
	for i, n := range order {
		rank[n] = i
	}
	children := map[string][]string{}
	for _, n := range order {
		for _, p := range parents[n] {
			children[p] = append(children[p], n)
		}
	}
	label := func(n string) string {
		if !fanOut[n] {
			for st := range states[n] {
				return n + "  " + st
			}
		}
		var parts []string
		for st, k := range states[n] {
			parts = append(parts, fmt.Sprintf("%d %s", k, st))
		}
		sort.Strings(parts)
		return fmt.Sprintf("%s ×%d  %s", n, count[n], strings.Join(parts, ", "))
	}
	var lines []string
	drawn := map[string]bool{}
	var draw func(n, via string, depth int)
	draw = func(n, via string, depth int) {
		indent := strings.Repeat("    ", depth)
		if depth > 0 {
			indent = strings.Repeat("    ", depth-1) + "└── "
		}
		ps := parents[n]
		if drawn[n] || (len(ps) > 0 && ps[firstParent(ps, rank)] != via) {
			lines = append(lines, indent+n+"  (↑ after "+strings.Join(ps, ", ")+")")
			return
		}
		drawn[n] = true
		lines = append(lines, indent+label(n))
		for _, ch := range children[n] {
			draw(ch, n, depth+1)
		}
	}
	for _, n := range order {
		if len(parents[n]) == 0 {
			draw(n, "", 0)
		}
	}
	return lines
}

// firstParent is the index in ps of the parent listed first in the run.
func firstParent(ps []string, rank map[string]int) int {
	best := 0
	for i, p := range ps {
		if rank[p] < rank[ps[best]] {
			best = i
		}
	}
	return best
}

func cmpOr(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func runListCommand(run runFunc, output *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Long: "List runs newest first, one page at a time, optionally of one workflow and in some\n" +
			"states. When there are more, the command to see the next page is printed on stderr.",
		Example: `  docket run list --workflow product-match --state FAILED,PAUSED`,
		Args:    cobra.NoArgs,
	}
	workflow := cmd.Flags().String("workflow", "", "only runs of this workflow")
	state := cmd.Flags().String("state", "", "only runs in these states, comma-separated (RUNNING, PAUSED, SUCCEEDED, FAILED, CANCELED)")
	limit := cmd.Flags().Int("limit", 0, fmt.Sprintf("page size (server default %d, at most %d)", api.ListLimitDefault, api.ListLimitMax))
	cursor := cmd.Flags().String("cursor", "", "the next-page cursor of a previous list")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, _ []string) error {
		q := url.Values{}
		for k, v := range map[string]string{"workflow": *workflow, "state": *state, "cursor": *cursor} {
			if v != "" {
				q.Set(k, v)
			}
		}
		if *limit != 0 {
			q.Set("limit", strconv.Itoa(*limit))
		}
		path := "/v1/runs"
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
		var page struct {
			Items      []runView `json:"items"`
			NextCursor *string   `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("decode run list: %w", err)
		}
		if err := printRunTable(out, page.Items, false); err != nil {
			return err
		}
		if page.NextCursor != nil && *page.NextCursor != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "more runs: add --cursor %s\n", *page.NextCursor)
		}
		return nil
	})
	return cmd
}

func runOpCommand(run runFunc, output *string, op, short string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   op + " RUN-ID",
		Short: short,
		Long: short + ".\nRepeating an operation that already took effect changes nothing; one the run's\n" +
			"state does not allow is refused (409).",
		Args: cobra.ExactArgs(1),
	}
	var force *bool
	if op == "retry" {
		cmd.Long += "\nA retry is refused (409) while a step downstream of a failed one is still RUNNING\n" +
			"(released before the run failed, e.g. by trigger all_done); --force cancels such\n" +
			"steps in the retry's transaction (running jobs are asked to stop) and runs them\n" +
			"again with the others."
		force = cmd.Flags().Bool("force", false, "cancel the RUNNING steps that block the retry and run them again")
	}
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		var body any
		if force != nil && *force {
			body = map[string]any{"force": true}
		}
		var raw json.RawMessage
		if err := c.Do(ctx, "POST", "/v1/runs/"+url.PathEscape(args[0])+"/"+op, body, &raw); err != nil {
			return err
		}
		return printRun(out, raw, *output, false)
	})
	return cmd
}

func runSignalCommand(run runFunc, output *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "signal RUN-ID STEP",
		Short: "Deliver a signal to a waiting signal step",
		Long: "Deliver a signal to the signal step STEP of a run: the step succeeds with --output\n" +
			"(JSON; -f reads it from a file, - for stdin; none is null) and the run goes on. A step\n" +
			"the workflow does not have is not found (404); one that is not a waiting signal step\n" +
			"is refused (409).",
		Example: `  docket run signal 0190a0e6-7c3b-7d2a-9a51-3f2b8c1d4e5f approve --output '{"ok": true}'`,
		Args:    cobra.ExactArgs(2),
	}
	outputJSON := cmd.Flags().String("output", "", "the step's output, JSON")
	file := cmd.Flags().StringP("file", "f", "", "read the output from this file (- for stdin)")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		value, err := readJSONArg("output", *outputJSON, *file, cmd.InOrStdin())
		if err != nil {
			return err
		}
		body := map[string]any{}
		if value != nil {
			body["output"] = value
		}
		var raw json.RawMessage
		if err := c.Do(ctx, "POST", "/v1/runs/"+url.PathEscape(args[0])+"/signals/"+url.PathEscape(args[1]), body, &raw); err != nil {
			return err
		}
		return printRun(out, raw, *output, false)
	})
	return cmd
}
