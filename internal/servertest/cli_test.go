package servertest_test

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/servertest"
	"github.com/docket-run/docket/internal/testdb"
)

// Tests of the client commands, docket job … and docket worker, against a
// real server: both sides are the built binary.

// jobDetail is a job as an admin sees it with ?include=payload,attempts.
type jobDetail struct {
	JobID           string          `json:"jobId"`
	JobType         string          `json:"jobType"`
	Queue           string          `json:"queue"`
	Status          string          `json:"status"`
	Priority        int             `json:"priority"`
	CancelRequested bool            `json:"cancelRequested"`
	Result          json.RawMessage `json:"result"`
	Payload         json.RawMessage `json:"payload"`
	Attempt         int             `json:"attempt"`
	LastError       string          `json:"lastError"`
	Attempts        []struct {
		Attempt int    `json:"attempt"`
		Node    string `json:"node"`
		Outcome string `json:"outcome"`
		Error   string `json:"error"`
	} `json:"attempts"`
}

func adminGet(t *testing.T, srv *servertest.Server, id string) jobDetail {
	t.Helper()
	r := srv.Do(t, srv.AdminKey, "GET", "/v1/jobs/"+id+"?include=payload,attempts", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var j jobDetail
	r.JSON(t, &j)
	return j
}

// awaitStatus polls the job until it has status.
func awaitStatus(t *testing.T, srv *servertest.Server, id, status string) jobDetail {
	t.Helper()
	var j jobDetail
	servertest.Eventually(t, 30*time.Second, "job "+id+" "+status, func() bool {
		j = adminGet(t, srv, id)
		return j.Status == status
	})
	return j
}

// cli runs docket with the server and key in its environment.
func cli(t *testing.T, srv *servertest.Server, key string, args ...string) *servertest.Result {
	t.Helper()
	return servertest.Run(t, "", map[string]string{"DOCKET_SERVER": srv.URL, "DOCKET_API_KEY": key}, args...)
}

// cliJSON runs docket … -o json, requires success and decodes stdout.
func cliJSON(t *testing.T, srv *servertest.Server, key string, out any, args ...string) {
	t.Helper()
	res := cli(t, srv, key, append(args, "-o", "json")...)
	require.Equal(t, 0, res.Code, "docket %s\nstderr: %s", strings.Join(args, " "), res.Stderr)
	require.NoError(t, json.Unmarshal([]byte(res.Stdout), out), res.Stdout)
}

// cliProblem runs a command that must fail with the server's problem.
func cliProblem(t *testing.T, srv *servertest.Server, key, prefix string, args ...string) string {
	t.Helper()
	res := cli(t, srv, key, args...)
	require.Equal(t, 1, res.Code, "docket %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.Stdout, res.Stderr)
	require.Empty(t, res.Stdout)
	require.True(t, strings.HasPrefix(res.Stderr, prefix), "stderr %q should start with %q", res.Stderr, prefix)
	require.Equal(t, 1, strings.Count(res.Stderr, "\n"), "one line: %q", res.Stderr)
	return res.Stderr
}

func TestCLIJobCommands(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		srv := servertest.Start(t, servertest.Options{DatabaseURL: backend.URL(t), Env: servertest.FastEnv()})
		producer := srv.CreateKey(t, "producer", "cli-producer")
		viewer := srv.CreateKey(t, "viewer", "cli-viewer")

		// submit, and again with the same idempotency key: the same job.
		var first, again jobDetail
		submitArgs := []string{"job", "submit", "email.send", `{"to": "ada@example.com"}`, "--queue", "mail", "--priority", "2", "--idempotency-key", "welcome-ada"}
		cliJSON(t, srv, producer, &first, submitArgs...)
		require.Equal(t, "QUEUED", first.Status)
		require.Equal(t, "email.send", first.JobType)
		cliJSON(t, srv, producer, &again, submitArgs...)
		require.Equal(t, first.JobID, again.JobID)
		j := adminGet(t, srv, first.JobID)
		require.Equal(t, "mail", j.Queue)
		require.Equal(t, 2, j.Priority)
		require.JSONEq(t, `{"to": "ada@example.com"}`, string(j.Payload))

		// Table output.
		res := cli(t, srv, producer, "job", "submit", "email.send", "--queue", "mail")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Regexp(t, `(?m)^JOB ID\s+TYPE\s+STATUS\s+CREATED$`, res.Stdout)
		require.Regexp(t, `(?m)^[0-9a-f-]{36}\s+email\.send\s+QUEUED\s+\S+$`, res.Stdout)
		second := strings.Fields(strings.Split(res.Stdout, "\n")[1])[0]

		res = cli(t, srv, viewer, "job", "get", first.JobID)
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Regexp(t, `(?m)^Job ID:\s+`+first.JobID+`$`, res.Stdout)
		require.Regexp(t, `(?m)^Queue:\s+mail$`, res.Stdout)
		require.Regexp(t, `(?m)^Priority:\s+2$`, res.Stdout)
		require.NotContains(t, res.Stdout, "ada@example.com", "a viewer never sees the payload")

		res = cli(t, srv, srv.AdminKey, "job", "get", first.JobID, "--include", "payload,attempts")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Regexp(t, `(?m)^Payload:\s+\{"to":"ada@example.com"\}$`, res.Stdout)
		require.Regexp(t, `(?m)^Attempt:\s+0 of 25$`, res.Stdout)

		// list: newest first, one page at a time.
		var page struct {
			Items      []jobDetail `json:"items"`
			NextCursor *string     `json:"nextCursor"`
		}
		cliJSON(t, srv, viewer, &page, "job", "list", "--queue", "mail")
		require.Len(t, page.Items, 2)
		require.Equal(t, []string{second, first.JobID}, []string{page.Items[0].JobID, page.Items[1].JobID})
		require.Nil(t, page.NextCursor)
		res = cli(t, srv, viewer, "job", "list", "--queue", "mail", "--limit", "1")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Contains(t, res.Stdout, second)
		require.NotContains(t, res.Stdout, first.JobID)
		m := regexp.MustCompile(`more jobs: add --cursor (\S+)`).FindStringSubmatch(res.Stderr)
		require.NotNil(t, m, res.Stderr)
		res = cli(t, srv, viewer, "job", "list", "--queue", "mail", "--limit", "1", "--cursor", m[1])
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Contains(t, res.Stdout, first.JobID)
		require.Empty(t, res.Stderr, "the last page has no next cursor")
		cliJSON(t, srv, viewer, &page, "job", "list", "--status", "queued", "--job-type", "email.send", "--priority", "2")
		require.Len(t, page.Items, 1)

		// cancel, retry.
		var after jobDetail
		cliJSON(t, srv, producer, &after, "job", "cancel", first.JobID)
		require.Equal(t, "CANCELED", after.Status)
		res = cli(t, srv, producer, "job", "retry", first.JobID)
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Regexp(t, `(?m)^`+first.JobID+`\s+email\.send\s+mail\s+QUEUED\s+2\s`, res.Stdout)

		// Problems: one line, "docket: <status> <title>: <detail>", exit 1.
		cliProblem(t, srv, producer, "docket: 404 Not found: ", "job", "get", "01964c5e-8a4b-7c1e-9f3a-2b5d6e7f8a9b")
		cliProblem(t, srv, producer, "docket: 400 Invalid request: ", "job", "cancel", "not-a-uuid")
		msg := cliProblem(t, srv, producer, "docket: 400 Invalid request: ", "job", "submit", "email.send", "--priority", "12")
		require.Contains(t, msg, "priority")
		// An explicit zero is sent, and refused, not taken for the default.
		msg = cliProblem(t, srv, producer, "docket: 400 Invalid request: ", "job", "submit", "email.send", "--max-attempts", "0")
		require.Contains(t, msg, "maxAttempts")
		cliProblem(t, srv, producer, "docket: 422 ", "job", "submit", "email.send", `{"to": "bob@example.com"}`, "--queue", "mail", "--priority", "2", "--idempotency-key", "welcome-ada")
		cliProblem(t, srv, viewer, "docket: 403 Forbidden: ", "job", "submit", "email.send")
		cliProblem(t, srv, producer, "docket: 403 Forbidden: ", "job", "get", first.JobID, "--include", "payload")
		cliProblem(t, srv, "dk_not_a_key_at_all_0000000000", "docket: 401 Unauthorized: ", "job", "list")
		// No key at all is a wrong command line: exit 2.
		res = cli(t, srv, "", "job", "list")
		require.Equal(t, 2, res.Code, res.Stderr)
		require.True(t, strings.HasPrefix(res.Stderr, "docket: no API key"), res.Stderr)
	})
}

// workerScript is the program the worker tests run per job: what it does
// depends on the job type.
const workerScript = `#!/bin/sh
case "$DOCKET_JOB_TYPE" in
  echo) cat ;;
  whoami) printf '{"job":"%s","type":"%s","queue":"%s","attempt":%s,"lease":"%s"}' \
      "$DOCKET_JOB_ID" "$DOCKET_JOB_TYPE" "$DOCKET_QUEUE" "$DOCKET_ATTEMPT" "$DOCKET_LEASE_ID" ;;
  busy) echo "noise first" >&2; echo "still busy, try later" >&2; exit 75 ;;
  broken) echo "noise first" >&2; echo "boom" >&2; exit 1 ;;
  notjson) echo "hello" ;;
  refused) printf '{"s":"a\\u0000b"}' ;;
  garbled) printf 'bad\000thing\377' >&2; exit 1 ;;
  gated) while [ ! -e "$GATES/$DOCKET_JOB_ID" ]; do sleep 0.02; done; echo '{"released":true}' ;;
  forever) while true; do sleep 0.02; done ;;
  *) echo "unknown job type $DOCKET_JOB_TYPE" >&2; exit 2 ;;
esac
`

// workerProc is a running docket worker.
type workerProc struct {
	cmd    *exec.Cmd
	stderr *servertest.SyncBuffer
	done   chan struct{}
}

// startWorker runs docket worker --exec 'sh SCRIPT' with args; env is
// added to its environment (and so its programs'). It is stopped when the
// test ends.
func startWorker(t *testing.T, srv *servertest.Server, key string, env map[string]string, args ...string) *workerProc {
	t.Helper()
	script := filepath.Join(t.TempDir(), "job.sh")
	require.NoError(t, os.WriteFile(script, []byte(workerScript), 0o755))
	args = append([]string{"worker", "--exec", "sh " + script}, args...)
	w := &workerProc{cmd: exec.Command(servertest.Binary(t), args...), stderr: &servertest.SyncBuffer{}, done: make(chan struct{})}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOCKET_") {
			w.cmd.Env = append(w.cmd.Env, kv)
		}
	}
	w.cmd.Env = append(w.cmd.Env, "DOCKET_SERVER="+srv.URL, "DOCKET_API_KEY="+key)
	for k, v := range env {
		w.cmd.Env = append(w.cmd.Env, k+"="+v)
	}
	w.cmd.Stderr = w.stderr
	require.NoError(t, w.cmd.Start())
	go func() { _ = w.cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		w.stop(t)
		if t.Failed() {
			t.Logf("docket worker stderr:\n%s", w.stderr.String())
		}
	})
	return w
}

// stop sends SIGTERM and waits for the worker to exit; it returns the exit
// code.
func (w *workerProc) stop(t *testing.T) int {
	t.Helper()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	return w.wait(t)
}

func (w *workerProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(60 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
		t.Errorf("docket worker did not exit within 60s; killed")
	}
	return w.cmd.ProcessState.ExitCode()
}

// The exit status of the program decides: 0 SUCCESS with stdout as the
// result, 75 a retryable failure, anything else DEAD; stderr's tail is the
// error.
func TestCLIWorkerExec(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		env := servertest.FastEnv()
		// Retries wait an hour, so a retryable failure stays in RETRY.
		env["DOCKET_RETRY_BACKOFF_BASE"], env["DOCKET_RETRY_BACKOFF_MAX"] = "1h", "1h"
		srv := servertest.Start(t, servertest.Options{DatabaseURL: backend.URL(t), Env: env})
		producer := srv.CreateKey(t, "producer", "cli-producer")
		workerKey := srv.CreateKey(t, "worker", "cli-worker")

		ids := map[string]string{}
		for typ, payload := range map[string]string{
			"echo": `{"n": 1, "s": "ünïcode \"quoted\"", "list": [1, 2]}`, "whoami": `{}`,
			"busy": `{}`, "broken": `{}`, "notjson": `{}`, "refused": `{}`, "garbled": `{}`,
		} {
			var j jobDetail
			cliJSON(t, srv, producer, &j, "job", "submit", typ, payload, "--queue", "exec", "--max-attempts", "5")
			ids[typ] = j.JobID
		}
		startWorker(t, srv, workerKey, nil, "--queue", "other", "--queue", "exec", "--concurrency", "3",
			"--worker-id", "cli-worker-1", "--wait-seconds", "1")

		j := awaitStatus(t, srv, ids["echo"], "SUCCESS")
		require.JSONEq(t, `{"n": 1, "s": "ünïcode \"quoted\"", "list": [1, 2]}`, string(j.Result), "stdout is the result")
		require.Equal(t, "cli-worker-1", j.Attempts[0].Node)

		j = awaitStatus(t, srv, ids["whoami"], "SUCCESS")
		var who struct {
			Lease string `json:"lease"`
		}
		require.NoError(t, json.Unmarshal(j.Result, &who))
		require.Regexp(t, `^`+ids["whoami"]+`\.1\.[A-Za-z0-9_-]{22}$`, who.Lease, "the lease id as given, its token too")
		require.JSONEq(t, `{"job":"`+ids["whoami"]+`","type":"whoami","queue":"exec","attempt":1,"lease":"`+who.Lease+`"}`, string(j.Result))

		j = awaitStatus(t, srv, ids["busy"], "RETRY")
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, "noise first\nstill busy, try later", j.LastError)

		j = awaitStatus(t, srv, ids["broken"], "DEAD")
		require.Equal(t, 1, j.Attempt, "a fatal failure is not retried")
		require.Equal(t, "noise first\nboom", j.LastError)

		j = awaitStatus(t, srv, ids["notjson"], "DEAD")
		require.Contains(t, j.LastError, "not JSON")

		// A result the server refuses (PostgreSQL could not store it) fails
		// the job, rather than leaving it RUNNING until its lease expires.
		j = awaitStatus(t, srv, ids["refused"], "DEAD")
		require.Equal(t, 1, j.Attempt)
		require.Contains(t, j.LastError, "refused the program's result")
		require.Contains(t, j.LastError, "NUL")

		// A NUL or bytes that are not UTF-8 on stderr are kept as U+FFFD.
		j = awaitStatus(t, srv, ids["garbled"], "DEAD")
		require.Equal(t, "bad\uFFFDthing\uFFFD", j.LastError)
	})
}

// Canceling a running job stops its program; SIGTERM lets running programs
// finish until the shutdown timeout, then stops them and gives their jobs
// back.
func TestCLIWorkerCancelAndShutdown(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{DatabaseURL: testdb.SQLiteMigratedURL(t), Env: servertest.FastEnv()})
	gates := t.TempDir()
	ids := map[string]string{}
	for _, typ := range []string{"forever", "gated"} {
		ids[typ] = submit(t, srv, srv.AdminKey, map[string]any{"jobType": typ, "queue": "q"}).JobID
	}
	ids["cancel-me"] = submit(t, srv, srv.AdminKey, map[string]any{"jobType": "forever", "queue": "q"}).JobID
	w := startWorker(t, srv, srv.AdminKey, map[string]string{"GATES": gates},
		"--queue", "q", "--concurrency", "3", "--lease-seconds", "5", "--wait-seconds", "1", "--shutdown-timeout", "3s")
	for _, id := range ids {
		awaitStatus(t, srv, id, "RUNNING")
	}

	r := srv.Do(t, srv.AdminKey, "POST", "/v1/jobs/"+ids["cancel-me"]+"/cancel", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), `"cancelRequested":true`)
	j := awaitStatus(t, srv, ids["cancel-me"], "CANCELED") // at the next heartbeat
	require.Equal(t, "canceled", j.Attempts[0].Outcome)

	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	servertest.Eventually(t, 30*time.Second, "the worker to start draining", func() bool {
		return strings.Contains(w.stderr.String(), "stopping: waiting for running jobs")
	})
	require.NoError(t, os.WriteFile(filepath.Join(gates, ids["gated"]), nil, 0o600))
	j = awaitStatus(t, srv, ids["gated"], "SUCCESS")
	require.JSONEq(t, `{"released":true}`, string(j.Result), "a program that finishes within the shutdown timeout completes its job")

	require.Equal(t, 0, w.wait(t), "a drained worker exits 0")
	j = adminGet(t, srv, ids["forever"])
	require.Contains(t, []string{"RETRY", "QUEUED"}, j.Status, "stopped at the shutdown timeout: given back")
	require.Contains(t, j.LastError, "shut down before the program finished")
	require.Equal(t, "interrupted", j.Attempts[0].Outcome)
}

// A remote worker stopped in the middle of a job on its last attempt gives
// the job back (POST /v1/leases/{id}/release): it is queued again with the
// attempt refunded, and a new worker completes it. A deploy never kills a
// job on its last attempt (docs/operations.md).
func TestCLIWorkerShutdownReleasesLastAttempt(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		srv := servertest.Start(t, servertest.Options{DatabaseURL: backend.URL(t), Env: servertest.FastEnv()})
		var j jobDetail
		cliJSON(t, srv, srv.AdminKey, &j, "job", "submit", "gated", "{}", "--queue", "slow.one", "--max-attempts", "1")
		id := j.JobID

		// The first worker's program waits for a gate that never opens.
		w1 := startWorker(t, srv, srv.AdminKey, map[string]string{"GATES": t.TempDir()},
			"--queue", "slow.one", "--wait-seconds", "1", "--shutdown-timeout", "1s", "--worker-id", "w1")
		awaitStatus(t, srv, id, "RUNNING")
		require.Equal(t, 0, w1.stop(t), "a worker stopped past its shutdown timeout exits 0")
		require.Contains(t, w1.stderr.String(), "job given back")

		j = adminGet(t, srv, id)
		require.Contains(t, []string{"RETRY", "QUEUED"}, j.Status, "not DEAD: the attempt was given back")
		require.Equal(t, "worker w1 shut down before the program finished", j.LastError)
		require.Len(t, j.Attempts, 1)
		require.Equal(t, "interrupted", j.Attempts[0].Outcome)
		awaitStatus(t, srv, id, "QUEUED")

		// A new worker, whose gate is open, completes it.
		open := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(open, id), nil, 0o600))
		startWorker(t, srv, srv.AdminKey, map[string]string{"GATES": open},
			"--queue", "slow.one", "--wait-seconds", "1", "--worker-id", "w2")
		j = awaitStatus(t, srv, id, "SUCCESS")
		require.JSONEq(t, `{"released":true}`, string(j.Result))
		require.Len(t, j.Attempts, 2)
		require.Equal(t, "w2", j.Attempts[1].Node)
		require.Equal(t, "success", j.Attempts[1].Outcome)
	})
}

// A worker whose key or program cannot work says so and exits 1 instead of
// retrying forever.
func TestCLIWorkerRefusals(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{DatabaseURL: testdb.SQLiteMigratedURL(t), Env: servertest.FastEnv()})
	viewer := srv.CreateKey(t, "viewer", "cli-viewer")

	res := cli(t, srv, viewer, "worker", "--queue", "q", "--exec", "cat")
	require.Equal(t, 1, res.Code, res.Stderr)
	require.Contains(t, res.Stderr, "docket: 403 Forbidden: ")

	res = cli(t, srv, srv.AdminKey, "worker", "--queue", "q", "--exec", "no-such-program-docket --flag")
	require.Equal(t, 1, res.Code, res.Stderr)
	require.Contains(t, res.Stderr, `docket: --exec: exec: "no-such-program-docket"`)

	// A wrong command line exits 2 (docs/operations.md, Exit status).
	res = cli(t, srv, srv.AdminKey, "worker", "--queue", "q", "--exec", `sh -c "unterminated`)
	require.Equal(t, 2, res.Code, res.Stderr)
	require.Contains(t, res.Stderr, "docket: --exec: unterminated")

	res = cli(t, srv, srv.AdminKey, "worker", "--exec", "cat")
	require.Equal(t, 2, res.Code, res.Stderr)
	require.Contains(t, res.Stderr, "docket: --queue is required")
}
