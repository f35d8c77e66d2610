package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/docket-run/docket/internal/api"
	"github.com/docket-run/docket/remote"
)

// The job commands talk to a running server over HTTP, like any other
// client of the API; they never open the database.

// jobView is a job as the API shows it.
type jobView struct {
	JobID           string          `json:"jobId"`
	JobType         string          `json:"jobType"`
	Queue           string          `json:"queue"`
	Status          string          `json:"status"`
	Priority        int             `json:"priority"`
	Progress        float64         `json:"progress"`
	ProgressMessage string          `json:"progressMessage"`
	CancelRequested bool            `json:"cancelRequested"`
	CreatedAt       time.Time       `json:"createdAt"`
	UpdatedAt       time.Time       `json:"updatedAt"`
	ScheduledAt     time.Time       `json:"scheduledAt"`
	FinishedAt      *time.Time      `json:"finishedAt"`
	Result          json.RawMessage `json:"result"`
	// Admin only, with --include.
	Payload        json.RawMessage `json:"payload"`
	Attempt        *int            `json:"attempt"`
	MaxAttempts    int             `json:"maxAttempts"`
	LastError      string          `json:"lastError"`
	LeaseOwner     string          `json:"leaseOwner"`
	LeaseExpiresAt *time.Time      `json:"leaseExpiresAt"`
	Attempts       []attemptView   `json:"attempts"`
}

type attemptView struct {
	Attempt    int        `json:"attempt"`
	Node       string     `json:"node"`
	StartedAt  time.Time  `json:"startedAt"`
	FinishedAt *time.Time `json:"finishedAt"`
	Outcome    string     `json:"outcome"`
	Error      string     `json:"error"`
}

type jobPage struct {
	Items      []jobView `json:"items"`
	NextCursor *string   `json:"nextCursor"`
}

// submitRequest is the body of POST /v1/jobs.
type submitRequest struct {
	JobType        string          `json:"jobType"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	Queue          string          `json:"queue,omitempty"`
	Priority       *int            `json:"priority,omitempty"`
	RunAt          *time.Time      `json:"runAt,omitempty"`
	MaxAttempts    *int            `json:"maxAttempts,omitempty"`
	TimeoutSeconds int             `json:"timeoutSeconds,omitempty"`
}

func jobCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Submit, inspect, cancel and retry jobs on a docket server",
		Long: "Submit, inspect, cancel and retry jobs on a running docket server over its HTTP API.\n" +
			"The server is --server (env DOCKET_SERVER, default " + ServerDefault + "); the key is\n" +
			"--api-key (env DOCKET_API_KEY). Errors from the server are printed as\n" +
			"\"docket: <status> <title>: <detail> (field: message)\" and exit with status 1.",
	}
	api := addAPIFlags(cmd.PersistentFlags())
	output := outputFlag(cmd)
	// run wraps a subcommand: checks -o, makes the client.
	run := func(fn func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(*output); err != nil {
				return err
			}
			c, err := api.client()
			if err != nil {
				return err
			}
			return fn(cmd.Context(), c, cmd.OutOrStdout(), args)
		}
	}
	cmd.AddCommand(
		jobSubmitCommand(run, output),
		jobGetCommand(run, output),
		jobListCommand(run, output),
		jobActionCommand(run, output, "cancel", "Cancel a job (a running job stops when its worker learns of it)"),
		jobActionCommand(run, output, "retry", "Put a DEAD or CANCELED job back in its queue with attempts reset"),
	)
	return cmd
}

type runFunc = func(fn func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error) func(*cobra.Command, []string) error

func jobSubmitCommand(run runFunc, output *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "submit JOB-TYPE [PAYLOAD]",
		Short: "Submit a job",
		Long: "Submit a job. PAYLOAD is JSON (default {}); \"-\" reads it from stdin and\n" +
			"\"@FILE\" from a file.",
		Example: `  docket job submit email.send '{"to":"a@example.com"}'
  docket job submit report.build @params.json --queue reports --priority 0 --delay 10m
  echo '{"n":1}' | docket job submit count - --idempotency-key count-1 -o json`,
		Args: cobra.RangeArgs(1, 2),
	}
	var (
		req      submitRequest
		priority int
		attempts int
		runAt    string
		delay    time.Duration
		timeout  time.Duration
	)
	f := cmd.Flags()
	f.StringVar(&req.Queue, "queue", "", "queue (default: the job type)")
	f.IntVar(&priority, "priority", 1, "0 (runs first) .. 9")
	f.IntVar(&attempts, "max-attempts", 0, "attempts before the job is DEAD (default: the server's, 25)")
	f.StringVar(&runAt, "run-at", "", "do not run before this instant (RFC 3339)")
	f.DurationVar(&delay, "delay", 0, "do not run before this long from now")
	f.DurationVar(&timeout, "timeout", 0, "deadline of each attempt (whole seconds; default: the worker's)")
	f.StringVar(&req.IdempotencyKey, "idempotency-key", "", "submitting again with this key returns the same job")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		req.JobType = args[0]
		if len(args) == 2 {
			payload, err := readPayload(args[1], cmd.InOrStdin())
			if err != nil {
				return err
			}
			req.Payload = payload
		}
		if cmd.Flags().Changed("priority") {
			req.Priority = &priority
		}
		if cmd.Flags().Changed("max-attempts") {
			req.MaxAttempts = &attempts
		}
		switch {
		case runAt != "" && delay != 0:
			return usageErrorf("--run-at and --delay: give one of them")
		case runAt != "":
			t, err := time.Parse(time.RFC3339, runAt)
			if err != nil {
				return usageErrorf("--run-at %q: want RFC 3339, e.g. 2030-01-02T15:04:05Z", runAt)
			}
			req.RunAt = &t
		case delay < 0:
			return usageErrorf("--delay %s: must not be negative", delay)
		case delay > 0:
			t := time.Now().Add(delay).UTC()
			req.RunAt = &t
		}
		if timeout < 0 || timeout%time.Second != 0 {
			return usageErrorf("--timeout %s: want a positive number of whole seconds", timeout)
		}
		req.TimeoutSeconds = int(timeout / time.Second)
		var raw json.RawMessage
		if err := c.Do(ctx, "POST", "/v1/jobs", &req, &raw); err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(out, raw)
		}
		var j jobView
		if err := json.Unmarshal(raw, &j); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB ID\tTYPE\tSTATUS\tCREATED")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", j.JobID, j.JobType, j.Status, formatTime(&j.CreatedAt))
		return tw.Flush()
	})
	return cmd
}

// readPayload reads a PAYLOAD argument: JSON, "-" for stdin, "@FILE".
func readPayload(arg string, stdin io.Reader) (json.RawMessage, error) {
	var data []byte
	var err error
	source := "PAYLOAD"
	switch {
	case arg == "-":
		source = "stdin"
		data, err = io.ReadAll(stdin)
	case strings.HasPrefix(arg, "@"):
		source = arg[1:]
		data, err = os.ReadFile(arg[1:])
	default:
		data = []byte(arg)
	}
	if err != nil {
		return nil, fmt.Errorf("read payload: %w", err)
	}
	data = bytes.TrimSpace(data)
	if !json.Valid(data) {
		return nil, fmt.Errorf("payload from %s is not valid JSON", source)
	}
	return data, nil
}

func jobGetCommand(run runFunc, output *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get JOB-ID",
		Short: "Show a job",
		Args:  cobra.ExactArgs(1),
	}
	include := cmd.Flags().StringSlice("include", nil, "admin only: payload, attempts")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		path := "/v1/jobs/" + url.PathEscape(args[0])
		if len(*include) > 0 {
			path += "?include=" + url.QueryEscape(strings.Join(*include, ","))
		}
		var raw json.RawMessage
		if err := c.Do(ctx, "GET", path, nil, &raw); err != nil {
			return err
		}
		return printJob(out, *output, raw, true)
	})
	return cmd
}

func jobListCommand(run runFunc, output *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first",
		Long: "List jobs, newest first, one page at a time. When there are more, the\n" +
			"command to see the next page is printed on stderr.",
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	status := f.String("status", "", "only jobs in this status (QUEUED, RUNNING, RETRY, SUCCESS, DEAD, CANCELED …)")
	jobType := f.String("job-type", "", "only jobs of this type")
	queue := f.String("queue", "", "only jobs of this queue")
	priority := f.Int("priority", 0, "only jobs of this priority")
	limit := f.Int("limit", 0, fmt.Sprintf("page size (server default %d, at most %d)", api.ListLimitDefault, api.ListLimitMax))
	cursor := f.String("cursor", "", "the next-page cursor of a previous list")
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, _ []string) error {
		q := url.Values{}
		for k, v := range map[string]string{"status": strings.ToUpper(*status), "jobType": *jobType, "queue": *queue, "cursor": *cursor} {
			if v != "" {
				q.Set(k, v)
			}
		}
		if cmd.Flags().Changed("priority") {
			q.Set("priority", strconv.Itoa(*priority))
		}
		if *limit != 0 {
			q.Set("limit", strconv.Itoa(*limit))
		}
		path := "/v1/jobs"
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
		var page jobPage
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("decode job list: %w", err)
		}
		if err := printJobTable(out, page.Items); err != nil {
			return err
		}
		if page.NextCursor != nil && *page.NextCursor != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "more jobs: add --cursor %s\n", *page.NextCursor)
		}
		return nil
	})
	return cmd
}

func jobActionCommand(run runFunc, output *string, action, short string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   action + " JOB-ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
	}
	cmd.RunE = run(func(ctx context.Context, c *remote.Client, out io.Writer, args []string) error {
		var raw json.RawMessage
		if err := c.Do(ctx, "POST", "/v1/jobs/"+url.PathEscape(args[0])+"/"+action, nil, &raw); err != nil {
			return err
		}
		return printJob(out, *output, raw, false)
	})
	return cmd
}

// printJob prints one job: as JSON, as a detailed listing, or as a
// one-row table.
func printJob(out io.Writer, output string, raw json.RawMessage, detailed bool) error {
	if output == "json" {
		return writeJSON(out, raw)
	}
	var j jobView
	if err := json.Unmarshal(raw, &j); err != nil {
		return fmt.Errorf("decode job: %w", err)
	}
	if !detailed {
		return printJobTable(out, []jobView{j})
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Job ID", j.JobID)
	row("Type", j.JobType)
	row("Queue", j.Queue)
	row("Status", j.statusText())
	row("Priority", strconv.Itoa(j.Priority))
	progress := formatProgress(j.Progress)
	if j.ProgressMessage != "" {
		progress += " " + j.ProgressMessage
	}
	row("Progress", progress)
	row("Created", formatTime(&j.CreatedAt))
	row("Updated", formatTime(&j.UpdatedAt))
	row("Scheduled", formatTime(&j.ScheduledAt))
	row("Finished", formatTime(j.FinishedAt))
	row("Result", compactJSON(j.Result))
	if j.Payload != nil {
		row("Payload", compactJSON(j.Payload))
	}
	if j.Attempt != nil {
		row("Attempt", fmt.Sprintf("%d of %d", *j.Attempt, j.MaxAttempts))
		row("Last error", dash(firstLine(j.LastError)))
		if j.LeaseOwner != "" {
			row("Held by", j.LeaseOwner+" until "+formatTime(j.LeaseExpiresAt))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(j.Attempts) > 0 {
		fmt.Fprintln(out, "\nAttempts:")
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  #\tWORKER\tSTARTED\tFINISHED\tOUTCOME\tERROR")
		for _, a := range j.Attempts {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, dash(a.Node), formatTime(&a.StartedAt),
				formatTime(a.FinishedAt), a.Outcome, dash(firstLine(a.Error)))
		}
		return tw.Flush()
	}
	return nil
}

func printJobTable(out io.Writer, jobs []jobView) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB ID\tTYPE\tQUEUE\tSTATUS\tPRIORITY\tPROGRESS\tCREATED")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", j.JobID, j.JobType, dash(j.Queue), j.statusText(),
			j.Priority, formatProgress(j.Progress), formatTime(&j.CreatedAt))
	}
	return tw.Flush()
}

// statusText is the status, noting a cancel the worker has yet to honour.
func (j *jobView) statusText() string {
	if j.CancelRequested && j.Status == "RUNNING" {
		return j.Status + " (cancel requested)"
	}
	return j.Status
}

func formatTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

func formatProgress(p float64) string {
	return strconv.FormatFloat(p, 'f', -1, 64) + "%"
}

func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "-"
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return string(raw)
	}
	return buf.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
