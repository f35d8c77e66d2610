package api

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		m := NewMetrics()
		clock := fakeClock(m)
		b := setup(t, backend, func(c *Config) { c.Metrics = m })
		for range 2 {
			_, err := b.client.Insert(ctx, docket.RawArgs{Type: "mail.send"}, &docket.InsertOpts{Queue: "mail"})
			require.NoError(t, err)
		}
		m.Inserted("mail", 2)
		now := time.Now()
		m.JobFinished(docket.JobFinishedEvent{
			Queue: "mail", State: docket.JobStateRetry, Outcome: docket.OutcomeError,
			DueAt: now.Add(-3 * time.Second), StartedAt: now.Add(-2 * time.Second), FinishedAt: now,
		})
		m.JobFinished(docket.JobFinishedEvent{
			Queue: "mail", State: docket.JobStateSuccess, Outcome: docket.OutcomeSuccess,
			DueAt: now, StartedAt: now, FinishedAt: now.Add(time.Second),
		})

		r := b.do(t, "", "GET", "/metrics", nil) // public: no key
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.Contains(t, r.Header.Get("Content-Type"), "text/plain")
		body := string(r.Body)
		for _, want := range []string{
			`docket_jobs{queue="mail",state="QUEUED"} 2`,
			`docket_jobs{queue="mail",state="RUNNING"} 0`,
			`docket_jobs_inserted_total{queue="mail"} 2`,
			`docket_jobs_completed_total{queue="mail",state="RETRY"} 1`,
			`docket_jobs_completed_total{queue="mail",state="SUCCESS"} 1`,
			`docket_jobs_failed_total{queue="mail"} 1`,
			`docket_job_queue_latency_seconds_count{queue="mail"} 2`,
			`docket_job_queue_latency_seconds_sum{queue="mail"} 1`,
			`docket_job_run_duration_seconds_sum{queue="mail"} 3`,
			`go_goroutines `,
		} {
			require.Contains(t, body, want)
		}

		// With the database gone the gauge is missing (once the last count
		// has aged out) but the rest is served.
		require.NoError(t, b.client.Close())
		clock.Add(int64(countCacheFor))
		r = b.do(t, "", "GET", "/metrics", nil)
		require.Equal(t, http.StatusOK, r.Status)
		require.NotContains(t, string(r.Body), "docket_jobs{")
		require.Contains(t, string(r.Body), `docket_jobs_inserted_total{queue="mail"} 2`)
	})
}

// fakeClock makes m's jobs gauge read time from the returned offset (in
// nanoseconds) added to a fixed instant.
func fakeClock(m *Metrics) *atomic.Int64 {
	var offset atomic.Int64
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	m.jobs.now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	return &offset
}

// countingCounter counts the counts it makes through a real client.
type countingCounter struct {
	client *docket.Client
	calls  atomic.Int32
}

func (c *countingCounter) QueueCounts(ctx context.Context, cap int) ([]*docket.QueueInfo, error) {
	c.calls.Add(1)
	return c.client.QueueCounts(ctx, cap)
}

// TestMetricsCountCached: the public /metrics counts jobs in the database
// at most once per countCacheFor, whatever the number of scrapes.
func TestMetricsCountCached(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		ctx := context.Background()
		m := NewMetrics()
		clock := fakeClock(m)
		b := setup(t, backend, func(c *Config) { c.Metrics = m })
		src := &countingCounter{client: b.client}
		m.countFrom(src)
		insert := func() {
			_, err := b.client.Insert(ctx, docket.RawArgs{Type: "mail.send"}, &docket.InsertOpts{Queue: "mail"})
			require.NoError(t, err)
		}
		scrape := func() string {
			r := b.do(t, "", "GET", "/metrics", nil)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			return string(r.Body)
		}
		insert()
		require.Contains(t, scrape(), `docket_jobs{queue="mail",state="QUEUED"} 1`)
		insert()
		clock.Add(int64(countCacheFor - time.Millisecond))
		require.Contains(t, scrape(), `docket_jobs{queue="mail",state="QUEUED"} 1`, "served from the first count")
		require.Equal(t, int32(1), src.calls.Load(), "two scrapes within the window, one count")

		clock.Add(int64(time.Millisecond))
		require.Contains(t, scrape(), `docket_jobs{queue="mail",state="QUEUED"} 2`)
		require.Equal(t, int32(2), src.calls.Load(), "the window is over: counted again")
	})
}

func TestMetricsNil(t *testing.T) {
	t.Parallel()
	var m *Metrics
	m.Inserted("q", 1)
	m.JobFinished(docket.JobFinishedEvent{Queue: "q"})
}

func TestHealthzDatabaseDown(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		b := setup(t, backend)
		require.Equal(t, http.StatusOK, b.do(t, "", "GET", "/healthz", nil).Status)
		require.NoError(t, b.client.Close())
		r := b.do(t, "", "GET", "/healthz", nil)
		require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
		var h healthResponse
		r.JSON(t, &h)
		require.Equal(t, "unavailable", h.Status)
		require.Equal(t, "unreachable", h.Database)
	})
}

// TestHealthzHidesDatabaseError: the public /healthz says the database is
// unreachable, not why (the driver's error names host, user and database);
// the log says why.
func TestHealthzHidesDatabaseError(t *testing.T) {
	t.Parallel()
	client, err := docket.NewClient(context.Background(), docket.Config{
		DatabaseURL: "postgres://secret_user:pw@127.0.0.1:1/secret_db?connect_timeout=1",
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	var logs syncBuffer
	srv := httptest.NewServer(New(Config{Client: client, Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
	t.Cleanup(srv.Close)
	res, err := http.Get(srv.URL + "/healthz")
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, string(body))
	require.JSONEq(t, `{"status":"unavailable","database":"unreachable","backend":"postgres"}`, string(body))
	require.Contains(t, logs.String(), "secret_user", "the log says why")
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestMetricsQueuesShareTheCount: Metrics.Queues (the dashboard's counts)
// serves the gauge's cached count: scrapes and dashboard refreshes within
// countCacheFor make one count query between them.
func TestMetricsQueuesShareTheCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := NewMetrics()
	queues, err := m.Queues(ctx)
	require.NoError(t, err)
	require.Empty(t, queues, "no source yet: nothing to count")
	clock := fakeClock(m)
	b := setup(t, testdb.Backends()[0], func(c *Config) { c.Metrics = m })
	src := &countingCounter{client: b.client}
	m.countFrom(src)
	_, err = b.client.Insert(ctx, docket.RawArgs{Type: "mail.send"}, &docket.InsertOpts{Queue: "mail"})
	require.NoError(t, err)
	queues, err = m.Queues(ctx)
	require.NoError(t, err)
	require.Len(t, queues, 1)
	require.Equal(t, 1, queues[0].Counts[docket.JobStateQueued])
	r := b.do(t, "", "GET", "/metrics", nil)
	require.Contains(t, string(r.Body), `docket_jobs{queue="mail",state="QUEUED"} 1`)
	_, err = m.Queues(ctx)
	require.NoError(t, err)
	require.Equal(t, int32(1), src.calls.Load(), "one count served both")
	clock.Add(int64(countCacheFor))
	_, err = m.Queues(ctx)
	require.NoError(t, err)
	require.Equal(t, int32(2), src.calls.Load())
}
