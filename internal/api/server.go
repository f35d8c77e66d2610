// Package api serves docket over HTTP: the jobs API, the remote-worker
// lease protocol, workflow definitions, health and metrics. Requests and
// responses are typed structs; decoding, validation and error mapping
// happen in one helper (endpoint); every error is application/problem+json
// (problem.go).
package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/remote"
)

// Defaults of Config.
const (
	MaxBodyBytesDefault = 1 << 20
	// MaxStreamsPerKeyDefault is Config.MaxStreamsPerKey's default.
	MaxStreamsPerKeyDefault = 100
	authCacheTTL            = 10 * time.Second
)

// Authenticator checks API key secrets (docket.Client implements it).
type Authenticator interface {
	AuthenticateAPIKey(ctx context.Context, secret string) (*docket.APIKey, error)
}

// Config configures a Server.
type Config struct {
	Client *docket.Client
	// Auth checks bearer keys; default Client.
	Auth Authenticator
	// MaxBodyBytes limits request bodies; default 1 MiB. It also bounds a
	// line of a JSON-lines runs batch.
	MaxBodyBytes int64
	// MaxBatchBytes limits the body of POST
	// /v1/workflows/{name}/runs:batch; default 256 MiB.
	MaxBatchBytes int64
	// RateLimit per API key in requests per second; 0 disables it.
	RateLimit float64
	// RateBurst: requests a key may send at once; default RateLimit
	// rounded up (at least 1).
	RateBurst int
	Logger    *slog.Logger
	// Metrics served at /metrics; default NewMetrics(). Give the same
	// Metrics to docket.Config.OnJobFinished to count attempt ends.
	Metrics *Metrics
	// DeadLetters serves /v1/dead-letters; default none (503).
	DeadLetters DeadLetters
	// BusHealth reports the event bus in /healthz: nil while it works.
	// Default none (no bus field).
	BusHealth func() error
	// EventHeartbeat: SSE streams send a comment this often so proxies
	// keep them open; EventPoll: how often they look for new events when
	// no wakeup came. Defaults 15 s and 1 s.
	EventHeartbeat time.Duration
	EventPoll      time.Duration
	// EventWriteTimeout: how long a write to an SSE stream may wait for a
	// client that does not read before the stream is ended. Default 30 s.
	EventWriteTimeout time.Duration
	// MaxStreamsPerKey: how many event streams (SSE) one API key may hold
	// open at once on this server; one more is 429. Default
	// MaxStreamsPerKeyDefault.
	MaxStreamsPerKey int
	// Webhooks serves /v1/webhooks; default none (503).
	Webhooks *docket.Webhooks
	// AuthFailureLimit: failed authentications (unknown or revoked bearer
	// tokens) one client address may make per second; past it, its
	// requests whose key is not cached are 429 with Retry-After, before
	// any read of keys (authfail.go). Default AuthFailureLimitDefault (30
	// a minute); negative disables it. AuthFailureBurst: failures an
	// address may make at once; default a minute's worth of the limit.
	AuthFailureLimit float64
	AuthFailureBurst int
}

// Server is the HTTP API.
type Server struct {
	cfg     Config
	client  *docket.Client
	mux     *http.ServeMux
	paths   *http.ServeMux // every route's path, any method: tells 404 from 405
	routes  []route
	limiter *limiter
	metrics *Metrics

	authMu    sync.Mutex
	authCache map[string]authEntry
	keyReads  keyReads      // the reads of keys missing from authCache (keys.go)
	workers   workerCache   // contributors' states for workerID (workers.go)
	taskViews taskViewCache // the task of a take's answer, encoded (assignments.go)
	streams   streamCounts  // the event streams open, by key (events.go)
	unknown   unknownKeys   // tokens of no valid key, remembered briefly (authfail.go)
	failures  *authFailures // failed authentications by client address; nil when off
}

type authEntry struct {
	key     *docket.APIKey
	expires time.Time
}

// permission is what a route needs; roles grant permissions.
type permission int

const (
	permPublic permission = iota // no key needed (health, metrics, openapi)
	permRead                     // read jobs, queues, workflows and runs
	permSubmit                   // submit, cancel, retry jobs; put workflows; start and operate runs
	permLease                    // the remote-worker protocol
	permAdmin                    // everything else: tasks, pools, contributors
	permWork                     // a contributor's own work (contributor keys only)
)

var grants = map[docket.Role][]permission{
	docket.RoleAdmin:    {permRead, permSubmit, permLease, permAdmin},
	docket.RoleProducer: {permRead, permSubmit},
	docket.RoleWorker:   {permLease},
	docket.RoleViewer:   {permRead},
	// A contributor key reaches only the contributor endpoints, and the
	// handlers there act for its contributor only.
	docket.RoleContributor: {permWork},
}

// route is one endpoint. The table of routes is the single source of what
// the server serves; the OpenAPI document is checked against it.
type route struct {
	Method string
	Path   string // Go 1.22 pattern path, e.g. /v1/jobs/{jobId}
	Perm   permission
	// Query names the query parameters the route takes. A request with
	// any other is refused (checkParams, params.go), as is one giving a
	// parameter twice unless Lists names it too: before Handler runs when
	// Query is empty, else by Handler, which reads its query with query
	// and names these errors with its values' in one 400.
	Query []string
	// Lists names those of Query that may be given more than once (a
	// filter's values, an include list).
	Lists   []string
	Handler http.Handler
}

// New builds a server.
func New(cfg Config) *Server {
	if cfg.Auth == nil {
		cfg.Auth = cfg.Client
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = MaxBodyBytesDefault
	}
	if cfg.MaxStreamsPerKey <= 0 {
		cfg.MaxStreamsPerKey = MaxStreamsPerKeyDefault
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = MaxBatchBytesDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Client != nil {
		cfg.Metrics.countFrom(cfg.Client)
	}
	s := &Server{cfg: cfg, client: cfg.Client, metrics: cfg.Metrics, mux: http.NewServeMux(), paths: http.NewServeMux(), authCache: map[string]authEntry{}}
	if cfg.RateLimit > 0 {
		s.limiter = newLimiter(cfg.RateLimit, cfg.RateBurst)
	}
	if cfg.AuthFailureLimit == 0 {
		cfg.AuthFailureLimit = AuthFailureLimitDefault
	}
	if cfg.AuthFailureLimit > 0 {
		s.failures = newAuthFailures(cfg.AuthFailureLimit, cfg.AuthFailureBurst)
	}
	s.routes = append(s.routes, s.healthRoutes()...)
	s.routes = append(s.routes, s.metricsRoutes()...)
	s.routes = append(s.routes, s.jobRoutes()...)
	s.routes = append(s.routes, s.queueRoutes()...)
	s.routes = append(s.routes, s.leaseRoutes()...)
	s.routes = append(s.routes, s.eventRoutes()...)
	s.routes = append(s.routes, s.deadLetterRoutes()...)
	s.routes = append(s.routes, s.webhookRoutes()...)
	s.routes = append(s.routes, s.workflowRoutes()...)
	s.routes = append(s.routes, s.runRoutes()...)
	s.routes = append(s.routes, s.taskRoutes()...)
	s.routes = append(s.routes, s.contributorRoutes()...)
	s.routes = append(s.routes, s.poolRoutes()...)
	s.routes = append(s.routes, s.qualityRoutes()...)
	s.routes = append(s.routes, s.assignmentRoutes()...)
	s.routes = append(s.routes, s.openapiRoutes()...)
	for _, rt := range s.routes {
		h := checkParams(rt, rt.Handler)
		if rt.Perm != permPublic {
			h = s.authorize(rt.Perm, h)
		}
		s.mux.Handle(rt.Method+" "+rt.Path, h)
		if _, p := s.paths.Handler(&http.Request{Method: "GET", URL: &url.URL{Path: rt.Path}}); p != rt.Path {
			s.paths.Handle(rt.Path, http.NotFoundHandler())
		}
	}
	// What no route matches: a path that exists with other methods is
	// 405, not 404.
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, p := s.paths.Handler(r); p != "" {
			w.Header().Set("Allow", s.allowed(p))
			writeProblem(w, problem(http.StatusMethodNotAllowed, "method", "Method not allowed", r.Method+" is not allowed on "+r.URL.Path))
			return
		}
		writeProblem(w, notFound("no route for "+r.Method+" "+r.URL.Path))
	})
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.metrics.requestStarted()
	defer s.metrics.requestDone()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.cfg.Logger.Error("handler panicked", "method", r.Method, "path", remote.RedactLeasePath(r.URL.Path), "panic", v)
			writeProblem(w, problemFor(nil))
		}
	}()
	s.mux.ServeHTTP(w, r)
}

// allowed is the Allow header of a 405: the methods of the routes of
// path, a pattern path, sorted (GET routes also answer HEAD).
func (s *Server) allowed(path string) string {
	var ms []string
	for _, rt := range s.routes {
		if rt.Path == path {
			ms = append(ms, rt.Method)
			if rt.Method == "GET" {
				ms = append(ms, "HEAD")
			}
		}
	}
	slices.Sort(ms)
	return strings.Join(slices.Compact(ms), ", ")
}

type principalKey struct{}

// principal is the API key of the request (nil on public routes).
func principal(ctx context.Context) *docket.APIKey {
	k, _ := ctx.Value(principalKey{}).(*docket.APIKey)
	return k
}

func (s *Server) authorize(perm permission, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret, ok := bearer(r)
		if !ok {
			writeProblem(w, unauthorized("send Authorization: Bearer <API key>"))
			return
		}
		key, err := s.authenticate(r.Context(), secret, clientAddr(r))
		if err != nil {
			var limited *Problem
			if errors.As(err, &limited) && limited.Status == http.StatusTooManyRequests {
				writeProblem(w, limited)
				return
			}
			if problemFor(err).Status >= 500 {
				s.fail(w, r, err)
				return
			}
			writeProblem(w, unauthorized("the API key is not valid"))
			return
		}
		allowed := false
		for _, p := range grants[key.Role] {
			allowed = allowed || p == perm
		}
		if !allowed {
			writeProblem(w, forbidden("role "+string(key.Role)+" may not call "+r.Method+" "+r.URL.Path))
			return
		}
		if s.limiter != nil {
			if wait := s.limiter.allow(key.ID.String()); wait > 0 {
				writeProblem(w, tooMany(wait))
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, key)))
	})
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) <= len(prefix) || !equalFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return h[len(prefix):], true
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		ca, cb := a[i]|0x20, b[i]|0x20
		if ca != cb {
			return false
		}
	}
	return true
}

// authenticate checks a secret, caching answers briefly so a busy client
// does not cost a query per request; a revoked key stops working within
// authCacheTTL (an answer is kept for authCacheTTL from the start of the
// read that gave it). Keys missing from the cache at the same time are
// read together (keys.go) when the Authenticator can (docket.Client can),
// but for a secret longer than any generated one: it is read by its own
// request, which hashes it, so that nobody's oversized bearer token costs
// the requests sharing its read the time to hash it.
//
// A secret of no valid key is remembered (by its SHA-256) for
// unknownKeyTTL and refused from memory meanwhile. A secret read and
// found to be no valid key counts as a failure of the client's address
// (addr); one refused from memory does not (it cost no read: a stale
// client retrying one revoked key must not put its address, and every
// other client behind the same NAT or proxy, over the limit); an address past the failure
// limit has its secrets that are not cached refused with a 429 problem
// before anything is read (authfail.go).
func (s *Server) authenticate(ctx context.Context, secret string, addr netip.Addr) (*docket.APIKey, error) {
	now := time.Now()
	if key, ok := s.cachedKey(secret, now); ok {
		return key, nil
	}
	if s.failures != nil {
		if wait := s.failures.wait(addr, now); wait > 0 {
			p := tooMany(wait)
			p.Detail = fmt.Sprintf("too many requests with API keys that are not valid from this address; retry after %d s", wait)
			return nil, p
		}
	}
	key, read, err := s.keyOf(ctx, secret, now)
	if read && errors.Is(err, docket.ErrNotFound) {
		s.failed(addr, now)
	}
	return key, err
}

// SignInKey checks the API key a person signs in to the dashboard with
// (web.Config.SignIn), exactly as a bearer token of a request from the
// same client: cached keys, the memory of unknown tokens and the
// address's limit on failed authentications all apply, so the sign-in
// form is no way around them. Over the limit the error is a 429 *Problem
// whose RetryAfterSeconds is the wait, returned before any read of keys.
func (s *Server) SignInKey(r *http.Request, secret string) (*docket.APIKey, error) {
	return s.authenticate(r.Context(), secret, clientAddr(r))
}

// recheckKey is authenticate for a key this server accepted on the
// request in hand (an open event stream looking whether its key was
// revoked meanwhile): not a guess, so the address's limit on failed
// authentications neither holds it back nor counts it. Held back, a
// revoked key's stream would outlive the key while its address is over
// the limit; counted, a stream another client's bad keys put over it
// would end.
func (s *Server) recheckKey(ctx context.Context, secret string) (*docket.APIKey, error) {
	now := time.Now()
	if key, ok := s.cachedKey(secret, now); ok {
		return key, nil
	}
	key, _, err := s.keyOf(ctx, secret, now)
	return key, err
}

// cachedKey is the key of secret if the cache holds it unexpired.
func (s *Server) cachedKey(secret string, now time.Time) (*docket.APIKey, bool) {
	s.authMu.Lock()
	e, ok := s.authCache[secret]
	s.authMu.Unlock()
	if ok && now.Before(e.expires) {
		return e.key, true
	}
	return nil, false
}

// keyOf reads the key of secret, unless it was found unknown within the
// last few seconds, and remembers it if it is unknown. read is whether
// keys were read (false: refused from memory).
func (s *Server) keyOf(ctx context.Context, secret string, now time.Time) (key *docket.APIKey, read bool, err error) {
	hash := sha256.Sum256([]byte(secret))
	if s.unknown.has(hash, now) {
		return nil, false, docket.ErrNotFound
	}
	key, err = s.readKeyOf(ctx, secret, now)
	if errors.Is(err, docket.ErrNotFound) {
		s.unknown.add(hash, now)
	}
	return key, true, err
}

// failed counts a failed authentication of addr.
func (s *Server) failed(addr netip.Addr, now time.Time) {
	if s.failures != nil {
		s.failures.fail(addr, now)
	}
}

// readKeyOf reads the key of secret (not cached) and caches it.
func (s *Server) readKeyOf(ctx context.Context, secret string, now time.Time) (*docket.APIKey, error) {
	if many, ok := s.cfg.Auth.(manyAuthenticator); ok && len(secret) <= keyReadMaxSecret {
		return s.readKey(ctx, many, secret)
	}
	key, err := s.cfg.Auth.AuthenticateAPIKey(ctx, secret)
	if err != nil {
		return nil, err
	}
	s.rememberKeys(map[string]*docket.APIKey{secret: key}, now)
	return key, nil
}

// rememberKeys caches keys as read by a read begun at start.
func (s *Server) rememberKeys(keys map[string]*docket.APIKey, start time.Time) {
	s.authMu.Lock()
	defer s.authMu.Unlock()
	if len(s.authCache)+len(keys) > 10000 {
		clear(s.authCache)
	}
	for secret, key := range keys {
		s.authCache[secret] = authEntry{key: key, expires: start.Add(authCacheTTL)}
	}
}
