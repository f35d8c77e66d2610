package webhook

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"

	"github.com/docket-run/docket/internal/leader"
)

// Defaults of Config.
const (
	PollIntervalDefault    = time.Second
	TimeoutDefault         = 10 * time.Second
	BackoffBaseDefault     = 5 * time.Second
	BackoffMaxDefault      = time.Hour
	MaxAttemptsDefault     = 15
	BreakerFailuresDefault = 5
	BreakerOpenDefault     = 30 * time.Second
	RetentionDefault       = 7 * 24 * time.Hour
	ConcurrencyDefault     = 16
	LeaderTTLDefault       = 15 * time.Second
	// PerWebhookBatch is how many deliveries of one subscription one claim
	// takes; they are sent one after another, in event order.
	PerWebhookBatch = 10
	// fanOutBatch is how many outbox rows one fan-out transaction handles.
	fanOutBatch = 500
	// noSubscriberGrace is how long the dispatcher, with no subscription,
	// leaves a new outbox row to the event relay (FanOut). Longer than the
	// relay lags on a loaded machine: at one minute, a full-size crowd
	// benchmark on a saturated one still had a part of its rows marked by
	// both (7.4 WAL records of marks per judgment instead of 5.3).
	noSubscriberGrace = 5 * time.Minute
)

// Config configures a Service. Zero fields take the documented defaults.
type Config struct {
	// Store is the database; required.
	Store Store
	// NodeID is this process's name in the webhooks leadership row, unique
	// among the processes running webhooks; required (docket serve gives
	// its worker's).
	NodeID string
	// LeaderTTL is the leadership term; default 15 s.
	LeaderTTL time.Duration
	// PollInterval: how often the leader looks for new outbox rows and due
	// deliveries; default 1 s.
	PollInterval time.Duration
	// Timeout of one delivery request (connect to last response byte);
	// default 10 s.
	Timeout time.Duration
	// BackoffBase and BackoffMax: after a failed attempt n the next is due
	// after a delay uniform in [c/2, c], c = min(base × 2^(n-1), max).
	// Defaults 5 s and 1 h.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// MaxAttempts: a delivery that failed this many times is DEAD; default
	// 15.
	MaxAttempts int
	// BreakerFailures consecutive failures to one endpoint (URL) open its
	// circuit breaker: no request is sent to it for BreakerOpen (a delivery
	// due meanwhile counts the attempt as failed, unsent, so it keeps to
	// the retry schedule), then one is tried; if it succeeds the breaker
	// closes and the deliveries that waited since before are sent at once,
	// in event order (deliverer.hasten). Defaults 5 and 30 s.
	BreakerFailures int
	BreakerOpen     time.Duration
	// AllowHosts are the targets allowed besides loopback: host names,
	// "*.domain" wildcards, IP addresses and CIDRs. Default none.
	AllowHosts []string
	// AllowAny lifts the target limit; default false.
	AllowAny bool
	// Retention: DELIVERED and DEAD deliveries are deleted this long after
	// they finished; default 7 days.
	Retention time.Duration
	// Concurrency: how many endpoints are delivered to at once; default 16.
	Concurrency int
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock of every stored timestamp; default time.Now. (The
	// circuit breakers keep real time.)
	Now func() time.Time
	// Resolver looks up host names, when subscribing and when dialing;
	// default net.DefaultResolver. Tests replace it.
	Resolver Resolver
	// OnBreakerChange, when set, is told of every breaker state change
	// ("closed", "open", "half-open") of an endpoint (its URL as shown:
	// password, lone user name, query values and fragment as "xxxxx").
	// Default none.
	OnBreakerChange func(endpoint, from, to string)
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	set := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	set(&c.LeaderTTL, LeaderTTLDefault)
	set(&c.PollInterval, PollIntervalDefault)
	set(&c.Timeout, TimeoutDefault)
	set(&c.BackoffBase, BackoffBaseDefault)
	set(&c.BackoffMax, max(BackoffMaxDefault, c.BackoffBase))
	set(&c.BreakerOpen, BreakerOpenDefault)
	set(&c.Retention, RetentionDefault)
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = MaxAttemptsDefault
	}
	if c.BreakerFailures <= 0 {
		c.BreakerFailures = BreakerFailuresDefault
	}
	if c.Concurrency <= 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	return c
}

// Validate reports what is missing or inconsistent (after WithDefaults).
func (c Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("webhook config: Store is required"))
	}
	if c.NodeID == "" {
		errs = append(errs, errors.New("webhook config: NodeID is required"))
	}
	if c.LeaderTTL < leader.TTLMin {
		errs = append(errs, fmt.Errorf("webhook config: LeaderTTL %v is below the minimum %v", c.LeaderTTL, leader.TTLMin))
	}
	if int64(c.BreakerFailures) > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("webhook config: BreakerFailures %d is over %d", c.BreakerFailures, uint32(math.MaxUint32)))
	}
	if c.BackoffMax < c.BackoffBase {
		errs = append(errs, fmt.Errorf("webhook config: BackoffMax %v is below BackoffBase %v", c.BackoffMax, c.BackoffBase))
	}
	if _, err := newGuard(c.AllowHosts, c.AllowAny, c.Resolver); err != nil {
		errs = append(errs, fmt.Errorf("webhook config: %w", err))
	}
	return errors.Join(errs...)
}
