package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/remote"
)

func TestSplitCommandLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   ", nil},
		{"cat", []string{"cat"}},
		{"  ./run --size 128  ", []string{"./run", "--size", "128"}},
		{`sh -c "cat; exit 0"`, []string{"sh", "-c", "cat; exit 0"}},
		{`sh -c 'echo "$HOME"'`, []string{"sh", "-c", `echo "$HOME"`}},
		{`a"b c"d`, []string{"ab cd"}},
		{`say "a \"quoted\" \$word \\ \n"`, []string{"say", `a "quoted" $word \ \n`}},
		{`one\ word two`, []string{"one word", "two"}},
		{`''`, []string{""}},
		{`x "" y`, []string{"x", "", "y"}},
		{"a\\\nb", []string{"ab"}},
		{"a\tb\nc", []string{"a", "b", "c"}},
	} {
		got, err := splitCommandLine(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{`sh -c "cat`, `it's`, `end\`} {
		_, err := splitCommandLine(bad)
		require.Error(t, err, bad)
	}
}

func FuzzSplitCommandLine(f *testing.F) {
	for _, s := range []string{`sh -c "cat; exit 0"`, `a'b'c`, `x\ y`, `"\""`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := splitCommandLine(s)
		if err != nil {
			return
		}
		// Quoting each word back gives the same words.
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
		again, err := splitCommandLine(strings.Join(quoted, " "))
		require.NoError(t, err)
		require.Equal(t, words, again)
	})
}

func TestOutputBuffers(t *testing.T) {
	t.Parallel()
	c := &cappedBuffer{max: 5}
	n, err := c.Write([]byte("abc"))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.False(t, c.overflow)
	n, _ = c.Write([]byte("defg"))
	require.Equal(t, 4, n, "a full buffer still takes every byte: the program must not block")
	require.True(t, c.overflow)
	require.Equal(t, "abcde", c.String())

	tail := &tailBuffer{max: 4}
	for _, s := range []string{"ab", "cdef", "g"} {
		_, _ = tail.Write([]byte(s))
	}
	require.Equal(t, "defg", tail.String())
}

func TestDefaultWorkerIDIsAName(t *testing.T) {
	t.Parallel()
	id := defaultWorkerID()
	require.NotEmpty(t, id)
	for _, c := range id {
		require.True(t, c < 128 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-:/", c)), "%q", id)
	}
}

// TestExecEnvironment: the program gets the job's variables and the
// worker's environment, but not the worker's API key nor an admin key.
func TestExecEnvironment(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	t.Setenv("DOCKET_API_KEY", "dk_worker-secret")
	t.Setenv("DOCKET_ADMIN_KEY", "admin-secret-0123456789")
	t.Setenv("DOCKET_TEST_OTHER", "kept")
	w := &remoteWorker{cfg: workerConfig{
		Argv: []string{sh, "-c", `printf '{"api":"%s","admin":"%s","other":"%s","job":"%s"}' ` +
			`"${DOCKET_API_KEY-unset}" "${DOCKET_ADMIN_KEY-unset}" "$DOCKET_TEST_OTHER" "$DOCKET_JOB_ID"`},
		KillGrace: time.Second,
	}}
	jobID := uuid.MustParse("0192f0c4-7a5e-7cc1-9e3f-3b2a1c0d9e8f")
	out, execErr := w.execute(t.Context(), remote.Lease{LeaseID: jobID.String() + ".1", JobID: jobID, JobType: "t", Queue: "q", Attempt: 1})
	require.Nil(t, execErr)
	require.JSONEq(t, `{"api":"unset","admin":"unset","other":"kept","job":"`+jobID.String()+`"}`, string(out))

	require.Equal(t, []string{"A=1", "DOCKET_QUEUE=x", "B=docket_api_key="},
		childEnviron([]string{"A=1", "DOCKET_API_KEY=k", "DOCKET_QUEUE=x", "docket_admin_key=k", "B=docket_api_key=", "DOCKET_ADMIN_KEY="}))
}

// TestExecLeftoverChild: a program that exits 0 but leaves a process of
// its own holding its stdout (a daemon started with &) succeeded with what
// it printed; it is not a failure to retry (each retry leaving one more).
func TestExecLeftoverChild(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	w := &remoteWorker{cfg: workerConfig{
		Argv:      []string{sh, "-c", `sleep 4 & echo '{"done":true}'`},
		KillGrace: time.Millisecond, // the pipes are let go 2 s after the exit
	}}
	jobID := uuid.MustParse("0192f0c4-7a5e-7cc1-9e3f-3b2a1c0d9e8f")
	out, execErr := w.execute(t.Context(), remote.Lease{LeaseID: jobID.String() + ".1", JobID: jobID, JobType: "t", Queue: "q", Attempt: 1})
	require.Nil(t, execErr)
	require.JSONEq(t, `{"done":true}`, string(out))
}

// TestReportOutlastsAShortOutage: a server that answers 5xx for a few
// seconds (its database restarting) does not cost a finished job its
// result: the worker sends the completion again for as long as its lease
// lasts, not five times (about 4 s); and it gives up once the lease is
// over, when another attempt may have the job.
func TestReportOutlastsAShortOutage(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// serve answers every heartbeat, and each completion with 500 until
	// failFor has passed since the first one.
	serve := func(failFor time.Duration) (*remote.Client, *atomic.Int32, *atomic.Bool) {
		var tries atomic.Int32
		var done atomic.Bool
		var first atomic.Int64
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/leases/{id}/heartbeat", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"expiresAt":"2026-01-01T00:00:00Z","cancelRequested":false}`)
		})
		mux.HandleFunc("POST /v1/leases/{id}/complete", func(w http.ResponseWriter, r *http.Request) {
			tries.Add(1)
			first.CompareAndSwap(0, time.Now().UnixNano())
			if time.Since(time.Unix(0, first.Load())) < failFor {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, `{"type":"https://docket.dev/problems/internal","title":"Internal error","status":500}`)
				return
			}
			done.Store(true)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"status":"SUCCESS"}`)
		})
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		c, err := remote.NewClient(srv.URL, "dk_test", nil)
		require.NoError(t, err)
		return c, &tries, &done
	}
	jobID := uuid.MustParse("0192f0c4-7a5e-7cc1-9e3f-3b2a1c0d9e8f")
	lease := remote.Lease{LeaseID: jobID.String() + ".1.token", JobID: jobID, JobType: "t", Queue: "q", Attempt: 1}
	worker := func(c *remote.Client) *remoteWorker {
		return &remoteWorker{api: c, cfg: workerConfig{
			Argv: []string{sh, "-c", "exit 0"}, LeaseSeconds: remote.LeaseSecondsMin, KillGrace: time.Second,
			WorkerID: "w", Logger: slog.New(slog.DiscardHandler),
		}}
	}

	t.Run("outage shorter than the lease", func(t *testing.T) {
		t.Parallel()
		c, tries, done := serve(4 * time.Second)
		worker(c).runJob(t.Context(), lease)
		require.True(t, done.Load(), "the completion was given up after %d tries", tries.Load())
	})
	t.Run("outage longer than the lease", func(t *testing.T) {
		t.Parallel()
		c, _, done := serve(time.Hour)
		start := time.Now()
		worker(c).runJob(t.Context(), lease)
		require.False(t, done.Load())
		took := time.Since(start)
		lease := time.Duration(remote.LeaseSecondsMin) * time.Second
		require.Less(t, took, lease+2*time.Second, "tried on well past the lease")
	})
}
