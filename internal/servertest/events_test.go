package servertest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/servertest"
	"github.com/docket-run/docket/internal/spawn"
	"github.com/docket-run/docket/internal/testdb"
)

// natsProc is the Debian nats-server binary with JetStream on loopback,
// started by the test; it picks its port, and Stop and Start keep the
// port and storage.
type natsProc struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

func startNATSServer(t *testing.T) *natsProc {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin, err = exec.LookPath("/usr/sbin/nats-server") // Debian's, off a user's PATH
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("nats-server is needed (apt-get install nats-server; scripts/test.sh does): %v", err)
		}
		t.Skipf("nats-server is needed (apt-get install nats-server): %v", err)
	}
	n := &natsProc{t: t, bin: bin, dir: t.TempDir(), port: -1}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

func (n *natsProc) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.port) }

// Start starts the server and waits until it takes connections.
func (n *natsProc) Start() {
	n.t.Helper()
	// The first start picks the port (-1) and names it in the ports
	// file; the next ones keep it.
	n.cmd = exec.Command(n.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "--ports_file_dir", n.dir, "-js", "-sd", n.dir)
	n.done = make(chan struct{})
	require.NoError(n.t, n.cmd.Start())
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(n.cmd, n.done)
	if n.port < 0 {
		var url string
		servertest.Eventually(n.t, 30*time.Second, "nats-server's ports file", func() bool {
			var err error
			url, err = spawn.NATSPortsURL(n.dir, n.cmd.Process.Pid)
			require.NoError(n.t, err)
			return url != ""
		})
		port, err := strconv.Atoi(url[strings.LastIndex(url, ":")+1:])
		require.NoError(n.t, err)
		n.port = port
	}
	servertest.Eventually(n.t, 30*time.Second, "nats-server takes connections", func() bool {
		nc, err := nats.Connect(n.URL(), nats.Timeout(time.Second))
		if err != nil {
			return false
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err == nil
	})
}

// Stop kills the server (its storage stays).
func (n *natsProc) Stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.done
	n.cmd = nil
}

// eventStream calls fn with DOCKET_EVENTS on the NATS server at url and a
// context bounding fn; it returns false, without calling fn, while the
// stream does not exist yet.
func eventStream(t *testing.T, url string, fn func(ctx context.Context, st jetstream.Stream)) bool {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "DOCKET_EVENTS")
	if err != nil {
		return false
	}
	fn(ctx, st)
	return true
}

// streamEnvelopes reads every message of DOCKET_EVENTS.
func streamEnvelopes(t *testing.T, url string) []map[string]any {
	t.Helper()
	var out []map[string]any
	eventStream(t, url, func(ctx context.Context, st jetstream.Stream) {
		info, err := st.Info(ctx)
		require.NoError(t, err)
		for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
			msg, err := st.GetMsg(ctx, seq)
			require.NoError(t, err)
			var env map[string]any
			require.NoError(t, json.Unmarshal(msg.Data, &env))
			require.Equal(t, "docket."+env["type"].(string), msg.Subject)
			require.Equal(t, env["id"], msg.Header.Get("Nats-Msg-Id"))
			out = append(out, env)
		}
	})
	return out
}

// streamCount is how many messages DOCKET_EVENTS holds (0 before it exists).
func streamCount(t *testing.T, url string) int {
	t.Helper()
	n := 0
	eventStream(t, url, func(_ context.Context, st jetstream.Stream) {
		n = int(st.CachedInfo().State.Msgs)
	})
	return n
}

type healthBody struct {
	Status string `json:"status"`
	Bus    string `json:"bus"`
}

func health(t *testing.T, srv *servertest.Server) healthBody {
	t.Helper()
	r := srv.Do(t, "", "GET", "/healthz", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var h healthBody
	r.JSON(t, &h)
	return h
}

// TestEventsExternalNATSDownAndBack runs docket serve against the Debian
// nats-server and stops that for a while: the API keeps accepting work,
// /healthz says the bus is degraded, and once the server is back every
// event is in the stream once, in order per job.
func TestEventsExternalNATSDownAndBack(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		n := startNATSServer(t)
		env := servertest.FastEnv()
		env["DOCKET_ADMIN_KEY"] = servertest.NewAdminKey()
		env["DOCKET_NATS_URL"] = n.URL()
		srv := servertest.Start(t, servertest.Options{DatabaseURL: backend.URL(t), Env: env})
		key := srv.AdminKey

		// Each job: submitted (QUEUED), then canceled (CANCELED).
		var jobs []string
		work := func(count int) {
			for range count {
				j := submit(t, srv, key, map[string]any{"jobType": "evt"})
				jobs = append(jobs, j.JobID)
				r := srv.Do(t, key, "POST", "/v1/jobs/"+j.JobID+"/cancel", nil)
				require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			}
		}
		work(3)
		servertest.Eventually(t, 30*time.Second, "events of the first jobs in the stream", func() bool {
			return streamCount(t, n.URL()) == 2*len(jobs)
		})
		require.Equal(t, "ok", health(t, srv).Bus)

		n.Stop()
		down := time.Now()
		servertest.Eventually(t, 30*time.Second, "healthz reports the bus degraded", func() bool {
			return health(t, srv).Bus == "degraded"
		})
		work(5) // no errors while the bus is down
		// DOCKET_TEST_BUS_OUTAGE (e.g. 30s) keeps jobs coming that long.
		outage, _ := time.ParseDuration(os.Getenv("DOCKET_TEST_BUS_OUTAGE"))
		for time.Since(down) < outage {
			work(1)
		}
		require.Equal(t, "degraded", health(t, srv).Bus)
		t.Logf("bus down %v; %d jobs, %d events", time.Since(down).Round(time.Millisecond), len(jobs), 2*len(jobs))
		back := time.Now()

		n.Start()
		servertest.Eventually(t, 60*time.Second, "every event in the stream after the bus returned", func() bool {
			return streamCount(t, n.URL()) >= 2*len(jobs)
		})
		t.Logf("every event in the stream %v after the bus returned", time.Since(back).Round(time.Millisecond))
		servertest.Eventually(t, 30*time.Second, "healthz ok again", func() bool { return health(t, srv).Bus == "ok" })

		got := streamEnvelopes(t, n.URL())
		require.Len(t, got, 2*len(jobs), "each event once")
		perJob := map[string][]string{}
		seen := map[string]bool{}
		for _, env := range got {
			id := env["id"].(string)
			require.False(t, seen[id], "event %s twice", id)
			seen[id] = true
			data := env["data"].(map[string]any)
			perJob[data["jobId"].(string)] = append(perJob[data["jobId"].(string)], data["to"].(string))
		}
		for _, id := range jobs {
			require.Equal(t, []string{"QUEUED", "CANCELED"}, perJob[id], "events of job %s in commit order", id)
		}

		// The same events, from the database, on the job's SSE stream.
		sse := sseEvents(t, srv, key, "/v1/jobs/"+jobs[4]+"/events", 2)
		require.Equal(t, []string{"job.state_changed", "job.state_changed"}, []string{sse[0]["type"].(string), sse[1]["type"].(string)})
		require.Equal(t, "CANCELED", sse[1]["data"].(map[string]any)["to"])
	})
}

// TestEventsEmbeddedBus: by default serve runs its own NATS server, with
// its storage next to the SQLite file, and reports it healthy.
func TestEventsEmbeddedBus(t *testing.T) {
	t.Parallel()
	env := servertest.FastEnv()
	env["DOCKET_ADMIN_KEY"] = servertest.NewAdminKey()
	srv := servertest.Start(t, servertest.Options{Env: env})
	j := submit(t, srv, srv.AdminKey, map[string]any{"jobType": "evt"})
	sse := sseEvents(t, srv, srv.AdminKey, "/v1/jobs/"+j.JobID+"/events", 1)
	require.Equal(t, "QUEUED", sse[0]["data"].(map[string]any)["to"])
	require.Equal(t, "ok", health(t, srv).Bus)
	_, err := os.Stat(srv.Options().Dir + "/docket.db-nats/jetstream")
	require.NoError(t, err, "JetStream storage next to the SQLite file")
}

// sseEvents reads want events of an SSE stream and hangs up.
func sseEvents(t *testing.T, srv *servertest.Server, key, path string, want int) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var out []map[string]any
	sc := bufio.NewScanner(res.Body)
	for len(out) < want && sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var env map[string]any
			require.NoError(t, json.Unmarshal([]byte(data), &env))
			out = append(out, env)
		}
	}
	require.Len(t, out, want, "stream ended early: %v", sc.Err())
	return out
}
