package api

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/docket-run/docket"
)

// Metric names and labels, all prefixed docket_.
const (
	metricNamespace = "docket"
	labelQueue      = "queue"
	labelState      = "state"
)

// durationBuckets (seconds) cover a few milliseconds of queueing up to an
// hour of running.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// countTimeout bounds the count query of one scrape.
const countTimeout = 5 * time.Second

// countCacheFor is how long one count of the jobs gauge serves scrapes:
// /metrics is public, so frequent scrapes, or scrapes by anyone, must not
// reach the database each time.
const countCacheFor = 5 * time.Second

// CountCap bounds the counts of the jobs gauge and of GET /v1/queues
// (Client.QueueCounts): a queue's QUEUED jobs are counted up to
// CountCap+1, and of every other state at most CountCap+1 jobs are read
// over all queues, so no count grows with the jobs table; a count that
// is a lower bound is marked (docket_jobs_capped, countsAtLeast).
const CountCap = 10_000

// Metrics are the Prometheus metrics of a docket process, in a registry of
// their own (never the global one):
//
//	docket_jobs{queue,state}                      gauge, counted in the database at scrape time (at most every 5 s), capped (CountCap)
//	docket_jobs_capped{queue,state}               1 where docket_jobs is a lower bound (its capped read stopped), else 0
//	docket_jobs_inserted_total{queue}             jobs inserted through this API
//	docket_jobs_completed_total{queue,state}      attempt ends: SUCCESS, RETRY, DEAD, CANCELED
//	docket_jobs_failed_total{queue}               attempt ends that were errors (JobFinishedEvent.Failed)
//	docket_job_queue_latency_seconds{queue}       due → start of each attempt
//	docket_job_run_duration_seconds{queue}        start → end of each attempt
//	docket_http_requests_in_flight                requests being served now (long polls included; the dashboard's through CountInFlight)
//
// plus the Go runtime and process collectors. Counters and histograms count
// what this process did; sum them over processes. Attempt ends are fed by
// JobFinished, which docket serve installs as docket.Config.OnJobFinished.
// A nil *Metrics counts nothing.
type Metrics struct {
	registry     *prometheus.Registry
	jobs         *jobsCollector
	inserted     *prometheus.CounterVec
	completed    *prometheus.CounterVec
	failed       *prometheus.CounterVec
	queueLatency *prometheus.HistogramVec
	runDuration  *prometheus.HistogramVec
	inFlight     prometheus.Gauge
}

// NewMetrics makes the metrics and their registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		jobs: &jobsCollector{now: time.Now, desc: prometheus.NewDesc(metricNamespace+"_jobs",
			"Jobs by queue and state, counted in the database at scrape time (a count serves scrapes for 5 s); capped: a queue's QUEUED jobs are counted up to 10,001, of every other state at most 10,001 jobs are read over all queues (docket_jobs_capped marks the lower bounds).",
			[]string{labelQueue, labelState}, nil),
			capped: prometheus.NewDesc(metricNamespace+"_jobs_capped",
				"1 where docket_jobs{queue,state} is a lower bound: its capped read stopped before the end (more jobs than it shows), else 0.",
				[]string{labelQueue, labelState}, nil)},
		inserted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricNamespace, Name: "jobs_inserted_total",
			Help: "Jobs inserted through the HTTP API of this process (idempotent repeats not counted).",
		}, []string{labelQueue}),
		completed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricNamespace, Name: "jobs_completed_total",
			Help: "Attempt ends recorded by this process, by the state the job moved to (SUCCESS, RETRY, DEAD, CANCELED).",
		}, []string{labelQueue, labelState}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricNamespace, Name: "jobs_failed_total",
			Help: "Attempts that ended in an error: returned error, timeout, panic, or lease expired.",
		}, []string{labelQueue}),
		queueLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricNamespace, Name: "job_queue_latency_seconds",
			Help:    "Time from a job becoming due to the start of an attempt, observed when the attempt ends.",
			Buckets: durationBuckets,
		}, []string{labelQueue}),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricNamespace, Name: "job_run_duration_seconds",
			Help:    "Time from the start to the end of an attempt (attempts rescued after their lease expired are not observed).",
			Buckets: durationBuckets,
		}, []string{labelQueue}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricNamespace, Name: "http_requests_in_flight",
			Help: "HTTP requests this process is serving right now, long polls included.",
		}),
	}
	m.registry.MustRegister(m.jobs, m.inserted, m.completed, m.failed, m.queueLatency, m.runDuration, m.inFlight,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// requestStarted counts a request in flight until requestDone.
func (m *Metrics) requestStarted() {
	if m != nil {
		m.inFlight.Inc()
	}
}

// requestDone ends what requestStarted began.
func (m *Metrics) requestDone() {
	if m != nil {
		m.inFlight.Dec()
	}
}

// CountInFlight counts the requests h serves in
// docket_http_requests_in_flight, as the API's own are: for handlers served
// beside the API (docket serve's dashboard). A nil *Metrics counts nothing.
func (m *Metrics) CountInFlight(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.requestStarted()
		defer m.requestDone()
		h.ServeHTTP(w, r)
	})
}

// Inserted counts n jobs newly inserted into queue. Call it once per
// created job (or batch), not for idempotent repeats.
func (m *Metrics) Inserted(queue string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.inserted.WithLabelValues(queue).Add(float64(n))
}

// JobFinished counts one attempt end; it has the signature of
// docket.Config.OnJobFinished.
func (m *Metrics) JobFinished(e docket.JobFinishedEvent) {
	if m == nil {
		return
	}
	m.completed.WithLabelValues(e.Queue, string(e.State)).Inc()
	if e.Failed() {
		m.failed.WithLabelValues(e.Queue).Inc()
	}
	if !e.StartedAt.IsZero() {
		if !e.DueAt.IsZero() {
			m.queueLatency.WithLabelValues(e.Queue).Observe(e.QueueLatency().Seconds())
		}
		// A rescued attempt's end is when the rescuer noticed, not when
		// the work stopped: it says nothing about run time.
		if e.Outcome != docket.OutcomeExpired {
			m.runDuration.WithLabelValues(e.Queue).Observe(e.RunDuration().Seconds())
		}
	}
}

// Registry is where the metrics live, for adding more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// counter is what the jobs gauge needs from the client.
type counter interface {
	QueueCounts(ctx context.Context, cap int) ([]*docket.QueueInfo, error)
}

// jobsCollector counts jobs by queue and state in the database at scrape
// time with capped reads (Client.QueueCounts, CountCap), which serve the
// scrapes of the next countCacheFor (their error too), so the gauge is at
// most that stale and costs nothing between scrapes.
type jobsCollector struct {
	desc   *prometheus.Desc
	capped *prometheus.Desc
	source atomic.Pointer[counter]
	now    func() time.Time // time.Now; tests move it

	// mu is held while counting: concurrent scrapes share one count.
	mu        sync.Mutex
	countedAt time.Time // zero: never counted
	queues    []*docket.QueueInfo
	err       error
}

func (c *jobsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc; ch <- c.capped }

func (c *jobsCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.source.Load()
	if src == nil {
		return
	}
	queues, err := c.count(*src)
	if err != nil {
		// The other metrics are still served; the error is logged by the
		// handler (ContinueOnError).
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, q := range queues {
		for _, st := range []docket.JobState{
			docket.JobStateCreated, docket.JobStateQueued, docket.JobStateRunning, docket.JobStateRetry,
			docket.JobStateSuccess, docket.JobStateDead, docket.JobStateCanceled,
		} {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(q.Counts[st]), q.Name, string(st))
			capped := 0.0
			if q.AtLeast[st] {
				capped = 1
			}
			ch <- prometheus.MustNewConstMetric(c.capped, prometheus.GaugeValue, capped, q.Name, string(st))
		}
	}
}

// count returns the counts of src, counted at most countCacheFor ago.
func (c *jobsCollector) count(src counter) ([]*docket.QueueInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if age := c.now().Sub(c.countedAt); !c.countedAt.IsZero() && age >= 0 && age < countCacheFor {
		return c.queues, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), countTimeout)
	defer cancel()
	c.queues, c.err = src.QueueCounts(ctx, CountCap)
	c.countedAt = c.now()
	return c.queues, c.err
}

// countFrom makes the jobs gauge count with src.
func (m *Metrics) countFrom(src counter) { m.jobs.source.Store(&src) }

func (s *Server) metricsRoutes() []route {
	h := promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{
		ErrorLog:      promLogger{s.cfg.Logger},
		ErrorHandling: promhttp.ContinueOnError,
	})
	return []route{{Method: "GET", Path: "/metrics", Perm: permPublic, Handler: h}}
}

// promLogger sends promhttp's errors to slog.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) { l.log.Warn("metrics scrape failed", "error", v) }

// Queues returns the job counts per queue and state of the jobs gauge:
// the same cached capped count (at most countCacheFor old), so a caller
// refreshing it often adds no count query (the dashboard does not: it
// reads Client.Overview's bounded figures). Without a source (no Client)
// it returns none.
func (m *Metrics) Queues(ctx context.Context) ([]*docket.QueueInfo, error) {
	src := m.jobs.source.Load()
	if src == nil {
		return nil, nil
	}
	return m.jobs.count(*src)
}
