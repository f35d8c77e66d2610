package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/api"
	"github.com/docket-run/docket/internal/testdb"
)

// cliStep is the job of every job step of the CLI's test workflow.
type cliStep struct{}

func (cliStep) JobType() string { return "cli.step" }

// cliRunWorkflow: a → thumbs (one per item of a's output) → done, and an
// approval signal after a.
const cliRunWorkflow = `{"name": "fan", "steps": [
  {"name": "a", "job": {"type": "cli.step"}},
  {"name": "thumbs", "after": ["a"], "forEach": "steps.a.output.items", "job": {"type": "cli.step"}},
  {"name": "approve", "after": ["a"], "signal": {"timeout": "1h"}},
  {"name": "done", "after": ["thumbs", "approve"], "job": {"type": "cli.step"}}]}`

// startRunServer is an API server and a worker running cli.step jobs on
// one database.
func startRunServer(t *testing.T, backend testdb.Backend) *cliServer {
	t.Helper()
	ctx := context.Background()
	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: backend.URL(t), AutoMigrate: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	srv := httptest.NewServer(api.New(api.Config{Client: client}))
	t.Cleanup(srv.Close)
	cfg := docket.WorkerConfig{
		PollInterval: 50 * time.Millisecond, SchedulerInterval: 20 * time.Millisecond,
		LeaderTTL: 300 * time.Millisecond, WorkflowSweepInterval: 200 * time.Millisecond,
	}
	w := docket.NewWorker(client, cfg)
	docket.AddHandler(w, func(ctx context.Context, _ *docket.Job[cliStep]) error {
		rc, _ := docket.RunOf(ctx)
		if rc.Step == "a" {
			return docket.SetResult(ctx, map[string]any{"items": []int{1, 2, 3}})
		}
		return docket.SetResult(ctx, map[string]any{"step": rc.Step, "index": rc.Index})
	})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		w.Stop(sctx)
	})
	s := &cliServer{url: srv.URL, keys: map[docket.Role]string{}}
	for _, role := range docket.Roles {
		secret, _, err := client.CreateAPIKey(ctx, "cli-"+string(role), role)
		require.NoError(t, err)
		s.keys[role] = secret
	}
	return s
}

// docket runs the CLI in process as role: the command, then its
// arguments (the API flags are added).
func (s *cliServer) docket(t *testing.T, role docket.Role, stdin string, command string, args ...string) cliResult {
	t.Helper()
	cmd := rootCommand()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(append([]string{command, "--server", s.url, "--api-key", s.keys[role]}, args...))
	err := cmd.ExecuteContext(context.Background())
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

func (s *cliServer) runOK(t *testing.T, role docket.Role, stdin string, args ...string) cliResult {
	t.Helper()
	res := s.docket(t, role, stdin, "run", args...)
	require.NoError(t, res.err, "docket run %s\nstderr: %s", strings.Join(args, " "), res.stderr)
	return res
}

var runIDPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

func TestCLIRunCommands(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			s := startRunServer(t, backend)
			res := s.docket(t, docket.RoleProducer, cliRunWorkflow, "workflow", "put")
			require.NoError(t, res.err, res.stderr)

			// start, then start again with the key: the same run.
			res = s.runOK(t, docket.RoleProducer, "", "start", "fan", "--input", `{"sku": "a-1"}`, "--key", "k1")
			require.Regexp(t, `(?m)^RUN ID\s+WORKFLOW\s+VERSION\s+STATUS\s+CREATED\s+FINISHED\s+EXISTING$`, res.stdout)
			require.Regexp(t, `(?m)\s+fan\s+1\s+RUNNING\s+.*\s+no$`, res.stdout)
			id := runIDPattern.FindString(res.stdout)
			require.NotEmpty(t, id)
			res = s.runOK(t, docket.RoleProducer, `{"sku": "a-1"}`, "start", "fan", "-f", "-", "--key", "k1", "-o", "json")
			var started struct {
				RunID    string `json:"runId"`
				Existing bool   `json:"existing"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &started))
			require.Equal(t, id, started.RunID)
			require.True(t, started.Existing)

			// The run waits for its approval: a, the three thumbs done.
			var view struct {
				Steps []struct {
					Name, Status string
				} `json:"steps"`
			}
			require.Eventually(t, func() bool {
				res := s.runOK(t, docket.RoleViewer, "", "get", id, "-o", "json")
				require.NoError(t, json.Unmarshal([]byte(res.stdout), &view))
				done := 0
				for _, st := range view.Steps {
					if st.Name == "thumbs" && st.Status == "SUCCEEDED" {
						done++
					}
				}
				return done == 3
			}, 20*time.Second, 50*time.Millisecond)
			res = s.runOK(t, docket.RoleViewer, "", "get", id)
			require.Regexp(t, `(?m)^Status:\s+RUNNING$`, res.stdout)
			require.Regexp(t, `(?m)^STEP\s+INDEX\s+KIND\s+STATUS\s+JOB/UNIT\s+STARTED\s+FINISHED\s+OUTPUT/ERROR$`, res.stdout)
			require.Regexp(t, `(?m)^thumbs\s+2\s+job\s+SUCCEEDED\s+`+runIDPattern.String(), res.stdout)
			require.Regexp(t, `(?m)^approve\s+0\s+signal\s+RUNNING\s+-\s+`, res.stdout)
			require.Contains(t, res.stdout, "DAG:\n"+
				"  a  SUCCEEDED\n"+
				"  └── approve  RUNNING\n"+
				"      └── done  PENDING\n"+
				"  └── thumbs ×3  3 SUCCEEDED\n"+
				"      └── done  (↑ after approve, thumbs)\n")

			// pause, signal (lands while paused), resume: the run ends.
			res = s.runOK(t, docket.RoleProducer, "", "pause", id)
			require.Regexp(t, `(?m)\s+PAUSED\s+`, res.stdout)
			res = s.runOK(t, docket.RoleProducer, "", "signal", id, "approve", "--output", `{"ok": true}`)
			require.Regexp(t, `(?m)\s+PAUSED\s+`, res.stdout)
			res = s.docket(t, docket.RoleProducer, "", "run", "signal", id, "approve")
			require.ErrorContains(t, res.err, "409")
			s.runOK(t, docket.RoleProducer, "", "resume", id)
			require.Eventually(t, func() bool {
				res := s.runOK(t, docket.RoleViewer, "", "get", id)
				return strings.Contains(res.stdout, "Status:    SUCCEEDED") || regexp.MustCompile(`(?m)^Status:\s+SUCCEEDED$`).MatchString(res.stdout)
			}, 20*time.Second, 50*time.Millisecond)
			res = s.runOK(t, docket.RoleViewer, "", "get", id)
			require.Regexp(t, `(?m)^Output:\s+\{"done":\{.*"step":"done".*\}\}$`, res.stdout)
			res = s.docket(t, docket.RoleProducer, "", "run", "cancel", id)
			require.ErrorContains(t, res.err, "409")
			res = s.docket(t, docket.RoleProducer, "", "run", "retry", id)
			require.ErrorContains(t, res.err, "409")

			// cancel a new run twice: the second is a no-op.
			res = s.runOK(t, docket.RoleProducer, "", "start", "fan")
			other := runIDPattern.FindString(res.stdout)
			for range 2 {
				res = s.runOK(t, docket.RoleProducer, "", "cancel", other)
				require.Regexp(t, `(?m)^`+other+`\s+fan\s+1\s+(CANCELED|RUNNING \(cancel requested\))\s+`, res.stdout)
			}

			// batch: CSV in chunks, with a progress bar; again: all existed.
			dir := t.TempDir()
			csvFile := filepath.Join(dir, "rows.csv")
			var rows strings.Builder
			rows.WriteString("id,left,right\n")
			for i := range 25 {
				fmt.Fprintf(&rows, "p%d,\"l, %d\",r%d\n", i, i, i)
			}
			require.NoError(t, os.WriteFile(csvFile, []byte(rows.String()), 0o600))
			res = s.runOK(t, docket.RoleProducer, "", "batch", "fan", "-f", csvFile, "--key-column", "id", "--chunk", "10")
			require.Equal(t, "25 runs of fan: 25 started, 0 existed already (same idempotency key)\n", res.stdout)
			require.Contains(t, res.stderr, "] 10/25 runs")
			require.Contains(t, res.stderr, "[##############################] 25/25 runs")
			res = s.runOK(t, docket.RoleProducer, "", "batch", "fan", "-f", csvFile, "--key-column", "id", "--chunk", "10")
			require.Equal(t, "25 runs of fan: 0 started, 25 existed already (same idempotency key)\n", res.stdout)

			// JSON lines: a bad row in the second chunk is named by its row
			// in the file; the first chunk was started.
			jsonl := filepath.Join(dir, "runs.jsonl")
			require.NoError(t, os.WriteFile(jsonl, []byte("{\"input\": 1, \"idempotencyKey\": \"j0\"}\n{\"input\": 2}\n\n{\"input\": 3}\n{\"input\": 4, \"nope\": 1}\n"), 0o600))
			res = s.docket(t, docket.RoleProducer, "", "run", "batch", "fan", "-f", jsonl, "--chunk", "2")
			require.Error(t, res.err)
			require.Contains(t, res.err.Error(), "rows 2 to 3")
			require.Contains(t, res.err.Error(), "runs[3].nope")
			require.Contains(t, res.err.Error(), "rows 0 to 1 were started")
			res = s.docket(t, docket.RoleProducer, "", "run", "batch", "fan", "-f", filepath.Join(dir, "rows.txt"))
			require.ErrorContains(t, res.err, "--format jsonl or csv")

			// list: filters and pages.
			res = s.runOK(t, docket.RoleViewer, "", "list", "--workflow", "fan", "--state", "SUCCEEDED")
			require.Equal(t, 2, strings.Count(res.stdout, "\n"), res.stdout)
			require.Contains(t, res.stdout, id)
			res = s.runOK(t, docket.RoleViewer, "", "list", "--limit", "5")
			require.Equal(t, 6, strings.Count(res.stdout, "\n"), res.stdout)
			require.Contains(t, res.stderr, "more runs: add --cursor ")
			res = s.docket(t, docket.RoleViewer, "", "run", "list", "--state", "DONE")
			require.ErrorContains(t, res.err, "state")
			res = s.docket(t, docket.RoleViewer, "", "run", "start", "fan")
			require.ErrorContains(t, res.err, "403")
			res = s.docket(t, docket.RoleProducer, "", "run", "start", "fan", "--input", "{nope")
			require.ErrorContains(t, res.err, "the input is not valid JSON")
		})
	}
}

func TestRunDAG(t *testing.T) {
	t.Parallel()
	steps := []runStepView{
		{Name: "top", Status: "SUCCEEDED"},
		{Name: "left", Status: "SUCCEEDED"},
		{Name: "fan", Index: 0, Status: "SUCCEEDED"}, {Name: "fan", Index: 1, Status: "FAILED"}, {Name: "fan", Index: 2, Status: "SUCCEEDED"},
		{Name: "join", Status: "PENDING"},
	}
	parents := map[string][]string{"left": {"top"}, "fan": {"top"}, "join": {"left", "fan"}}
	require.Equal(t, []string{
		"top  SUCCEEDED",
		"└── left  SUCCEEDED",
		"    └── join  PENDING",
		"└── fan ×3  1 FAILED, 2 SUCCEEDED",
		"    └── join  (↑ after left, fan)",
	}, runDAG(steps, parents))
}

// TestCLIRunRetryForce: docket run retry of a FAILED run whose step
// report (all_done after the failed check) still runs is refused (409,
// saying to force it); with --force the retry cancels report, asks its
// job to stop and runs the run again.
func TestCLIRunRetryForce(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := startCLIServer(t, backend) // no worker: the test leases the jobs
			res := s.docket(t, docket.RoleProducer, `{"name": "audit", "steps": [
  {"name": "check", "job": {"type": "audit.check", "maxAttempts": 1}, "onFailure": "continue"},
  {"name": "report", "after": ["check"], "trigger": "all_done", "job": {"type": "audit.report"}},
  {"name": "close", "after": ["check"], "trigger": "all_done", "job": {"type": "audit.close", "maxAttempts": 1}}]}`, "workflow", "put")
			require.NoError(t, res.err, res.stderr)
			res = s.runOK(t, docket.RoleProducer, "", "start", "audit")
			id := runIDPattern.FindString(res.stdout)
			lease := func(queue string) *docket.Lease {
				ls, err := s.client.Lease(ctx, docket.LeaseParams{Queues: []string{queue}, Max: 1, Duration: time.Minute, WorkerID: "w"})
				require.NoError(t, err)
				require.Len(t, ls, 1, queue)
				return ls[0]
			}
			_, err := s.client.LeaseFail(ctx, lease("audit.check").ID, "no", false)
			require.NoError(t, err)
			report := lease("audit.report") // runs on
			_, err = s.client.LeaseFail(ctx, lease("audit.close").ID, "no", false)
			require.NoError(t, err)

			res = s.docket(t, docket.RoleProducer, "", "run", "retry", id)
			require.ErrorContains(t, res.err, "409")
			require.ErrorContains(t, res.err, "force the retry")
			res = s.runOK(t, docket.RoleProducer, "", "retry", id, "--force")
			require.Regexp(t, `(?m)^`+id+`\s+audit\s+1\s+RUNNING\s+`, res.stdout)
			hb, err := s.client.LeaseHeartbeat(ctx, report.ID, time.Minute, nil, "")
			require.NoError(t, err)
			require.True(t, hb.CancelRequested, "the forced retry asked report's job to stop")

			// --force is retry's only.
			res = s.docket(t, docket.RoleProducer, "", "run", "cancel", id, "--force")
			require.ErrorContains(t, res.err, "unknown flag: --force")
		})
	}
}
