package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/api"
	"github.com/docket-run/docket/internal/engine"
)

// loadWith parses args and env as docket serve would.
func loadWith(t *testing.T, env map[string]string, args ...string) (*serveConfig, error) {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addServeFlags(fs)
	require.NoError(t, fs.Parse(args))
	return loadServeConfig(fs, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
}

func TestServeConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := loadWith(t, nil)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8080", c.Listen)
	require.Equal(t, docket.DatabaseURLDefault, c.DatabaseURL)
	// The defaults are the engine's: serve changes none of them.
	w := c.workerConfig()
	require.Equal(t, engine.LeaseDurationDefault, w.LeaseDuration)
	require.Equal(t, engine.JobTimeoutDefault, w.JobTimeout)
	require.Equal(t, engine.RescueIntervalDefault, w.RescueInterval)
	require.Equal(t, engine.SchedulerIntervalDefault, w.SchedulerInterval)
	require.Equal(t, engine.PruneIntervalDefault, w.PruneInterval)
	require.Equal(t, engine.RetentionDefault, w.Retention)
	require.Equal(t, engine.OutboxMaxAgeDefault, w.OutboxMaxAge)
	require.Equal(t, engine.PollIntervalDefault, w.PollInterval)
	require.Equal(t, engine.LeaderTTLDefault, w.LeaderTTL)
	require.Equal(t, engine.RetryBackoffBaseDefault, w.RetryBackoffBase)
	require.Equal(t, engine.RetryBackoffMaxDefault, w.RetryBackoffMax)
	require.Equal(t, 5*time.Minute, c.PriorityAging)
	require.EqualValues(t, 1<<20, c.MaxBodyBytes)
	require.Equal(t, 100, c.MaxStreamsPerKey)
	require.Equal(t, time.Minute, c.BodyReadTimeout)
	require.Zero(t, c.RateLimit.perSecond())
	require.Empty(t, c.AdminKey)
	// The API's default limit of failed authentications, as a setting.
	require.InDelta(t, api.AuthFailureLimitDefault, authFailureLimit(c.AuthFailureLimit), 1e-12)
	off, err := loadWith(t, map[string]string{"DOCKET_AUTH_FAILURE_LIMIT": "off"})
	require.NoError(t, err)
	require.Negative(t, authFailureLimit(off.AuthFailureLimit), "off turns the limit off")
	_, err = loadWith(t, map[string]string{"DOCKET_AUTH_FAILURE_LIMIT": "ten"})
	require.ErrorContains(t, err, "DOCKET_AUTH_FAILURE_LIMIT")
}

func TestServeConfigSources(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DOCKET_LISTEN": "127.0.0.1:0", "DOCKET_LEASE_SECONDS": "7", "DOCKET_RESCUE_INTERVAL": "250ms",
		"DOCKET_RATE_LIMIT": "600/m", "DOCKET_LOG_LEVEL": "debug", "DOCKET_DATABASE_URL": "",
	}
	c, err := loadWith(t, env, "--lease-seconds", "9")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:0", c.Listen)
	require.Equal(t, 9, c.LeaseSeconds, "a flag wins over the environment")
	require.Equal(t, 250*time.Millisecond, c.RescueInterval)
	require.InDelta(t, 10, c.RateLimit.perSecond(), 1e-9)
	require.Equal(t, 600, rateBurst(c))
	require.Equal(t, "DEBUG", c.LogLevel.String())
	require.Equal(t, docket.DatabaseURLDefault, c.DatabaseURL, "an empty variable is unset")
}

// DOCKET_OUTBOX_MAX_AGE=0 keeps unpublished events forever: the worker's
// "never" is negative (its 0 is the default of 7 days).
func TestServeOutboxMaxAgeZeroIsNever(t *testing.T) {
	t.Parallel()
	c, err := loadWith(t, map[string]string{"DOCKET_OUTBOX_MAX_AGE": "0"})
	require.NoError(t, err)
	require.Negative(t, c.workerConfig().OutboxMaxAge)
	c, err = loadWith(t, nil, "--outbox-max-age", "36h")
	require.NoError(t, err)
	require.Equal(t, 36*time.Hour, c.workerConfig().OutboxMaxAge)
}

func TestServeConfigErrorsNameTheSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{env: map[string]string{"DOCKET_RATE_LIMIT": "fast"}, want: `invalid DOCKET_RATE_LIMIT "fast"`},
		{env: map[string]string{"DOCKET_RATE_LIMIT": "5/h"}, want: `invalid DOCKET_RATE_LIMIT "5/h"`},
		{env: map[string]string{"DOCKET_RATE_LIMIT": "-1/s"}, want: `invalid DOCKET_RATE_LIMIT "-1/s"`},
		{env: map[string]string{"DOCKET_TAKE_STRATEGY": "fastest"}, want: `invalid DOCKET_TAKE_STRATEGY: "fastest" must be ordered, random or candidates`},
		{env: map[string]string{"DOCKET_LEASE_SECONDS": "ten"}, want: `invalid DOCKET_LEASE_SECONDS "ten": must be an integer`},
		{env: map[string]string{"DOCKET_LEASE_SECONDS": "0"}, want: "invalid DOCKET_LEASE_SECONDS: 0 must be between 1"},
		{env: map[string]string{"DOCKET_RESCUE_INTERVAL": "15"}, want: `invalid DOCKET_RESCUE_INTERVAL "15": must be a Go duration`},
		{env: map[string]string{"DOCKET_SCHEDULER_INTERVAL": "-1s"}, want: "invalid DOCKET_SCHEDULER_INTERVAL: -1s must be at least 10ms"},
		// A loop's interval of 1ns queried the database without a pause.
		{args: []string{"--rescue-interval", "1ns"}, want: "invalid --rescue-interval: 1ns must be at least 10ms"},
		{args: []string{"--prune-interval", "9ms"}, want: "invalid --prune-interval: 9ms must be at least 10ms"},
		{args: []string{"--workflow-sweep-interval", "1us"}, want: "invalid --workflow-sweep-interval: 1µs must be at least 10ms"},
		{args: []string{"--poll-interval", "1ns"}, want: "invalid --poll-interval: 1ns must be at least 10ms"},
		{env: map[string]string{"DOCKET_WEBHOOK_POLL_INTERVAL": "1ns"}, want: "invalid DOCKET_WEBHOOK_POLL_INTERVAL: 1ns must be at least 10ms"},
		{env: map[string]string{"DOCKET_RETRY_BACKOFF_BASE": "1m", "DOCKET_RETRY_BACKOFF_MAX": "1s"}, want: "invalid DOCKET_RETRY_BACKOFF_MAX: 1s must not be below"},
		{env: map[string]string{"DOCKET_RETRY_BACKOFF_BASE": "2h"}, want: "invalid DOCKET_RETRY_BACKOFF_MAX (--retry-backoff-max): 1h0m0s"},
		{env: map[string]string{"DOCKET_MAX_BODY_BYTES": "1MB"}, want: `invalid DOCKET_MAX_BODY_BYTES "1MB"`},
		{env: map[string]string{"DOCKET_MAX_STREAMS_PER_KEY": "0"}, want: "invalid DOCKET_MAX_STREAMS_PER_KEY: 0 must be at least 1"},
		{env: map[string]string{"DOCKET_GC_PERCENT": "5"}, want: "invalid DOCKET_GC_PERCENT: 5 must be between 10 and 10000"},
		{args: []string{"--gc-percent", "off"}, want: `invalid --gc-percent "off": must be an integer`},
		{env: map[string]string{"DOCKET_ADMIN_KEY": "short"}, want: "invalid DOCKET_ADMIN_KEY: must be at least 16 characters"},
		{env: map[string]string{"DOCKET_LOG_LEVEL": "loud"}, want: `invalid DOCKET_LOG_LEVEL "loud"`},
		{env: map[string]string{"DOCKET_LISTEN": "8080"}, want: `invalid DOCKET_LISTEN: "8080" must be host:port`},
		{args: []string{"--leader-ttl", "0s"}, want: "invalid --leader-ttl: 0s must be positive"},
		{args: []string{"--body-read-timeout", "-1s"}, want: "invalid --body-read-timeout: -1s must not be negative"},
		// An elector attempts every third of the TTL: 2ns panicked in
		// time.NewTicker once the server had started.
		{env: map[string]string{"DOCKET_NATS_URL": "nats://127.0.0.1:4222,http://127.0.0.1:4222"}, want: `invalid DOCKET_NATS_URL: "nats://127.0.0.1:4222,http://127.0.0.1:4222" must be nats://host:port`},
		{args: []string{"--nats-url", "nats://"}, want: `invalid --nats-url: "nats://" must be nats://host:port`},
		{args: []string{"--nats-url", "nats://a:4222,"}, want: `invalid --nats-url: "nats://a:4222," must be nats://host:port`},
		// Its credentials are not repeated in the error (it is logged).
		{env: map[string]string{"DOCKET_NATS_URL": "nats://alice:s3cret@a:4222,nats://t0ken@b:4222,http://c:4222"},
			want: `invalid DOCKET_NATS_URL: "nats://alice:xxxxx@a:4222,nats://xxxxx@b:4222,http://c:4222" must be nats://host:port`},
		{env: map[string]string{"DOCKET_WEBHOOK_BREAKER_FAILURES": "4294967296"}, want: "invalid DOCKET_WEBHOOK_BREAKER_FAILURES: 4294967296 must be between 1 and 4294967295"},
		{args: []string{"--outbox-max-age", "-1h"}, want: "invalid --outbox-max-age: -1h0m0s must not be negative"},
		{args: []string{"--leader-ttl", "2ns"}, want: "invalid --leader-ttl: 2ns must be at least 100ms"},
		{env: map[string]string{"DOCKET_LEADER_TTL": "99ms"}, want: "invalid DOCKET_LEADER_TTL: 99ms must be at least 100ms"},
		{env: map[string]string{"DOCKET_LEADER_TTL": "1s"}, args: []string{"--leader-ttl", "x"}, want: `invalid --leader-ttl "x"`},
		// A setting that only matters with another, given without it (or
		// with the one that overrides it), was silently ignored.
		{args: []string{"--rate-burst", "5"}, want: "invalid --rate-burst: 5 has no effect without a rate limit: set DOCKET_RATE_LIMIT (--rate-limit) too"},
		{env: map[string]string{"DOCKET_RATE_BURST": "5"}, args: []string{"--rate-limit", "off"}, want: "invalid DOCKET_RATE_BURST: 5 has no effect without a rate limit: set --rate-limit too"},
		{args: []string{"--nats-dir", "/var/lib/nats", "--nats-url", "nats://nats-1:4222"},
			want: `invalid --nats-dir: "/var/lib/nats" is the embedded NATS server's storage, which --nats-url replaces: give one or the other`},
		{env: map[string]string{"DOCKET_NATS_DIR": "n", "DOCKET_NATS_URL": "nats://nats-1:4222"},
			want: `invalid DOCKET_NATS_DIR: "n" is the embedded NATS server's storage, which DOCKET_NATS_URL replaces`},
		{args: []string{"--webhook-allow-hosts", "hooks.example.com", "--webhook-allow-any=true"},
			want: "invalid --webhook-allow-hosts: has no effect with --webhook-allow-any=true (any host is allowed): give one or the other"},
		// A sqlite: URL the client refuses is refused with the settings:
		// the embedded NATS server's directory (natsDir) was made of it.
		{args: []string{"--database-url", "sqlite:"}, want: `invalid --database-url: database url "sqlite:" needs a file path`},
		{env: map[string]string{"DOCKET_DATABASE_URL": "sqlite:d.db?mode=ro"}, want: `invalid DOCKET_DATABASE_URL: database url "sqlite:d.db?mode=ro": sqlite:PATH takes no options`},
		{args: []string{"--database-url", "sqlite://file:d.db"}, want: "invalid --database-url: " + `database url "sqlite://file:d.db": write a file path after sqlite:, not a file: URI`},
	} {
		_, err := loadWith(t, tc.env, tc.args...)
		require.Error(t, err, "%v %v", tc.env, tc.args)
		require.Contains(t, err.Error(), tc.want)
	}
	_, err := loadWith(t, map[string]string{"DOCKET_RATE_LIMIT": "off", "DOCKET_ADMIN_KEY": "0123456789abcdef"})
	require.NoError(t, err)
	_, err = loadWith(t, map[string]string{"DOCKET_NATS_URL": "nats://nats-1:4222, tls://nats-2:4222,nats://user:pw@nats-3"})
	require.NoError(t, err)
	// Each of those alone, with its partner, or a burst of 0: accepted.
	for _, args := range [][]string{
		{"--rate-burst", "5", "--rate-limit", "10/s"}, {"--rate-burst", "0"}, {"--nats-dir", "n"},
		{"--webhook-allow-hosts", "hooks.example.com", "--webhook-allow-any=false"}, {"--webhook-allow-any=true"},
		{"--rescue-interval", "10ms", "--scheduler-interval", "10ms", "--prune-interval", "10ms",
			"--workflow-sweep-interval", "10ms", "--poll-interval", "10ms", "--webhook-poll-interval", "10ms"},
	} {
		_, err = loadWith(t, nil, args...)
		require.NoError(t, err, "%v", args)
	}
}

// TestServeGCPercent: serve sets its GOGC default only when the
// environment leaves Go's collector alone (GOGC and GOMEMLIMIT unset or
// empty); the setting given as a flag or variable always applies.
func TestServeGCPercent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want int // 0: serve leaves the collector to Go
	}{
		{want: gcPercentDefault},
		{env: map[string]string{"GOGC": ""}, want: gcPercentDefault},
		{env: map[string]string{"GOGC": "50"}},
		{env: map[string]string{"GOGC": "off"}},
		{env: map[string]string{"GOMEMLIMIT": "1GiB"}},
		{env: map[string]string{"DOCKET_GC_PERCENT": "150"}, want: 150},
		{env: map[string]string{"DOCKET_GC_PERCENT": "150", "GOGC": "50"}, want: 150},
		{env: map[string]string{"GOMEMLIMIT": "1GiB"}, args: []string{"--gc-percent", "200"}, want: 200},
	} {
		c, err := loadWith(t, tc.env, tc.args...)
		require.NoError(t, err)
		got, ok := c.gcPercent(func(k string) (string, bool) {
			v, ok := tc.env[k]
			return v, ok
		})
		require.Equal(t, tc.want != 0, ok, "%v %v", tc.env, tc.args)
		if ok {
			require.Equal(t, tc.want, got, "%v %v", tc.env, tc.args)
		}
	}
}

// The configuration page documents every flag and variable.
func TestServeConfigDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	for _, s := range serveSettings {
		row := "| `--" + s.flag + "` | `" + s.env + "` |"
		require.True(t, strings.Contains(string(doc), row), "docs/configuration.md lacks the row %s", row)
	}
}

// TestServePoolDefault: docket serve gives PostgreSQL a pool of
// servePoolConnsDefault connections unless the URL sets pool_max_conns,
// as pgx reads it; other URLs are left alone.
func TestServePoolDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url  string
		want int // pgx's MaxConns; 0: the URL must come back unchanged
	}{
		{"postgres://u@h/db", servePoolConnsDefault},
		{"postgres://u@h/db?", servePoolConnsDefault},
		{"postgresql://u:p@h:5432/db?sslmode=disable", servePoolConnsDefault},
		{"postgres://u@h/db?sslmode=disable&search_path=s&", servePoolConnsDefault},
		{"postgres://u@h/db?pool_max_conns=3", 3},
		{"postgres://u@h/db?pool_max_conns=16", 16},
		{"postgres://u@h/db?sslmode=disable&pool_max_conns=40", 40},
		{"postgres://u@h/db?my_pool_max_conns=1", servePoolConnsDefault},
		{"sqlite:docket.db", 0},
		{"postgres://u@h/db#x", 0},
	} {
		got := withServePool(tc.url)
		if tc.want == 0 {
			require.Equal(t, tc.url, got)
			continue
		}
		cfg, err := pgxpool.ParseConfig(got)
		require.NoError(t, err, got)
		require.Equal(t, int32(tc.want), cfg.MaxConns, got)
	}
	c, err := loadWith(t, map[string]string{"DOCKET_DATABASE_URL": "postgres://u@h/db?sslmode=disable"})
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("postgres://u@h/db?sslmode=disable&pool_max_conns=%d", max(8, runtime.NumCPU())), c.clientConfig(nil, nil).DatabaseURL)
}

// TestServeNATSDir: the embedded NATS server's storage is next to the
// SQLite file the client opens, its path read as docket.SQLitePath reads
// it (taken as written: %23 is not decoded).
func TestServeNATSDir(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "docket.db-nats"},
		{[]string{"--database-url", "sqlite:data/a.db"}, "data/a.db-nats"},
		{[]string{"--database-url", "sqlite:///var/lib/docket/docket.db"}, "/var/lib/docket/docket.db-nats"},
		{[]string{"--database-url", "sqlite:a%23b.db"}, "a%23b.db-nats"},
		{[]string{"--database-url", "postgres://u@h/db"}, "docket-nats"},
		{[]string{"--database-url", "sqlite:a.db", "--nats-dir", "n"}, "n"},
		{[]string{"--database-url", "sqlite:a.db", "--nats-url", "nats://n:4222"}, ""},
	} {
		cfg, err := loadWith(t, nil, tc.args...)
		require.NoError(t, err, "%v", tc.args)
		require.Equal(t, tc.want, cfg.natsDir(), "%v", tc.args)
	}
}

// TestServeCountsDashboardInFlight: docket_http_requests_in_flight counts
// the dashboard's requests (its live streams last) as well as the API's,
// as docs/configuration.md says: every request the process serves.
func TestServeCountsDashboardInFlight(t *testing.T) {
	t.Parallel()
	m := api.NewMetrics()
	inFlight := func() float64 {
		families, err := m.Registry().Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() == "docket_http_requests_in_flight" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no docket_http_requests_in_flight")
		return 0
	}
	entered, release := make(chan struct{}), make(chan struct{})
	dashboard := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { close(entered); <-release })
	h := mountWeb(http.NotFoundHandler(), dashboard, m)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/live", nil))
	}()
	<-entered
	require.Equal(t, 1.0, inFlight(), "the dashboard's request is in flight")
	close(release)
	<-done
	require.Equal(t, 0.0, inFlight())
}
