package main

import (
	"os/exec"
	"strings"
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
