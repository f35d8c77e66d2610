package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// proc is one child process the run starts, kills and starts again. Its
// output is appended to a log file of its own.
type proc struct {
	name string
	argv []string
	env  []string
	dir  string
	log  string // path of the log file

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	killed  bool // the run ended it on purpose
	crashes int  // exits the run did not cause
	onCrash func(name string, err error)
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = p.env
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = f, f
	fmt.Fprintf(f, "--- chaos: start %s at %s\n", p.name, time.Now().UTC().Format(time.RFC3339Nano))
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.killed = cmd, done, false
	go func() {
		err := cmd.Wait()
		_ = f.Close()
		p.mu.Lock()
		unexpected := !p.killed && p.cmd == cmd
		if unexpected {
			p.crashes++
		}
		cb := p.onCrash
		p.mu.Unlock()
		close(done)
		if unexpected && cb != nil {
			cb(p.name, err)
		}
	}()
	return nil
}

// signal sends sig to the running process (no-op when none runs).
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// end sends sig and waits for the exit, SIGKILL after within.
func (p *proc) end(sig syscall.Signal, within time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.killed = true
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process cannot exit
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(within):
		_ = cmd.Process.Kill()
		<-done
	}
}

// pid is the process id of the running process (0 when none runs).
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// arg returns the value given after flag in the command line, "" if none.
func (p *proc) arg(flag string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.argv, flag); i >= 0 && i+1 < len(p.argv) {
		return p.argv[i+1]
	}
	return ""
}

// setArg replaces the value given after flag for the next starts.
func (p *proc) setArg(flag, value string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.argv, flag); i >= 0 && i+1 < len(p.argv) {
		p.argv[i+1] = value
	}
}

// freePort returns a loopback port nothing listens on now. Only the
// PostgreSQL cluster's port is chosen this way (a cluster cannot report a
// port it picked); the processes that can pick their own port do.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// poll calls cond every 50 ms until it holds, failing after within.
func poll(ctx context.Context, within time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", within, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// httpUp reports whether something answers HTTP at url.
func httpUp(url string) bool {
	c := &http.Client{Timeout: time.Second}
	res, err := c.Get(url)
	if err != nil {
		return false
	}
	_ = res.Body.Close()
	return true
}

// tcpUp reports whether something accepts connections on addr.
func tcpUp(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// postgresCluster is a throwaway cluster made by scripts/testdb.sh in a
// directory and on a port of its own, so restarting it disturbs no other
// test.
type postgresCluster struct {
	script string
	dir    string
	port   int
	bin    string
}

func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no PostgreSQL under /usr/lib/postgresql (run scripts/testdb.sh start once to install it)")
}

func (c *postgresCluster) env() []string {
	return append(os.Environ(), "DOCKET_TESTDB_DIR="+c.dir, "DOCKET_TESTDB_PORT="+strconv.Itoa(c.port))
}

func (c *postgresCluster) start() error {
	cmd := exec.Command(c.script, "start")
	cmd.Env = c.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("testdb.sh start: %v\n%s", err, out)
	}
	return nil
}

func (c *postgresCluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/docket_test?sslmode=disable", c.port)
}

// pgCtl runs pg_ctl on the cluster (as the postgres user when root).
func (c *postgresCluster) pgCtl(args ...string) error {
	argv := append([]string{filepath.Join(c.bin, "pg_ctl"), "-D", filepath.Join(c.dir, "data"), "-l", filepath.Join(c.dir, "server.log")}, args...)
	if os.Geteuid() == 0 {
		argv = append([]string{"runuser", "-u", "postgres", "--"}, argv...)
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %v\n%s", args, err, out)
	}
	return nil
}

// restart stops the cluster in mode (fast or immediate) and starts it.
func (c *postgresCluster) restart(mode string) error {
	return c.pgCtl("-m", mode, "-w", "-t", "60", "restart")
}

func (c *postgresCluster) stop() {
	_ = c.pgCtl("-m", "immediate", "-w", "-t", "60", "stop")
	_ = os.RemoveAll(c.dir)
}

// natsBinary finds the nats-server program (Debian's is in /usr/sbin).
func natsBinary() (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	return exec.LookPath("/usr/sbin/nats-server")
}
