package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/api"
	"github.com/docket-run/docket/internal/leader"
	"github.com/docket-run/docket/internal/natsurl"
	"github.com/docket-run/docket/internal/web"
	"github.com/docket-run/docket/natsembed"
)

// serveConfig is every setting of docket serve. Each is a flag and an
// environment variable (serveSettings); a flag wins over the environment,
// which wins over the default. Zero values are not defaults: load fills
// every field.
type serveConfig struct {
	Listen            string        // --listen, DOCKET_LISTEN; default 127.0.0.1:8080
	AddrFile          string        // --addr-file, DOCKET_ADDR_FILE; default none
	DatabaseURL       string        // --database-url, DOCKET_DATABASE_URL; default sqlite:docket.db
	NodeID            string        // --node-id, DOCKET_NODE_ID; default hostname-pid-random
	AdminKey          string        // --admin-key, DOCKET_ADMIN_KEY; default none
	LeaseSeconds      int           // --lease-seconds, DOCKET_LEASE_SECONDS; default 30
	JobTimeout        time.Duration // --job-timeout, DOCKET_JOB_TIMEOUT; default 5m
	RescueInterval    time.Duration // --rescue-interval, DOCKET_RESCUE_INTERVAL; default 15s
	SchedulerInterval time.Duration // --scheduler-interval, DOCKET_SCHEDULER_INTERVAL; default 1s
	WorkflowSweep     time.Duration // --workflow-sweep-interval, DOCKET_WORKFLOW_SWEEP_INTERVAL; default 5s
	PruneInterval     time.Duration // --prune-interval, DOCKET_PRUNE_INTERVAL; default 1m
	Retention         time.Duration // --retention, DOCKET_RETENTION; default 168h
	OutboxMaxAge      time.Duration // --outbox-max-age, DOCKET_OUTBOX_MAX_AGE; default 168h, 0 never
	PollInterval      time.Duration // --poll-interval, DOCKET_POLL_INTERVAL; default 1s
	LeaderTTL         time.Duration // --leader-ttl, DOCKET_LEADER_TTL; default 15s
	RetryBackoffBase  time.Duration // --retry-backoff-base, DOCKET_RETRY_BACKOFF_BASE; default 1s
	RetryBackoffMax   time.Duration // --retry-backoff-max, DOCKET_RETRY_BACKOFF_MAX; default 1h
	PriorityAging     time.Duration // --priority-aging, DOCKET_PRIORITY_AGING; default 5m
	MaxBodyBytes      int64         // --max-body-bytes, DOCKET_MAX_BODY_BYTES; default 1048576
	RateLimit         rateLimit     // --rate-limit, DOCKET_RATE_LIMIT; default off
	MaxStreamsPerKey  int           // --max-streams-per-key, DOCKET_MAX_STREAMS_PER_KEY; default 100
	RateBurst         int           // --rate-burst, DOCKET_RATE_BURST; default 0 (the limit's N)
	AuthFailureLimit  rateLimit     // --auth-failure-limit, DOCKET_AUTH_FAILURE_LIMIT; default 30/m
	BodyReadTimeout   time.Duration // --body-read-timeout, DOCKET_BODY_READ_TIMEOUT; default 1m, 0 none
	ShutdownTimeout   time.Duration // --shutdown-timeout, DOCKET_SHUTDOWN_TIMEOUT; default 30s
	GCPercent         int           // --gc-percent, DOCKET_GC_PERCENT; default 400 (unless GOGC or GOMEMLIMIT is set)
	LogLevel          slog.Level    // --log-level, DOCKET_LOG_LEVEL; default info
	LogFormat         string        // --log-format, DOCKET_LOG_FORMAT; default text
	NATSURL           string        // --nats-url, DOCKET_NATS_URL; default "" (embedded bus)
	NATSDir           string        // --nats-dir, DOCKET_NATS_DIR; default "" (next to the SQLite file)
	EventRetention    time.Duration // --event-retention, DOCKET_EVENT_RETENTION; default 24h
	TakeStrategy      string        // --take-strategy, DOCKET_TAKE_STRATEGY; default random

	// Webhooks (docs/events.md).
	WebhookPollInterval    time.Duration // --webhook-poll-interval, DOCKET_WEBHOOK_POLL_INTERVAL; default 1s
	WebhookTimeout         time.Duration // --webhook-timeout, DOCKET_WEBHOOK_TIMEOUT; default 10s
	WebhookBackoffBase     time.Duration // --webhook-backoff-base, DOCKET_WEBHOOK_BACKOFF_BASE; default 5s
	WebhookBackoffMax      time.Duration // --webhook-backoff-max, DOCKET_WEBHOOK_BACKOFF_MAX; default 1h
	WebhookMaxAttempts     int           // --webhook-max-attempts, DOCKET_WEBHOOK_MAX_ATTEMPTS; default 15
	WebhookBreakerFailures int           // --webhook-breaker-failures, DOCKET_WEBHOOK_BREAKER_FAILURES; default 5
	WebhookBreakerOpen     time.Duration // --webhook-breaker-open, DOCKET_WEBHOOK_BREAKER_OPEN; default 30s
	WebhookAllowHosts      string        // --webhook-allow-hosts, DOCKET_WEBHOOK_ALLOW_HOSTS; default none
	WebhookAllowAny        bool          // --webhook-allow-any, DOCKET_WEBHOOK_ALLOW_ANY; default false

	// from names where each setting came from, by environment variable:
	// "--flag" or "DOCKET_X"; absent for defaults.
	from map[string]string
}

// setting is one row of the configuration table.
type setting struct {
	flag, env string
	def       string // as a user would write it; parsed like any other value
	usage     string
	field     func(c *serveConfig) any // pointer to the field it sets
}

// serveSettings is the whole configuration of docket serve, in the order
// of docs/configuration.md (a test checks the page lists every row).
var serveSettings = []setting{
	{"listen", "DOCKET_LISTEN", "127.0.0.1:8080", "address to serve HTTP on, host:port (port 0 picks a free port)", func(c *serveConfig) any { return &c.Listen }},
	{"addr-file", "DOCKET_ADDR_FILE", "", "once serving, write the bound host:port to this file (removed at exit): how a harness that passes port 0 learns the port", func(c *serveConfig) any { return &c.AddrFile }},
	{"database-url", "DOCKET_DATABASE_URL", docket.DatabaseURLDefault, "database: postgres://… or sqlite:PATH", func(c *serveConfig) any { return &c.DatabaseURL }},
	{"node-id", "DOCKET_NODE_ID", "", "name of this process in leases, attempts and the nodes table (default hostname-pid-random)", func(c *serveConfig) any { return &c.NodeID }},
	{"admin-key", "DOCKET_ADMIN_KEY", "", "bootstrap admin API key (at least 16 characters), imported as key \"bootstrap\"; prefer the environment variable: arguments are visible to other users", func(c *serveConfig) any { return &c.AdminKey }},
	{"lease-seconds", "DOCKET_LEASE_SECONDS", "30", "lease of jobs taken by in-process workers, in seconds; renewed once a quarter of it has passed", func(c *serveConfig) any { return &c.LeaseSeconds }},
	{"job-timeout", "DOCKET_JOB_TIMEOUT", "5m", "default deadline of one attempt run by an in-process worker", func(c *serveConfig) any { return &c.JobTimeout }},
	{"rescue-interval", "DOCKET_RESCUE_INTERVAL", "15s", "how often the leader looks for expired leases", func(c *serveConfig) any { return &c.RescueInterval }},
	{"scheduler-interval", "DOCKET_SCHEDULER_INTERVAL", "1s", "how often RETRY jobs whose backoff is over are queued again", func(c *serveConfig) any { return &c.SchedulerInterval }},
	{"workflow-sweep-interval", "DOCKET_WORKFLOW_SWEEP_INTERVAL", "5s", "how often workflow runs whose advancement was missed, and signal steps past their timeout, are looked for", func(c *serveConfig) any { return &c.WorkflowSweep }},
	{"prune-interval", "DOCKET_PRUNE_INTERVAL", "1m", "how often finished jobs past retention are deleted", func(c *serveConfig) any { return &c.PruneInterval }},
	{"retention", "DOCKET_RETENTION", "168h", "how long SUCCESS, DEAD and CANCELED jobs are kept", func(c *serveConfig) any { return &c.Retention }},
	{"outbox-max-age", "DOCKET_OUTBOX_MAX_AGE", "168h", "how long an event no relay published (or no webhook dispatcher took) is kept in the outbox (0: forever)", func(c *serveConfig) any { return &c.OutboxMaxAge }},
	{"poll-interval", "DOCKET_POLL_INTERVAL", "1s", "fallback poll for due jobs when no wakeup arrives", func(c *serveConfig) any { return &c.PollInterval }},
	{"leader-ttl", "DOCKET_LEADER_TTL", "15s", "term of each leadership (maintenance, event relay, webhooks); a dead leader is replaced within it", func(c *serveConfig) any { return &c.LeaderTTL }},
	{"retry-backoff-base", "DOCKET_RETRY_BACKOFF_BASE", "1s", "retry delay after the first failed attempt; doubles per attempt", func(c *serveConfig) any { return &c.RetryBackoffBase }},
	{"retry-backoff-max", "DOCKET_RETRY_BACKOFF_MAX", "1h", "cap of the retry delay", func(c *serveConfig) any { return &c.RetryBackoffMax }},
	{"priority-aging", "DOCKET_PRIORITY_AGING", "5m", "waiting time one priority step is worth (0 turns aging off)", func(c *serveConfig) any { return &c.PriorityAging }},
	{"max-body-bytes", "DOCKET_MAX_BODY_BYTES", strconv.Itoa(api.MaxBodyBytesDefault), "largest request body accepted; larger is 413", func(c *serveConfig) any { return &c.MaxBodyBytes }},
	{"rate-limit", "DOCKET_RATE_LIMIT", "off", "requests per API key, N/s or N/m (e.g. 200/s); over it is 429 with Retry-After", func(c *serveConfig) any { return &c.RateLimit }},
	{"max-streams-per-key", "DOCKET_MAX_STREAMS_PER_KEY", strconv.Itoa(api.MaxStreamsPerKeyDefault), "event streams (SSE) one API key may hold open at once on this server; one more is 429", func(c *serveConfig) any { return &c.MaxStreamsPerKey }},
	{"take-strategy", "DOCKET_TAKE_STRATEGY", string(docket.TakeStrategyDefault), "how POST /v1/assignments picks a unit of a pool: ordered, random or candidates (docs/human-work.md)", func(c *serveConfig) any { return &c.TakeStrategy }},
	{"rate-burst", "DOCKET_RATE_BURST", "0", "requests a key may send at once under the rate limit (0: N of the limit)", func(c *serveConfig) any { return &c.RateBurst }},
	{"auth-failure-limit", "DOCKET_AUTH_FAILURE_LIMIT", "30/m", "failed authentications (unknown or revoked API keys) per client address, N/s or N/m, or off; past it the address's requests with keys not cached are 429 with Retry-After, before any read of keys", func(c *serveConfig) any { return &c.AuthFailureLimit }},
	{"body-read-timeout", "DOCKET_BODY_READ_TIMEOUT", bodyReadTimeoutDefault.String(), "how long a request body may take to arrive; a client still sending after it is cut off (0: no bound)", func(c *serveConfig) any { return &c.BodyReadTimeout }},
	{"shutdown-timeout", "DOCKET_SHUTDOWN_TIMEOUT", "30s", "on SIGTERM/SIGINT, how long requests and maintenance may take to finish", func(c *serveConfig) any { return &c.ShutdownTimeout }},
	{"gc-percent", "DOCKET_GC_PERCENT", strconv.Itoa(gcPercentDefault), "Go's garbage collection target (GOGC) of the server process; the default applies only when neither GOGC nor GOMEMLIMIT is set", func(c *serveConfig) any { return &c.GCPercent }},
	{"log-level", "DOCKET_LOG_LEVEL", "info", "debug, info, warn or error", func(c *serveConfig) any { return &c.LogLevel }},
	{"log-format", "DOCKET_LOG_FORMAT", "text", "text or json (logs go to stderr)", func(c *serveConfig) any { return &c.LogFormat }},
	{"nats-url", "DOCKET_NATS_URL", "", "external NATS server or cluster with JetStream for events, nats://host:4222 (default: an embedded server)", func(c *serveConfig) any { return &c.NATSURL }},
	{"nats-dir", "DOCKET_NATS_DIR", "", "JetStream storage directory of the embedded NATS server (default: <SQLite file>-nats, or docket-nats with PostgreSQL)", func(c *serveConfig) any { return &c.NATSDir }},
	{"event-retention", "DOCKET_EVENT_RETENTION", "24h", "how long published events are kept in the database for SSE resume (Last-Event-ID)", func(c *serveConfig) any { return &c.EventRetention }},
	{"webhook-poll-interval", "DOCKET_WEBHOOK_POLL_INTERVAL", "1s", "how often the leader fans new events out to webhooks and looks for due deliveries", func(c *serveConfig) any { return &c.WebhookPollInterval }},
	{"webhook-timeout", "DOCKET_WEBHOOK_TIMEOUT", "10s", "deadline of one webhook delivery request", func(c *serveConfig) any { return &c.WebhookTimeout }},
	{"webhook-backoff-base", "DOCKET_WEBHOOK_BACKOFF_BASE", "5s", "delay after a failed webhook delivery attempt; doubles per attempt", func(c *serveConfig) any { return &c.WebhookBackoffBase }},
	{"webhook-backoff-max", "DOCKET_WEBHOOK_BACKOFF_MAX", "1h", "cap of the webhook retry delay", func(c *serveConfig) any { return &c.WebhookBackoffMax }},
	{"webhook-max-attempts", "DOCKET_WEBHOOK_MAX_ATTEMPTS", "15", "failed attempts after which a webhook delivery is DEAD", func(c *serveConfig) any { return &c.WebhookMaxAttempts }},
	{"webhook-breaker-failures", "DOCKET_WEBHOOK_BREAKER_FAILURES", "5", "consecutive failures that open a webhook endpoint's circuit breaker", func(c *serveConfig) any { return &c.WebhookBreakerFailures }},
	{"webhook-breaker-open", "DOCKET_WEBHOOK_BREAKER_OPEN", "30s", "how long an open breaker sends nothing to its endpoint before one request is tried (attempts due meanwhile count as failed)", func(c *serveConfig) any { return &c.WebhookBreakerOpen }},
	{"webhook-allow-hosts", "DOCKET_WEBHOOK_ALLOW_HOSTS", "", "webhook targets allowed besides loopback: comma-separated host names, *.domain, IPs or CIDRs", func(c *serveConfig) any { return &c.WebhookAllowHosts }},
	{"webhook-allow-any", "DOCKET_WEBHOOK_ALLOW_ANY", "false", "let webhooks target any host (turns the SSRF guard off)", func(c *serveConfig) any { return &c.WebhookAllowAny }},
}

// rateLimit is a parsed DOCKET_RATE_LIMIT: N requests per Per; zero is off.
type rateLimit struct {
	N   float64
	Per time.Duration
}

func (r rateLimit) perSecond() float64 {
	if r.N == 0 {
		return 0
	}
	return r.N / r.Per.Seconds()
}

// authFailureLimit is api.Config.AuthFailureLimit for the setting: its
// rate a second, or -1 (off) when it is off.
func authFailureLimit(r rateLimit) float64 {
	if r.N == 0 {
		return -1
	}
	return r.perSecond()
}

func parseRateLimit(v string) (rateLimit, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "off", "0":
		return rateLimit{}, nil
	}
	n, unit, ok := strings.Cut(strings.TrimSpace(v), "/")
	per := map[string]time.Duration{"s": time.Second, "m": time.Minute}[strings.TrimSpace(unit)]
	f, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
	if !ok || per == 0 || err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return rateLimit{}, fmt.Errorf("%q: must be N/s or N/m with N > 0 (e.g. 200/s), or off", v)
	}
	return rateLimit{N: f, Per: per}, nil
}

// parseInto sets the field p points to from its text form.
func parseInto(p any, v string) error {
	var err error
	switch p := p.(type) {
	case *string:
		*p = v
	case *int:
		*p, err = strconv.Atoi(v)
		if err != nil {
			err = fmt.Errorf("%q: must be an integer", v)
		}
	case *int64:
		*p, err = strconv.ParseInt(v, 10, 64)
		if err != nil {
			err = fmt.Errorf("%q: must be an integer", v)
		}
	case *time.Duration:
		*p, err = time.ParseDuration(v)
		if err != nil {
			err = fmt.Errorf("%q: must be a Go duration such as 500ms, 15s or 1h30m", v)
		}
	case *slog.Level:
		if err = p.UnmarshalText([]byte(v)); err != nil {
			err = fmt.Errorf("%q: must be debug, info, warn or error", v)
		}
	case *rateLimit:
		*p, err = parseRateLimit(v)
	case *bool:
		*p, err = strconv.ParseBool(v)
		if err != nil {
			err = fmt.Errorf("%q: must be true or false", v)
		}
	default:
		panic(fmt.Sprintf("serve setting of unknown type %T", p))
	}
	return err
}

// addServeFlags registers one flag per setting. Flags hold text; values
// are parsed by loadServeConfig, so flags and environment share one parser.
func addServeFlags(fs *pflag.FlagSet) {
	var probe serveConfig
	for _, s := range serveSettings {
		fs.Var(&textFlag{value: s.def, typ: typeName(s.field(&probe))}, s.flag, s.usage+" (env "+s.env+")")
		fs.Lookup(s.flag).DefValue = s.def
	}
}

// textFlag is a flag kept as text, with the type shown in --help.
type textFlag struct{ value, typ string }

func (f *textFlag) String() string     { return f.value }
func (f *textFlag) Set(v string) error { f.value = v; return nil }
func (f *textFlag) Type() string       { return f.typ }

func typeName(field any) string {
	switch field.(type) {
	case *int, *int64:
		return "int"
	case *time.Duration:
		return "duration"
	case *slog.Level:
		return "level"
	case *rateLimit:
		return "rate"
	case *bool:
		return "bool"
	}
	return "string"
}

// loadServeConfig resolves every setting: the flag if it was given, else
// the environment variable if it is set and not empty, else the default.
// Errors name the flag or variable the bad value came from.
func loadServeConfig(fs *pflag.FlagSet, lookupEnv func(string) (string, bool)) (*serveConfig, error) {
	c := &serveConfig{from: map[string]string{}}
	var errs []error
	for _, s := range serveSettings {
		v, src := s.def, ""
		if f := fs.Lookup(s.flag); f != nil && f.Changed {
			v, src = f.Value.String(), "--"+s.flag
		} else if e, ok := lookupEnv(s.env); ok && e != "" {
			v, src = e, s.env
		}
		if src != "" {
			c.from[s.env] = src
		}
		if err := parseInto(s.field(c), v); err != nil {
			errs = append(errs, fmt.Errorf("invalid %s %w", c.name(s.env), err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// name is how errors refer to a setting: where its value came from, or
// both spellings for a default.
func (c *serveConfig) name(env string) string {
	if src, ok := c.from[env]; ok {
		return src
	}
	for _, s := range serveSettings {
		if s.env == env {
			return env + " (--" + s.flag + ")"
		}
	}
	return env
}

// serveIntervalMin is the shortest interval of serve's periodic loops
// (rescue, scheduler, prune, workflow sweep, poll, webhook poll): each
// tick queries the database. It is the Go API's minimum too.
const serveIntervalMin = docket.WorkerIntervalMin

// Validate reports every setting out of range, naming it.
func (c *serveConfig) Validate() error {
	var errs []error
	check := func(env string, ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("invalid %s: "+format, append([]any{c.name(env)}, args...)...))
		}
	}
	_, _, err := net.SplitHostPort(c.Listen)
	check("DOCKET_LISTEN", err == nil, "%q must be host:port, e.g. 127.0.0.1:8080 or :8080", c.Listen)
	check("DOCKET_DATABASE_URL", c.DatabaseURL != "", "must not be empty")
	_, isSQLite, sqliteErr := docket.SQLitePath(c.DatabaseURL)
	check("DOCKET_DATABASE_URL", sqliteErr == nil, "%v", sqliteErr)
	isPostgres := strings.HasPrefix(c.DatabaseURL, "postgres://") || strings.HasPrefix(c.DatabaseURL, "postgresql://")
	check("DOCKET_DATABASE_URL", c.DatabaseURL == "" || isSQLite || isPostgres, "scheme must be postgres://, postgresql:// or sqlite:PATH")
	check("DOCKET_TAKE_STRATEGY", docket.TakeStrategy(c.TakeStrategy).Valid(), "%q must be ordered, random or candidates", c.TakeStrategy)
	check("DOCKET_ADMIN_KEY", c.AdminKey == "" || len(c.AdminKey) >= 16, "must be at least 16 characters (it has %d)", len(c.AdminKey))
	check("DOCKET_LEASE_SECONDS", c.LeaseSeconds >= 1 && c.LeaseSeconds <= 86400, "%d must be between 1 and 86400", c.LeaseSeconds)
	for _, d := range []struct {
		env string
		v   time.Duration
	}{
		{"DOCKET_JOB_TIMEOUT", c.JobTimeout},
		{"DOCKET_RETENTION", c.Retention},
		{"DOCKET_LEADER_TTL", c.LeaderTTL}, {"DOCKET_RETRY_BACKOFF_BASE", c.RetryBackoffBase},
		{"DOCKET_SHUTDOWN_TIMEOUT", c.ShutdownTimeout}, {"DOCKET_EVENT_RETENTION", c.EventRetention},
		{"DOCKET_WEBHOOK_TIMEOUT", c.WebhookTimeout},
		{"DOCKET_WEBHOOK_BACKOFF_BASE", c.WebhookBackoffBase}, {"DOCKET_WEBHOOK_BREAKER_OPEN", c.WebhookBreakerOpen},
	} {
		check(d.env, d.v > 0, "%v must be positive", d.v)
	}
	// A loop's interval of 1ns was accepted and queried the database
	// without a pause (a core busy per loop).
	for _, d := range []struct {
		env string
		v   time.Duration
	}{
		{"DOCKET_RESCUE_INTERVAL", c.RescueInterval}, {"DOCKET_SCHEDULER_INTERVAL", c.SchedulerInterval},
		{"DOCKET_PRUNE_INTERVAL", c.PruneInterval}, {"DOCKET_WORKFLOW_SWEEP_INTERVAL", c.WorkflowSweep},
		{"DOCKET_POLL_INTERVAL", c.PollInterval}, {"DOCKET_WEBHOOK_POLL_INTERVAL", c.WebhookPollInterval},
	} {
		check(d.env, d.v >= serveIntervalMin, "%v must be at least %v", d.v, serveIntervalMin)
	}
	check("DOCKET_LEADER_TTL", c.LeaderTTL <= 0 || c.LeaderTTL >= leader.TTLMin, "%v must be at least %v", c.LeaderTTL, leader.TTLMin)
	check("DOCKET_WEBHOOK_BACKOFF_MAX", c.WebhookBackoffMax >= c.WebhookBackoffBase,
		"%v must not be below DOCKET_WEBHOOK_BACKOFF_BASE (%v)", c.WebhookBackoffMax, c.WebhookBackoffBase)
	check("DOCKET_WEBHOOK_MAX_ATTEMPTS", c.WebhookMaxAttempts >= 1 && c.WebhookMaxAttempts <= 1000, "%d must be between 1 and 1000", c.WebhookMaxAttempts)
	// The breaker counts in 32 bits: 4294967296 wrapped to 0 and opened it
	// at the first failure.
	check("DOCKET_WEBHOOK_BREAKER_FAILURES", c.WebhookBreakerFailures >= 1 && int64(c.WebhookBreakerFailures) <= math.MaxUint32,
		"%d must be between 1 and %d", c.WebhookBreakerFailures, uint32(math.MaxUint32))
	// 0 keeps the outbox forever; a negative age did too, silently.
	check("DOCKET_OUTBOX_MAX_AGE", c.OutboxMaxAge >= 0, "%v must not be negative (0 keeps events forever)", c.OutboxMaxAge)
	hostsErr := docket.CheckWebhookAllowHosts(c.webhookAllowHosts())
	check("DOCKET_WEBHOOK_ALLOW_HOSTS", hostsErr == nil, "%v", hostsErr)
	check("DOCKET_RETRY_BACKOFF_MAX", c.RetryBackoffMax >= c.RetryBackoffBase,
		"%v must not be below DOCKET_RETRY_BACKOFF_BASE (%v)", c.RetryBackoffMax, c.RetryBackoffBase)
	check("DOCKET_PRIORITY_AGING", c.PriorityAging >= 0, "%v must not be negative", c.PriorityAging)
	check("DOCKET_BODY_READ_TIMEOUT", c.BodyReadTimeout >= 0, "%v must not be negative (0: no bound)", c.BodyReadTimeout)
	check("DOCKET_GC_PERCENT", c.GCPercent >= 10 && c.GCPercent <= 10000, "%d must be between 10 and 10000", c.GCPercent)
	check("DOCKET_MAX_BODY_BYTES", c.MaxBodyBytes >= 1024, "%d must be at least 1024", c.MaxBodyBytes)
	check("DOCKET_MAX_STREAMS_PER_KEY", c.MaxStreamsPerKey >= 1, "%d must be at least 1", c.MaxStreamsPerKey)
	check("DOCKET_RATE_BURST", c.RateBurst >= 0, "%d must not be negative", c.RateBurst)
	check("DOCKET_LOG_FORMAT", c.LogFormat == "text" || c.LogFormat == "json", "%q must be text or json", c.LogFormat)
	check("DOCKET_NATS_URL", c.NATSURL == "" || validNATSURLs(c.NATSURL),
		"%q must be nats://host:port (several comma-separated) or empty for the embedded server", natsurl.Redact(c.NATSURL))
	// A setting that only matters with another one was silently ignored
	// without it (or with it): refused, naming both.
	check("DOCKET_RATE_BURST", c.RateBurst == 0 || c.RateLimit.N > 0,
		"%d has no effect without a rate limit: set %s too, or leave the burst out", c.RateBurst, c.name("DOCKET_RATE_LIMIT"))
	check("DOCKET_NATS_DIR", c.NATSDir == "" || c.NATSURL == "",
		"%q is the embedded NATS server's storage, which %s replaces: give one or the other", c.NATSDir, c.name("DOCKET_NATS_URL"))
	check("DOCKET_WEBHOOK_ALLOW_HOSTS", c.WebhookAllowHosts == "" || !c.WebhookAllowAny,
		"has no effect with %s=true (any host is allowed): give one or the other", c.name("DOCKET_WEBHOOK_ALLOW_ANY"))
	return errors.Join(errs...)
}

// validNATSURLs tells whether every comma-separated element of v is a
// nats:// or tls:// URL naming a host: "nats://a:4222,http://b" once
// passed a check of the prefix alone, and the bus then retried the bad
// server for ever while /healthz said degraded.
func validNATSURLs(v string) bool {
	for part := range strings.SplitSeq(v, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Hostname() == "" {
			return false
		}
	}
	return true
}

// servePoolConnsDefault is the PostgreSQL connection pool of docket serve
// when the database URL does not set pool_max_conns: 8, or the number of
// cores when that is more. pgx's own default,
// max(4, cores), is sized for a program that makes its own queries; a
// server answers many HTTP clients at once, and with 4 connections its
// requests queue for one (each wait a goroutine parked and woken). In the
// crowd benchmark on 2 cores, 8 connections cut the server's CPU per
// judgment by ~10% against 4, 16 by ~20%, but PostgreSQL's rose with
// them (more transactions contending for the same rows at once: +0–5% at
// 8, +10–25% at 16), so that their sum hardly moved; 8 takes the
// server's share without most of PostgreSQL's (docs/benchmarks.md,
// "Fifth round: the server's CPU"). On a machine of more cores pgx's own
// default is larger, and kept: never fewer connections than pgx would
// open.
var servePoolConnsDefault = max(8, runtime.NumCPU())

// withServePool is url with pool_max_conns=servePoolConnsDefault added
// when it is a PostgreSQL URL that does not set pool_max_conns itself.
func withServePool(url string) string {
	if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		return url
	}
	if strings.Contains(url, "#") {
		return url // a fragment: leave the URL to pgx as given
	}
	_, query, hasQuery := strings.Cut(url, "?")
	for kv := range strings.SplitSeq(query, "&") {
		if k, _, _ := strings.Cut(kv, "="); k == "pool_max_conns" {
			return url
		}
	}
	sep := "?"
	if hasQuery {
		sep = "&"
		if query == "" || strings.HasSuffix(query, "&") {
			sep = ""
		}
	}
	return url + sep + "pool_max_conns=" + strconv.Itoa(servePoolConnsDefault)
}

func (c *serveConfig) clientConfig(logger *slog.Logger, onFinished func(docket.JobFinishedEvent)) docket.Config {
	return docket.Config{
		DatabaseURL: withServePool(c.DatabaseURL), AutoMigrate: true, PriorityAging: c.PriorityAging,
		RetryBackoffBase: c.RetryBackoffBase, RetryBackoffMax: c.RetryBackoffMax,
		Logger: logger, OnJobFinished: onFinished, TakeStrategy: docket.TakeStrategy(c.TakeStrategy),
	}
}

func (c *serveConfig) workerConfig() docket.WorkerConfig {
	return docket.WorkerConfig{
		NodeID: c.NodeID, LeaseDuration: time.Duration(c.LeaseSeconds) * time.Second,
		JobTimeout: c.JobTimeout, RescueInterval: c.RescueInterval, SchedulerInterval: c.SchedulerInterval,
		PruneInterval: c.PruneInterval, Retention: c.Retention, OutboxMaxAge: c.outboxMaxAge(),
		PollInterval: c.PollInterval, LeaderTTL: c.LeaderTTL, RetryBackoffBase: c.RetryBackoffBase, RetryBackoffMax: c.RetryBackoffMax,
		WorkflowSweepInterval: c.WorkflowSweep,
	}
}

// outboxMaxAge is DOCKET_OUTBOX_MAX_AGE as WorkerConfig.OutboxMaxAge takes
// it: 0 (forever) is negative there, where 0 is the default.
func (c *serveConfig) outboxMaxAge() time.Duration {
	if c.OutboxMaxAge <= 0 {
		return -1
	}
	return c.OutboxMaxAge
}

// natsDir is the embedded server's storage: DOCKET_NATS_DIR, by default
// next to the SQLite file (docket.db-nats) or, with PostgreSQL, docket-nats.
// Empty with an external NATS (DOCKET_NATS_URL).
func (c *serveConfig) natsDir() string {
	if c.NATSURL != "" {
		return ""
	}
	if c.NATSDir != "" {
		return c.NATSDir
	}
	// Validate refused a sqlite: URL docket.SQLitePath finds no path in.
	if path, ok, err := docket.SQLitePath(c.DatabaseURL); ok && err == nil {
		return path + "-nats"
	}
	return "docket-nats"
}

// openBus opens the event bus: the external NATS of DOCKET_NATS_URL, or a
// server embedded in this process (package natsembed: serve is what links
// it). close closes the bus, then the embedded server.
func (c *serveConfig) openBus(ctx context.Context, logger *slog.Logger) (bus *docket.EventBus, close func(), err error) {
	cfg := docket.EventBusConfig{URL: c.NATSURL, Logger: logger}
	var srv *natsembed.Server
	if c.NATSURL == "" {
		if srv, err = natsembed.Start(c.natsDir()); err != nil {
			return nil, nil, err
		}
		cfg.Embedded = srv
	}
	bus, err = docket.OpenEventBus(ctx, cfg)
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return nil, nil, err
	}
	return bus, func() {
		bus.Close()
		if srv != nil {
			srv.Close()
		}
	}, nil
}

// webhookAllowHosts splits DOCKET_WEBHOOK_ALLOW_HOSTS.
func (c *serveConfig) webhookAllowHosts() []string {
	var out []string
	for _, h := range strings.Split(c.WebhookAllowHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// webhookConfig is the webhook service's: it elects its own leadership
// under the worker's node id, with the same term.
func (c *serveConfig) webhookConfig(nodeID string) docket.WebhooksConfig {
	return docket.WebhooksConfig{
		NodeID: nodeID, LeaderTTL: c.LeaderTTL, PollInterval: c.WebhookPollInterval, Timeout: c.WebhookTimeout,
		BackoffBase: c.WebhookBackoffBase, BackoffMax: c.WebhookBackoffMax, MaxAttempts: c.WebhookMaxAttempts,
		BreakerFailures: c.WebhookBreakerFailures, BreakerOpen: c.WebhookBreakerOpen,
		AllowHosts: c.webhookAllowHosts(), AllowAny: c.WebhookAllowAny, Retention: c.Retention,
	}
}

func (c *serveConfig) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogLevel}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func serveCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP API and the maintenance services (on the embedded SQLite file by default)",
		Long: `Run the HTTP API, the remote-worker lease protocol, /healthz and /metrics,
and this process's share of maintenance (rescuing expired leases, scheduling
retries, pruning). Any number of serve processes may share one PostgreSQL.

Every flag has an environment variable (shown in its help); a flag wins over
the environment. See docs/configuration.md.`,
		Args: cobra.NoArgs,
	}
	addServeFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := loadServeConfig(cmd.Flags(), os.LookupEnv)
		if err != nil {
			return asUsage(err)
		}
		return runServe(cmd.Context(), cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
	return cmd
}

// longPollGrace is how long, at shutdown, requests get before their
// contexts are canceled: ordinary requests finish well within it, while
// long polls (POST /v1/leases with waitSeconds) are cut short instead of
// holding the shutdown for up to 30 s.
const longPollGrace = time.Second

// gcPercentDefault is docket serve's GOGC unless the environment sets
// GOGC or GOMEMLIMIT, or the setting is given: Go's default of 100 had the
// server collect about twice a second under the crowd benchmark (a live
// heap of ~20 MB, ~40 KB allocated per judgment), its mark workers taking
// CPU the database could use. 400 lets the heap grow to about five times
// the live data (~100 MB there) between collections (docs/benchmarks.md,
// "Sixth round: the server's CPU at moderate load").
const gcPercentDefault = 400

// gcPercent is the GOGC serve sets, if any: the setting when it was given
// (flag or DOCKET_GC_PERCENT); its default only when the environment
// leaves Go's collector alone (neither GOGC nor GOMEMLIMIT, which Go
// itself reads, is set).
func (c *serveConfig) gcPercent(lookupEnv func(string) (string, bool)) (int, bool) {
	if _, given := c.from["DOCKET_GC_PERCENT"]; given {
		return c.GCPercent, true
	}
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		if v, ok := lookupEnv(env); ok && v != "" {
			return 0, false
		}
	}
	return c.GCPercent, true
}

// runServe runs until ctx is canceled (SIGINT/SIGTERM), then shuts down:
// the listener closes, requests in flight finish, maintenance stops and
// leadership is given up.
func runServe(ctx context.Context, cfg *serveConfig, stdout, stderr io.Writer) error {
	logger := cfg.logger(stderr)
	if pct, ok := cfg.gcPercent(os.LookupEnv); ok {
		debug.SetGCPercent(pct)
	}
	metrics := api.NewMetrics()
	client, err := docket.NewClient(ctx, cfg.clientConfig(logger, metrics.JobFinished))
	if err != nil {
		return err
	}
	defer client.Close()
	if err := bootstrapKeys(ctx, client, cfg.AdminKey, stdout, stderr, logger); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	defer ln.Close()

	// Events wait in the outbox while the bus is down: an external server
	// that is not up yet does not stop serve; /healthz reports it.
	bus, closeBus, err := cfg.openBus(ctx, logger)
	if err != nil {
		return fmt.Errorf("event bus: %w", err)
	}
	defer closeBus() // after the worker (and its relay) stopped
	relay := client.NewEventRelay(bus, docket.EventRelayConfig{Retention: cfg.EventRetention})

	// No handlers run in serve yet: the worker takes its turn as leader for
	// maintenance, which is what rescues remote workers' expired leases,
	// and for the relay of the outbox to the bus (a leadership of its own).
	wcfg := cfg.workerConfig()
	wcfg.EventRelay = relay
	worker := docket.NewWorker(client, wcfg)
	if err := worker.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start maintenance: %w", err)
	}
	// Webhooks have a leadership of their own, under the worker's node id.
	hooks, err := client.NewWebhooks(cfg.webhookConfig(worker.NodeID()))
	if err == nil {
		err = hooks.Start(context.WithoutCancel(ctx))
	}
	if err != nil {
		worker.Stop(context.WithoutCancel(ctx))
		return fmt.Errorf("start webhooks: %w", err)
	}
	stopWorker := func() {
		hooks.Stop()
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		worker.Stop(wctx)
	}

	baseCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	apiHandler := api.New(api.Config{
		Client: client, MaxBodyBytes: cfg.MaxBodyBytes, RateLimit: cfg.RateLimit.perSecond(), MaxStreamsPerKey: cfg.MaxStreamsPerKey,
		RateBurst: rateBurst(cfg), Logger: logger, Metrics: metrics, DeadLetters: client,
		AuthFailureLimit: authFailureLimit(cfg.AuthFailureLimit), AuthFailureBurst: int(math.Ceil(cfg.AuthFailureLimit.N)),
		Webhooks:  hooks,
		BusHealth: func() error { return errors.Join(bus.Health(), relay.Health()) },
	})
	dashboard, err := web.New(web.Config{Client: client, Logger: logger, SignIn: apiHandler.SignInKey,
		BusHealth: func() error { return errors.Join(bus.Health(), relay.Health()) }, Webhooks: hooks})
	if err != nil {
		stopWorker()
		return fmt.Errorf("web dashboard: %w", err)
	}
	hs := &http.Server{
		Handler:           limitBodyRead(mountWeb(apiHandler, dashboard, metrics), cfg.BodyReadTimeout),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	if cfg.AddrFile != "" {
		if err := writeAddrFile(cfg.AddrFile, ln.Addr().String()); err != nil {
			stopWorker()
			return err
		}
		defer os.Remove(cfg.AddrFile)
	}
	fmt.Fprintf(stderr, "docket listening on http://%s (backend %s)\n", ln.Addr(), client.Backend())
	logger.Info("serving", "address", ln.Addr().String(), "backend", client.Backend(), "node_id", worker.NodeID(),
		"rate_limit", cfg.RateLimit.perSecond(), "max_body_bytes", cfg.MaxBodyBytes)

	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		stopWorker()
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}

	logger.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	cut := time.AfterFunc(longPollGrace, cancelRequests)
	err = hs.Shutdown(sctx)
	cut.Stop()
	if err != nil {
		logger.Warn("requests still running at the shutdown timeout were cut", "error", err)
		_ = hs.Close()
	}
	<-served // http.ErrServerClosed
	stopWorker()
	logger.Info("stopped")
	return nil
}

// rateBurst: DOCKET_RATE_BURST, or N of "N/s" / "N/m" so a key may spend a
// whole period's allowance at once.
func rateBurst(cfg *serveConfig) int {
	if cfg.RateBurst > 0 || cfg.RateLimit.N == 0 {
		return cfg.RateBurst
	}
	return max(1, int(math.Ceil(cfg.RateLimit.N)))
}

// bootstrapKeyName names the admin key made from DOCKET_ADMIN_KEY or
// generated on first start.
const bootstrapKeyName = "bootstrap"

// bootstrapKeys makes sure an administrator can get in: DOCKET_ADMIN_KEY is
// imported as an admin key (once: an existing one is left as is); without
// it, when no key exists at all, an admin key is generated and its secret
// printed once, alone on the last line of stdout. Two processes starting at
// once on an empty database may both generate one: each prints its own and
// both work (revoke the spare with docket keys revoke).
//
// Changing DOCKET_ADMIN_KEY does not revoke the key of its previous value
// (nor the key generated on first start): while DOCKET_ADMIN_KEY is set,
// every start warns about the other valid keys named "bootstrap", by id.
func bootstrapKeys(ctx context.Context, client *docket.Client, adminKey string, stdout, stderr io.Writer, logger *slog.Logger) error {
	if adminKey != "" {
		k, err := client.ImportAPIKey(ctx, bootstrapKeyName, docket.RoleAdmin, adminKey)
		switch {
		case errors.Is(err, docket.ErrDuplicate):
			k, err = client.AuthenticateAPIKey(ctx, adminKey)
			switch {
			case errors.Is(err, docket.ErrNotFound):
				logger.Warn("DOCKET_ADMIN_KEY was revoked: it does not authenticate; set another or unset it")
			case err != nil:
				return fmt.Errorf("look up DOCKET_ADMIN_KEY: %w", err)
			}
		case err != nil:
			return fmt.Errorf("import DOCKET_ADMIN_KEY: %w", err)
		default:
			logger.Info("imported DOCKET_ADMIN_KEY as admin key", "key_id", k.ID.String(), "name", k.Name)
		}
		return warnOtherBootstrapKeys(ctx, client, k, logger)
	}
	keys, err := client.APIKeys(ctx)
	if err != nil {
		return fmt.Errorf("list API keys: %w", err)
	}
	if len(keys) > 0 {
		return nil
	}
	secret, k, err := client.CreateAPIKey(ctx, bootstrapKeyName, docket.RoleAdmin)
	if err != nil {
		return fmt.Errorf("create bootstrap admin key: %w", err)
	}
	fmt.Fprintf(stderr, "docket: no API key existed, so admin key %s (%q) was created; its secret is the last line of stdout and is not shown again\n", k.ID, k.Name)
	fmt.Fprintln(stdout, secret)
	return nil
}

// warnOtherBootstrapKeys warns about the valid keys named "bootstrap" other
// than current (the key of DOCKET_ADMIN_KEY; nil when it was revoked): keys
// of a previous DOCKET_ADMIN_KEY, or generated on first start, which still
// authenticate. It revokes nothing: the operator decides.
func warnOtherBootstrapKeys(ctx context.Context, client *docket.Client, current *docket.APIKey, logger *slog.Logger) error {
	keys, err := client.APIKeys(ctx)
	if err != nil {
		return fmt.Errorf("list API keys: %w", err)
	}
	var others []string
	for _, k := range keys {
		if k.Name == bootstrapKeyName && k.RevokedAt.IsZero() && (current == nil || k.ID != current.ID) {
			others = append(others, k.ID.String())
		}
	}
	if len(others) > 0 {
		logger.Warn("other bootstrap admin keys are still valid (a previous DOCKET_ADMIN_KEY, or the key generated on first start): "+
			"revoke each one no longer needed with docket keys revoke KEY-ID", "key_ids", others)
	}
	return nil
}

// writeAddrFile writes addr and a newline to path through a temporary file
// renamed into place, so a reader never sees a part of it.
func writeAddrFile(path, addr string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o644); err != nil {
		return fmt.Errorf("write the address file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write the address file: %w", err)
	}
	return nil
}

// mountWeb serves the API under /v1 (and its /healthz and /metrics) and
// the dashboard at every other path. The API counts its requests in
// flight in metrics; the dashboard's are counted here, so that
// docket_http_requests_in_flight is every request the process serves
// (its live streams included).
func mountWeb(apiHandler, dashboard http.Handler, metrics *api.Metrics) http.Handler {
	dashboard = metrics.CountInFlight(dashboard)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p == "/v1" || strings.HasPrefix(p, "/v1/") || p == "/healthz" || p == "/metrics" {
			apiHandler.ServeHTTP(w, r)
			return
		}
		dashboard.ServeHTTP(w, r)
	})
}
