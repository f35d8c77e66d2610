// Package servertest runs the real docket binary for black-box tests: it
// builds cmd/docket once per test process, starts `docket serve` on a
// loopback port with the given database and environment, captures the
// bootstrap admin key, and drives the server over HTTP only.
//
//	func TestMain(m *testing.M) { servertest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		srv := servertest.Start(t, servertest.Options{DatabaseURL: testdb.SQLiteURL(t), Env: servertest.FastEnv()})
//		res := srv.Do(t, srv.AdminKey, "POST", "/v1/jobs", map[string]any{"jobType": "email"})
//		…
//	}
//
// Servers are stopped (SIGTERM, then waited for) when the test ends; a test
// that fails logs the server's stderr.
package servertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docket-run/docket/internal/spawn"
)

// Deadlines of the harness. Generous: they bound failures, they are not
// waited for when things work.
const (
	startTimeout = 60 * time.Second
	stopTimeout  = 30 * time.Second
	runTimeout   = 60 * time.Second
	httpTimeout  = 60 * time.Second // above the longest long poll (30 s)
)

// A build of the docket command, made once per test process.
type build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

var (
	// raceBuild is built with -race when the tests are; plainBuild never is.
	raceBuild, plainBuild build
)

// Main runs the package's tests, then removes the built binaries. Use it
// as the package's TestMain.
func Main(m *testing.M) {
	code := m.Run()
	for _, b := range []*build{&raceBuild, &plainBuild} {
		if b.dir != "" {
			_ = os.RemoveAll(b.dir)
		}
	}
	os.Exit(code)
}

// Binary builds the docket command once per test process and returns its
// path. When the tests run with -race, so does the binary.
func Binary(t testing.TB) string {
	t.Helper()
	return raceBuild.path(t, raceEnabled)
}

// PlainBinary is Binary built without the race detector, whatever the
// tests run with: for long runs whose subject is what the server answers,
// not its concurrency (the docs' examples, whose walkthrough judges 1,000
// units three times: 5.4 minutes of a 6-minute limit under -race on SQLite
// beside the suite). Its packages are compiled already when go vet ran
// first, as in scripts/test.sh, so it costs a link.
func PlainBinary(t testing.TB) string {
	t.Helper()
	return plainBuild.path(t, false)
}

func (b *build) path(t testing.TB, race bool) string {
	t.Helper()
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "docket-servertest-")
		if b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, "docket")
		args := []string{"build", "-o", b.bin}
		if race {
			// With the flags scripts/test.sh gives the tests (checkptr off
			// in modernc.org's translated C only), so that the race build
			// reuses their compiled packages instead of compiling SQLite's
			// a second time, and its SQLite runs as fast as theirs.
			args = append(args, "-race", "-gcflags=modernc.org/...=-d=checkptr=0")
		}
		args = append(args, "github.com/docket-run/docket/cmd/docket")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build cmd/docket: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// FastEnv is short engine timings for tests: leases are rescued, retries
// queued and leadership handed over within a second or so, so tests poll
// briefly instead of waiting out production intervals.
func FastEnv() map[string]string {
	return map[string]string{
		"DOCKET_RESCUE_INTERVAL":    "100ms",
		"DOCKET_SCHEDULER_INTERVAL": "50ms",
		"DOCKET_POLL_INTERVAL":      "100ms",
		"DOCKET_LEADER_TTL":         "1s",
		"DOCKET_RETRY_BACKOFF_BASE": "10ms",
		"DOCKET_RETRY_BACKOFF_MAX":  "100ms",
		"DOCKET_SHUTDOWN_TIMEOUT":   "10s",
	}
}

// NewAdminKey returns a random secret fit for DOCKET_ADMIN_KEY.
func NewAdminKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "test_admin_" + hex.EncodeToString(b[:])
}

// Options of a server.
type Options struct {
	// DatabaseURL is passed as --database-url; "" runs on the embedded
	// default (sqlite:docket.db in Dir).
	DatabaseURL string
	// Dir is the working directory; default a new temporary directory.
	Dir string
	// Env is added to the environment. Every DOCKET_* variable of the test
	// process is removed first, so only these reach the server.
	Env map[string]string
	// Args are more flags of docket serve. --listen 127.0.0.1:0 is always
	// given first (a later --listen wins).
	Args []string
	// Plain runs PlainBinary instead of Binary.
	Plain bool
}

// Server is one running `docket serve`.
type Server struct {
	// URL is the base URL, http://127.0.0.1:PORT.
	URL string
	// Backend is "sqlite" or "postgres", as the listening line says.
	Backend string
	// BootstrapKey is the admin secret the server printed on stdout at
	// start, "" when it printed none.
	BootstrapKey string
	// AdminKey is DOCKET_ADMIN_KEY when set, else BootstrapKey (or, after
	// Restart, the previous server's AdminKey).
	AdminKey string

	opts   Options
	cmd    *exec.Cmd
	stdout *SyncBuffer
	stderr *lineWriter
	done   chan struct{} // closed when the process has exited
	waited error
	http   *http.Client
}

var listeningLine = regexp.MustCompile(`^docket listening on (http://\S+) \(backend (\w+)\)$`)

// bootstrapNotice is the stderr line announcing a generated admin key.
const bootstrapNotice = "no API key existed"

// Start starts docket serve and waits until it listens. The server is
// stopped when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	var bin string
	if opts.Plain {
		bin = PlainBinary(t)
	} else {
		bin = Binary(t)
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	args := []string{"serve", "--listen", "127.0.0.1:0"}
	if opts.DatabaseURL != "" {
		args = append(args, "--database-url", opts.DatabaseURL)
	}
	args = append(args, opts.Args...)
	s := &Server{
		opts:   opts,
		cmd:    exec.Command(bin, args...),
		stdout: &SyncBuffer{},
		stderr: newLineWriter(),
		done:   make(chan struct{}),
		http:   &http.Client{Timeout: httpTimeout, Transport: &http.Transport{}},
	}
	s.cmd.Dir = opts.Dir
	s.cmd.Env = environ(opts.Env)
	s.cmd.Stdout = s.stdout
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start docket serve: %v", err)
	}
	go func() {
		s.waited = s.cmd.Wait()
		s.stderr.close()
		close(s.done)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("docket serve stderr:\n%s", s.Stderr())
		}
		s.stop(t, syscall.SIGTERM)
	})

	line, ok := s.stderr.waitFor(func(l string) bool { return listeningLine.MatchString(l) }, startTimeout)
	if !ok {
		s.stop(t, syscall.SIGKILL)
		t.Fatalf("docket serve did not report listening within %v (exit: %v); stderr:\n%s", startTimeout, s.waited, s.Stderr())
	}
	m := listeningLine.FindStringSubmatch(line)
	s.URL, s.Backend = m[1], m[2]
	s.AdminKey = opts.Env["DOCKET_ADMIN_KEY"]
	// The notice precedes the listening line on stderr and the secret was
	// written to stdout before it; wait for the pipe to deliver it.
	if strings.Contains(s.stderr.String(), bootstrapNotice) {
		deadline := time.Now().Add(startTimeout)
		for !strings.HasSuffix(s.stdout.String(), "\n") {
			if time.Now().After(deadline) {
				t.Fatalf("docket serve announced a bootstrap key but printed none on stdout")
			}
			time.Sleep(5 * time.Millisecond)
		}
		s.BootstrapKey = strings.TrimSpace(s.stdout.String())
		if s.AdminKey == "" {
			s.AdminKey = s.BootstrapKey
		}
	}
	return s
}

// Restart starts a new server with the same options (same directory,
// database and environment). Stop or Kill this one first.
func (s *Server) Restart(t testing.TB) *Server {
	t.Helper()
	n := Start(t, s.opts)
	if n.AdminKey == "" {
		n.AdminKey = s.AdminKey
	}
	return n
}

// Options returns the options the server was started with (Dir filled in).
func (s *Server) Options() Options { return s.opts }

// Stop sends SIGTERM and waits for the process to exit; it returns the
// exit code (0 for a clean shutdown). Stopping twice is harmless.
func (s *Server) Stop(t testing.TB) int {
	t.Helper()
	return s.stop(t, syscall.SIGTERM)
}

// Kill sends SIGKILL and waits: a crash, with no chance to clean up.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.stop(t, syscall.SIGKILL)
}

func (s *Server) stop(t testing.TB, sig syscall.Signal) int {
	t.Helper()
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Signal(sig)
		select {
		case <-s.done:
		case <-time.After(stopTimeout):
			_ = s.cmd.Process.Kill()
			<-s.done
			t.Errorf("docket serve did not exit within %v of %v; killed", stopTimeout, sig)
		}
	}
	s.http.CloseIdleConnections()
	return s.cmd.ProcessState.ExitCode()
}

// Exited reports whether the process has ended.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Stdout is everything the server printed on stdout so far.
func (s *Server) Stdout() string { return s.stdout.String() }

// Stderr is everything the server printed on stderr so far.
func (s *Server) Stderr() string { return s.stderr.String() }

// DatabaseURL is the URL given to the server ("" for the default).
func (s *Server) DatabaseURL() string { return s.opts.DatabaseURL }

// CreateKey makes an API key on the server's database with `docket keys
// create` and returns its secret.
func (s *Server) CreateKey(t testing.TB, role, name string) string {
	t.Helper()
	return CreateKey(t, s.opts.Dir, s.opts.DatabaseURL, role, name)
}

// CreateKey runs `docket keys create --role role --name name` in dir on
// databaseURL ("" for the default) and returns the secret: the last line of
// its stdout. The database must be migrated (docket keys never migrates):
// start a server on it first, or run docket migrate up.
func CreateKey(t testing.TB, dir, databaseURL, role, name string) string {
	t.Helper()
	args := []string{"keys", "create", "--role", role, "--name", name}
	if databaseURL != "" {
		args = append(args, "--database-url", databaseURL)
	}
	res := Run(t, dir, nil, args...)
	if res.Code != 0 {
		t.Fatalf("docket keys create: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	lines := strings.Split(strings.TrimRight(res.Stdout, "\n"), "\n")
	secret := lines[len(lines)-1]
	if secret == "" || strings.ContainsAny(secret, " \t") {
		t.Fatalf("docket keys create: the last line of stdout is not a secret: %q", res.Stdout)
	}
	return secret
}

// Result is the end of a docket command run to completion.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Run runs the docket binary with args in dir (a new temporary directory
// when "") with only env's DOCKET_* variables, and waits for it to exit.
func Run(t testing.TB, dir string, env map[string]string, args ...string) *Result {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t), args...)
	cmd.Dir = dir
	cmd.Env = environ(env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("docket %s did not exit within %v", strings.Join(args, " "), runTimeout)
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("run docket %s: %v", strings.Join(args, " "), err)
	}
	return &Result{Code: cmd.ProcessState.ExitCode(), Stdout: stdout.String(), Stderr: stderr.String()}
}

// environ is the test process's environment without DOCKET_* variables,
// plus env.
func environ(env map[string]string) []string {
	out := spawn.EnvWithout("DOCKET_")
	if raceEnabled {
		// The race runtime sleeps 1 s at exit by default.
		out = append(out, "GORACE=atexit_sleep_ms=0")
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// Response is an HTTP answer, read in full.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test when it does not decode.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode response (status %d): %v\n%s", r.Status, err, r.Body)
	}
}

// Do sends one request with key as the bearer key ("" for none). body is
// nil, a string or []byte (sent as is), or any other value (sent as JSON);
// headers are name, value pairs.
func (s *Server) Do(t testing.TB, key, method, path string, body any, headers ...string) *Response {
	t.Helper()
	res, err := s.Try(key, method, path, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return res
}

// Try is Do returning the error (for requests that may fail, such as
// those racing a shutdown).
func (s *Server) Try(key, method, path string, body any, headers ...string) (*Response, error) {
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	case []byte:
		rd = bytes.NewReader(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	return &Response{Status: res.StatusCode, Header: res.Header, Body: data}, nil
}

// Eventually polls cond every 20 ms until it holds, failing the test after
// within.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SyncBuffer is a bytes.Buffer safe for one writer and many readers (e.g.
// a child process's stderr read by a test while it runs).
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lineWriter keeps everything written and lets readers wait for a line.
type lineWriter struct {
	mu      sync.Mutex
	all     bytes.Buffer
	lines   []string
	partial []byte
	closed  bool
	changed chan struct{} // closed and replaced on every new line
}

func newLineWriter() *lineWriter { return &lineWriter{changed: make(chan struct{})} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.partial = append(w.partial, p...)
	added := false
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.lines = append(w.lines, string(w.partial[:i]))
		w.partial = w.partial[i+1:]
		added = true
	}
	if added {
		close(w.changed)
		w.changed = make(chan struct{})
	}
	return len(p), nil
}

func (w *lineWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

// waitFor returns the first line matching, waiting until it is written,
// the writer is closed (the process ended) or within passes.
func (w *lineWriter) waitFor(match func(string) bool, within time.Duration) (string, bool) {
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	seen := 0
	for {
		w.mu.Lock()
		for ; seen < len(w.lines); seen++ {
			if match(w.lines[seen]) {
				l := w.lines[seen]
				w.mu.Unlock()
				return l, true
			}
		}
		closed, changed := w.closed, w.changed
		w.mu.Unlock()
		if closed {
			return "", false
		}
		select {
		case <-changed:
		case <-timeout.C:
			return "", false
		}
	}
}
