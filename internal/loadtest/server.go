package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/docket-run/docket/internal/spawn"
)

// serverStopTimeout is how long the server may take to shut down after
// SIGTERM before it is killed; above its DOCKET_SHUTDOWN_TIMEOUT.
const (
	serverShutdown    = 10 * time.Second
	serverStopTimeout = serverShutdown + 5*time.Second
)

// listeningLine is what docket serve writes on stderr once it listens.
var listeningLine = regexp.MustCompile(`^docket listening on (http://\S+) \(backend (\w+)\)$`)

// server is the run's one `docket serve` process. Its stdout and stderr go
// to serve.log in its directory.
type server struct {
	url     string
	backend string
	log     string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	waited  error
}

// startServer starts docket serve on a free loopback port and waits until
// it listens. The process is in a process group of its own (a ^C in the
// terminal is this program's to handle) and, on Linux, is killed if this
// program dies.
func startServer(ctx context.Context, cfg Config, adminKey string) (*server, error) {
	s := &server{log: filepath.Join(cfg.Dir, "serve.log"), done: make(chan struct{})}
	logFile, err := os.Create(s.log)
	if err != nil {
		return nil, fmt.Errorf("create the server log: %w", err)
	}
	s.cmd = exec.Command(cfg.DocketBin, "serve", "--listen", "127.0.0.1:0", "--database-url", cfg.DatabaseURL)
	s.cmd.Dir = cfg.Dir
	s.cmd.Env = append(spawn.EnvWithout("DOCKET_"),
		"DOCKET_ADMIN_KEY="+adminKey,
		"DOCKET_NODE_ID=load-serve",
		"DOCKET_SHUTDOWN_TIMEOUT="+serverShutdown.String())
	// The embedded bus's storage in the run's directory, unless the run
	// gives an external NATS (serve refuses both).
	if !slices.ContainsFunc(cfg.ServeEnv, func(kv string) bool { return strings.HasPrefix(kv, "DOCKET_NATS_URL=") && kv != "DOCKET_NATS_URL=" }) {
		s.cmd.Env = append(s.cmd.Env, "DOCKET_NATS_DIR="+filepath.Join(cfg.Dir, "nats"))
	}
	s.cmd.Env = append(s.cmd.Env, cfg.ServeEnv...)
	s.cmd.Stdout = logFile
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		_ = logFile.Close()
		return nil, err
	}
	s.cmd.SysProcAttr = childAttr()
	if err := s.cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s serve: %w", cfg.DocketBin, err)
	}
	listening := make(chan []string, 1)
	copied := make(chan struct{})
	go func() {
		// Every line goes to the log; the listening line is also reported.
		defer close(copied)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = fmt.Fprintln(logFile, line)
			if m := listeningLine.FindStringSubmatch(line); m != nil {
				select {
				case listening <- m:
				default:
				}
			}
		}
		_, _ = io.Copy(logFile, stderr) // a line too long for the scanner
	}()
	go func() {
		<-copied // Wait closes the pipe: read it to the end first
		s.waited = s.cmd.Wait()
		_ = logFile.Close()
		close(s.done)
	}()

	timeout := time.NewTimer(cfg.StartTimeout)
	defer timeout.Stop()
	select {
	case m := <-listening:
		s.url, s.backend = m[1], m[2]
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("docket serve exited at start (%v):\n%s", s.waited, s.tail(20))
	case <-timeout.C:
		s.stop()
		return nil, fmt.Errorf("docket serve did not listen within %v:\n%s", cfg.StartTimeout, s.tail(20))
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}

// exited reports whether the process has ended.
func (s *server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits for the exit, SIGKILL after
// serverStopTimeout. It returns the exit error of a shutdown that was not
// clean. Stopping twice is harmless.
func (s *server) stop() error {
	if s.exited() {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return s.waited
	case <-time.After(serverStopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("docket serve did not exit within %v of SIGTERM; killed", serverStopTimeout)
	}
}

// tail is the last n lines of the server's log.
func (s *server) tail(n int) string {
	data, err := os.ReadFile(s.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// errServerExited: the server ended while the run needed it.
var errServerExited = errors.New("docket serve exited during the run")
