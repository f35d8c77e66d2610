package events_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/events"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/postgres"
	"github.com/docket-run/docket/internal/store/sqlite"
	"github.com/docket-run/docket/internal/testdb"
)

// The child process: childEnv names what it does before it waits to be
// SIGKILLed, childDBEnv its database, childNATSEnv the bus.
const (
	childEnv     = "DOCKET_EVENTS_TEST_CHILD"
	childDBEnv   = "DOCKET_EVENTS_TEST_DB"
	childNATSEnv = "DOCKET_EVENTS_TEST_NATS"

	// childCommit: commit work, start a relay whose publish never happens,
	// say "ready" once the relay is inside its publish.
	childCommit = "commit"
	// childPublish: commit work, run a relay that publishes every event
	// and then stops before marking anything, say "ready".
	childPublish = "publish"
)

// TestRelayChild is the child process's main: it runs only when the crash
// tests start this binary with childEnv set, and never returns.
func TestRelayChild(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("runs only as the child process of the crash tests")
	}
	if err := relayChild(mode); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
}

func relayChild(mode string) error {
	ctx := context.Background()
	url := os.Getenv(childDBEnv)
	var (
		st  store.Store
		err error
	)
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		st, err = sqlite.Open(ctx, path, store.Options{})
	} else {
		st, err = postgres.Open(ctx, url, store.Options{})
	}
	if err != nil {
		return err
	}
	if err := workload(ctx, st, 3, 10); err != nil {
		return err
	}
	var pub events.Publisher
	ready := make(chan struct{})
	switch mode {
	case childCommit:
		pub = &blockingPublisher{called: ready}
	case childPublish:
		bus, err := events.OpenBus(ctx, events.BusConfig{URL: os.Getenv(childNATSEnv)})
		if err != nil {
			return err
		}
		pub = &publishThenHang{pub: bus, published: ready}
	default:
		return fmt.Errorf("unknown child mode %q", mode)
	}
	relay := events.NewRelay(st, pub, events.RelayConfig{Batch: 100000})
	if err := relay.Start(ctx); err != nil {
		return err
	}
	<-ready
	fmt.Println("ready")
	select {} // until SIGKILL
}

// publishThenHang publishes, then hangs as a process that dies before it
// marks the rows published.
type publishThenHang struct {
	pub       events.Publisher
	published chan struct{}
}

func (p *publishThenHang) Publish(ctx context.Context, evs []events.Envelope) error {
	if err := p.pub.Publish(ctx, evs); err != nil {
		return err
	}
	close(p.published)
	select {}
}

// killChild runs the child in mode on url and SIGKILLs it once it says
// ready.
func killChild(t *testing.T, mode, dbURL, natsURL string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayChild$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childDBEnv+"="+dbURL, childNATSEnv+"="+natsURL)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case line, ok := <-lines:
		require.True(t, ok, "child exited before it was ready")
		require.Equal(t, "ready", line)
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("child not ready within 60 s")
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err = cmd.Wait()
	for range lines {
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, "signal: killed", exit.Error())
}

func TestCrashBetweenCommitAndPublish(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			url := backend.URL(t)
			st := openStoreURL(t, url)
			n := startNATS(t)
			killChild(t, childCommit, url, n.URL())

			want := expected(t, st)
			require.NotEmpty(t, want, "the child committed work")
			require.NotZero(t, unpublished(t, st))
			bus := openBus(t, n.URL())
			relay := startRelay(t, st, bus, events.RelayConfig{})
			eventually(t, 30*time.Second, "every row published after the restart", func() bool { return unpublished(t, st) == 0 })
			relay.Stop()
			requireSameOncePerJobOrder(t, want, streamEvents(t, n.URL()))
		})
	}
}

func TestCrashBetweenPublishAndMark(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			url := backend.URL(t)
			st := openStoreURL(t, url)
			n := startNATS(t)
			killChild(t, childPublish, url, n.URL())

			want := expected(t, st)
			require.Len(t, streamEvents(t, n.URL()), len(want), "the child published everything")
			require.NotZero(t, unpublished(t, st), "and marked nothing")
			bus := openBus(t, n.URL())
			relay := startRelay(t, st, bus, events.RelayConfig{})
			eventually(t, 30*time.Second, "every row published after the restart", func() bool { return unpublished(t, st) == 0 })
			relay.Stop()
			requireSameOncePerJobOrder(t, want, streamEvents(t, n.URL()))
		})
	}
}
