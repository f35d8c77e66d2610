package servertest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/servertest"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/remote"
)

func TestMain(m *testing.M) { servertest.Main(m) }

func forEachBackend(t *testing.T, fn func(t *testing.T, backend testdb.Backend)) {
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, backend)
		})
	}
}

// job is the part of a job resource the tests look at.
type job struct {
	JobID   string `json:"jobId"`
	JobType string `json:"jobType"`
	Queue   string `json:"queue"`
	Status  string `json:"status"`
}

func submit(t *testing.T, srv *servertest.Server, key string, body map[string]any) job {
	t.Helper()
	r := srv.Do(t, key, "POST", "/v1/jobs", body)
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	var j job
	r.JSON(t, &j)
	require.NotEmpty(t, j.JobID)
	return j
}

func getJob(t *testing.T, srv *servertest.Server, key, id string) job {
	t.Helper()
	r := srv.Do(t, key, "GET", "/v1/jobs/"+id, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var j job
	r.JSON(t, &j)
	return j
}

// requireMetrics scrapes /metrics and checks it has every wanted sample
// line (name{labels} value), reporting the docket_ series when not.
func requireMetrics(t *testing.T, srv *servertest.Server, want ...string) {
	t.Helper()
	r := srv.Do(t, "", "GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Contains(t, r.Header.Get("Content-Type"), "text/plain")
	lines := map[string]bool{}
	var ours []string
	for _, l := range strings.Split(string(r.Body), "\n") {
		lines[l] = true
		if strings.HasPrefix(l, "docket_") && !strings.Contains(l, "_bucket{") {
			ours = append(ours, l)
		}
	}
	for _, w := range want {
		if !lines[w] {
			t.Fatalf("/metrics lacks %s; its docket_ series:\n%s", w, strings.Join(ours, "\n"))
		}
	}
}

// With no configuration at all, serve runs on sqlite:docket.db in its
// working directory, creates and prints an admin key once, and stops
// cleanly on SIGTERM.
func TestServeEmbeddedDefault(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{})
	require.Equal(t, "sqlite", srv.Backend)
	require.FileExists(t, filepath.Join(srv.Options().Dir, "docket.db"))
	require.NotEmpty(t, srv.BootstrapKey)

	r := srv.Do(t, "", "GET", "/healthz", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), `"backend":"sqlite"`)

	j := submit(t, srv, srv.BootstrapKey, map[string]any{"jobType": "email.send", "payload": map[string]any{"to": "a@example.com"}})
	require.Equal(t, "QUEUED", getJob(t, srv, srv.BootstrapKey, j.JobID).Status)
	requireMetrics(t, srv, `docket_jobs{queue="email.send",state="QUEUED"} 1`)

	require.Equal(t, 0, srv.Stop(t), "clean exit on SIGTERM")
	require.Equal(t, srv.BootstrapKey+"\n", srv.Stdout(), "the secret, alone, is all of stdout")
	require.True(t, strings.HasPrefix(srv.BootstrapKey, "dk_"))

	// A second start finds the key and prints none; the first key still works.
	again := srv.Restart(t)
	require.Empty(t, again.BootstrapKey)
	require.NotContains(t, again.Stderr(), "no API key existed")
	require.Equal(t, "QUEUED", getJob(t, again, srv.BootstrapKey, j.JobID).Status)
	require.Equal(t, 0, again.Stop(t))
	require.Empty(t, again.Stdout())
}

// With --listen on port 0 and --addr-file, the bound address is in the
// file while the server runs (no port is picked by listening and closing
// first) and the file is gone after a clean exit.
func TestServeAddrFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "addr")
	srv := servertest.Start(t, servertest.Options{Dir: dir, Args: []string{"--addr-file", file}})
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, strings.TrimPrefix(srv.URL, "http://")+"\n", string(data))
	r := srv.Do(t, "", "GET", "/healthz", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, 0, srv.Stop(t))
	require.NoFileExists(t, file)
}

func TestServeBackends(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		admin := servertest.NewAdminKey()
		srv := servertest.Start(t, servertest.Options{
			DatabaseURL: backend.URL(t),
			Env:         map[string]string{"DOCKET_ADMIN_KEY": admin},
		})
		require.Equal(t, backend.Name, srv.Backend)
		require.Empty(t, srv.BootstrapKey, "DOCKET_ADMIN_KEY set: nothing generated")
		require.Equal(t, admin, srv.AdminKey)

		require.Equal(t, http.StatusOK, srv.Do(t, "", "GET", "/healthz", nil).Status)
		require.Equal(t, http.StatusUnauthorized, srv.Do(t, "", "GET", "/v1/jobs", nil).Status)
		require.Equal(t, http.StatusUnauthorized, srv.Do(t, "not-a-key-at-all", "GET", "/v1/jobs", nil).Status)

		// Keys made with the CLI on the same database work at once.
		producer := srv.CreateKey(t, "producer", "ci")
		worker := srv.CreateKey(t, "worker", "remote")
		j := submit(t, srv, producer, map[string]any{"jobType": "report.build", "queue": "reports"})
		require.Equal(t, "QUEUED", getJob(t, srv, admin, j.JobID).Status)
		require.Equal(t, http.StatusForbidden, srv.Do(t, worker, "GET", "/v1/jobs/"+j.JobID, nil).Status)

		// A remote worker runs it; the completion shows in the metrics.
		lease := takeLease(t, srv, worker, "reports", 30)
		require.Equal(t, j.JobID, lease.JobID.String())
		r := srv.Do(t, worker, "POST", "/v1/leases/"+lease.LeaseID+"/complete", map[string]any{"result": map[string]any{"rows": 3}})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.Equal(t, "SUCCESS", getJob(t, srv, admin, j.JobID).Status)
		requireMetrics(t, srv,
			`docket_jobs{queue="reports",state="SUCCESS"} 1`,
			`docket_jobs_completed_total{queue="reports",state="SUCCESS"} 1`,
			`docket_job_queue_latency_seconds_count{queue="reports"} 1`,
			`docket_job_run_duration_seconds_count{queue="reports"} 1`)

		require.Equal(t, 0, srv.Stop(t))
		require.Empty(t, srv.Stdout())
	})
}

// A DOCKET_ADMIN_KEY given to a server that has keys already is imported
// anyway, once; no key is generated.
func TestServeAdminKeyImport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// docket keys never creates nor migrates the database.
	migrate := servertest.Run(t, dir, nil, "migrate", "up")
	require.Equal(t, 0, migrate.Code, migrate.Stderr)
	servertest.CreateKey(t, dir, "", "viewer", "someone")
	admin := servertest.NewAdminKey()
	opts := servertest.Options{Dir: dir, Env: map[string]string{"DOCKET_ADMIN_KEY": admin}}
	srv := servertest.Start(t, opts)
	require.Empty(t, srv.BootstrapKey)
	require.Equal(t, http.StatusOK, srv.Do(t, admin, "GET", "/v1/jobs", nil).Status)
	require.Equal(t, 0, srv.Stop(t))
	// Restarting with the same variable is fine: it is there already.
	again := srv.Restart(t)
	require.Equal(t, http.StatusOK, again.Do(t, admin, "GET", "/v1/queues", nil).Status)
	list := servertest.Run(t, dir, nil, "keys", "list")
	require.Equal(t, 0, list.Code, list.Stderr)
	require.Equal(t, 1, strings.Count(list.Stdout, "bootstrap"), list.Stdout)
}

func TestServeInvalidConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{env: map[string]string{"DOCKET_RATE_LIMIT": "lots"}, want: "DOCKET_RATE_LIMIT"},
		{env: map[string]string{"DOCKET_LEASE_SECONDS": "-5"}, want: "DOCKET_LEASE_SECONDS"},
		{env: map[string]string{"DOCKET_RESCUE_INTERVAL": "often"}, want: "DOCKET_RESCUE_INTERVAL"},
		{env: map[string]string{"DOCKET_RETRY_BACKOFF_MAX": "1ms"}, want: "DOCKET_RETRY_BACKOFF_MAX"},
		{env: map[string]string{"DOCKET_MAX_BODY_BYTES": "big"}, want: "DOCKET_MAX_BODY_BYTES"},
		{env: map[string]string{"DOCKET_ADMIN_KEY": "too-short"}, want: "DOCKET_ADMIN_KEY"},
		{env: map[string]string{"DOCKET_LOG_LEVEL": "chatty"}, want: "DOCKET_LOG_LEVEL"},
		{env: map[string]string{"DOCKET_LEADER_TTL": "1s"}, args: []string{"--leader-ttl", "never"}, want: "--leader-ttl"},
		{env: map[string]string{"DOCKET_DATABASE_URL": "mysql://x"}, want: "scheme must be"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			res := servertest.Run(t, dir, tc.env, append([]string{"serve", "--listen", "127.0.0.1:0"}, tc.args...)...)
			require.Equal(t, 2, res.Code, // a wrong setting is a usage error
				"stdout:\n%s\nstderr:\n%s", res.Stdout, res.Stderr)
			require.Contains(t, res.Stderr, tc.want)
			require.Empty(t, res.Stdout)
			require.NoFileExists(t, filepath.Join(dir, "docket.db"), "nothing is created before the config is valid")
		})
	}
}

func TestServeRateLimit(t *testing.T) {
	t.Parallel()
	admin := servertest.NewAdminKey()
	srv := servertest.Start(t, servertest.Options{Env: map[string]string{
		"DOCKET_ADMIN_KEY": admin, "DOCKET_RATE_LIMIT": "5/s",
	}})
	var limited *servertest.Response
	for i := 0; i < 50 && limited == nil; i++ {
		r := srv.Do(t, admin, "GET", "/v1/queues", nil)
		switch r.Status {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			limited = r
		default:
			t.Fatalf("GET /v1/queues: %d %s", r.Status, r.Body)
		}
	}
	require.NotNil(t, limited, "50 requests at once and none limited at 5/s")
	require.Equal(t, "application/problem+json", limited.Header.Get("Content-Type"))
	after, err := strconv.Atoi(limited.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", limited.Header.Get("Retry-After"))
	require.GreaterOrEqual(t, after, 1)
	// Another key has its own bucket; public routes are not limited.
	other := srv.CreateKey(t, "viewer", "other")
	require.Equal(t, http.StatusOK, srv.Do(t, other, "GET", "/v1/queues", nil).Status)
	for range 20 {
		require.Equal(t, http.StatusOK, srv.Do(t, "", "GET", "/healthz", nil).Status)
	}
}

// Two serve processes on one PostgreSQL share the work: a job submitted to
// one is leased and completed through the other.
func TestServeSharedPostgres(t *testing.T) {
	t.Parallel()
	url := testdb.PostgresURL(t)
	admin := servertest.NewAdminKey()
	env := servertest.FastEnv()
	env["DOCKET_ADMIN_KEY"] = admin
	a := servertest.Start(t, servertest.Options{DatabaseURL: url, Env: env})
	b := servertest.Start(t, servertest.Options{DatabaseURL: url, Env: env})
	worker := a.CreateKey(t, "worker", "shared")
	j := submit(t, a, admin, map[string]any{"jobType": "shared.job"})
	lease := takeLease(t, b, worker, "shared.job", 30)
	require.Equal(t, j.JobID, lease.JobID.String())
	require.Equal(t, http.StatusOK, b.Do(t, worker, "POST", "/v1/leases/"+lease.LeaseID+"/complete", map[string]any{}).Status)
	require.Equal(t, "SUCCESS", getJob(t, a, admin, j.JobID).Status)
	require.Equal(t, 0, a.Stop(t))
	require.Equal(t, 0, b.Stop(t))
}

// lease is the protocol's, package remote's.
type lease = remote.Lease

// takeLease long-polls for one job of queue.
func takeLease(t *testing.T, srv *servertest.Server, key, queue string, leaseSeconds int) lease {
	t.Helper()
	var got []lease
	servertest.Eventually(t, 30*time.Second, "a lease on "+queue, func() bool {
		r := srv.Do(t, key, "POST", remote.PathLeases, &remote.LeaseRequest{
			Queues: []string{queue}, Max: remote.Int(1), WaitSeconds: remote.Int(2), LeaseSeconds: remote.Int(leaseSeconds), WorkerID: "test-worker",
		})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var res remote.LeaseResponse
		r.JSON(t, &res)
		got = res.Leases
		return len(got) > 0
	})
	require.Len(t, got, 1)
	return got[0]
}

// The server is killed while a remote worker holds a lease; after a
// restart every job is there, the lease expires, the job is leased again
// and completes, and the old lease is fenced.
func TestServeRestartWithHeldLease(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		admin := servertest.NewAdminKey()
		env := servertest.FastEnv()
		env["DOCKET_ADMIN_KEY"] = admin
		srv := servertest.Start(t, servertest.Options{DatabaseURL: backend.URL(t), Env: env})
		worker := srv.CreateKey(t, "worker", "remote")
		const n = 20
		ids := map[string]bool{}
		for i := range n {
			j := submit(t, srv, admin, map[string]any{"jobType": "restart.job", "payload": map[string]any{"i": i}})
			ids[j.JobID] = true
		}
		held := takeLease(t, srv, worker, "restart.job", 5)
		require.Equal(t, 1, held.Attempt)

		srv.Kill(t)
		require.NotEqual(t, 0, srv.Stop(t), "killed, not stopped")
		srv = srv.Restart(t)

		// Every job is still there, the held one RUNNING until its lease
		// expires.
		var page struct {
			Items      []job  `json:"items"`
			NextCursor string `json:"nextCursor"`
		}
		r := srv.Do(t, admin, "GET", "/v1/jobs?jobType=restart.job&limit=100", nil)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		r.JSON(t, &page)
		require.Len(t, page.Items, n)
		for _, j := range page.Items {
			require.True(t, ids[j.JobID], "unknown job %s", j.JobID)
		}

		// The rescuer gives the expired lease back; the job is leased again
		// with a new attempt. Leasing drains the queue until it comes back.
		done := map[string]bool{}
		complete := func(l lease) {
			r := srv.Do(t, worker, "POST", "/v1/leases/"+l.LeaseID+"/complete", map[string]any{})
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			done[l.JobID.String()] = true
		}
		var again lease
		servertest.Eventually(t, 60*time.Second, "the held job to be leased again", func() bool {
			l := takeLease(t, srv, worker, "restart.job", 30)
			if l.JobID == held.JobID {
				again = l
				return true
			}
			complete(l)
			return false
		})
		require.Equal(t, 2, again.Attempt)
		// The lease from before the crash is fenced and changes nothing.
		r = srv.Do(t, worker, "POST", "/v1/leases/"+held.LeaseID+"/complete", map[string]any{})
		require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
		complete(again)
		for len(done) < n {
			complete(takeLease(t, srv, worker, "restart.job", 30))
		}
		for id := range ids {
			require.Equal(t, "SUCCESS", getJob(t, srv, admin, id).Status, "job %s", id)
		}
		// The rescue counts as a failed attempt.
		requireMetrics(t, srv,
			`docket_jobs{queue="restart.job",state="SUCCESS"} `+fmt.Sprint(n),
			`docket_jobs_failed_total{queue="restart.job"} 1`,
			`docket_jobs_completed_total{queue="restart.job",state="RETRY"} 1`)
		require.Equal(t, 0, srv.Stop(t))
	})
}

// Jobs inserted over HTTP, one by one or in a batch, are counted once;
// an idempotent repeat is not a new job.
func TestServeMetricsCountInserts(t *testing.T) {
	t.Parallel()
	admin := servertest.NewAdminKey()
	srv := servertest.Start(t, servertest.Options{Env: map[string]string{"DOCKET_ADMIN_KEY": admin}})
	submit(t, srv, admin, map[string]any{"jobType": "count.me", "idempotencyKey": "once"})
	submit(t, srv, admin, map[string]any{"jobType": "count.me", "idempotencyKey": "once"})
	submit(t, srv, admin, map[string]any{"jobType": "count.me", "queue": "other"})
	r := srv.Do(t, admin, "POST", "/v1/jobs:batch", map[string]any{"jobs": []map[string]any{
		{"jobType": "count.me"}, {"jobType": "count.me"}, {"jobType": "count.me", "queue": "other"},
	}})
	require.Equal(t, http.StatusAccepted, r.Status, string(r.Body))
	requireMetrics(t, srv,
		`docket_jobs{queue="count.me",state="QUEUED"} 3`,
		`docket_jobs{queue="other",state="QUEUED"} 2`,
		`docket_jobs_inserted_total{queue="count.me"} 3`,
		`docket_jobs_inserted_total{queue="other"} 2`)
}

// SIGTERM while a remote worker long-polls for a lease: the poll is cut
// short instead of holding the shutdown for its 30 s.
func TestServeShutdownCutsLongPolls(t *testing.T) {
	t.Parallel()
	admin := servertest.NewAdminKey()
	srv := servertest.Start(t, servertest.Options{Env: map[string]string{"DOCKET_ADMIN_KEY": admin}})
	// One connection: a first request makes the server hold it, so the
	// long poll written on it is surely read and served.
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	res, err := client.Get(srv.URL + "/healthz")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	require.NoError(t, res.Body.Close())

	body := `{"queues":["nothing.here"],"max":1,"waitSeconds":30,"leaseSeconds":30,"workerId":"w"}`
	req, err := http.NewRequest("POST", srv.URL+"/v1/leases", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+admin)
	req.Header.Set("Content-Type", "application/json")
	wrote := make(chan struct{})
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) },
	}))
	polled := make(chan error, 1)
	go func() {
		res, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			err = res.Body.Close()
		}
		polled <- err
	}()
	<-wrote
	// Written is not yet read: until the server reads the request it counts
	// the connection as idle, and Shutdown may close it. Wait until the
	// server serves the poll (the scrape itself is the other request).
	servertest.Eventually(t, 10*time.Second, "the long poll to be in flight", func() bool {
		res, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return strings.Contains(string(body), "\ndocket_http_requests_in_flight 2\n")
	})
	start := time.Now()
	require.Equal(t, 0, srv.Stop(t))
	require.Less(t, time.Since(start), 8*time.Second, "the long poll held the shutdown")
	require.NoError(t, <-polled, "the long poll gets an answer, not a dropped connection")
}

func TestMainBinaryIsCached(t *testing.T) {
	t.Parallel()
	a, b := servertest.Binary(t), servertest.Binary(t)
	require.Equal(t, a, b)
	_, err := os.Stat(a)
	require.NoError(t, err)
}
