// Package web is docket's dashboard: server-rendered HTML pages that
// docket serve mounts at / (the API stays under /v1). Pages are
// html/template, assets are embedded with go:embed, and htmx (vendored in
// static/, see static/VENDOR) refreshes parts of pages; there is no npm
// step to build or run it.
//
// Like internal/api it sees package docket only (TestPublicBoundary).
// Security model (docs/web.md): sign in with an API key, held in a
// server-side session named by an HMAC-signed HttpOnly SameSite=Strict
// cookie; a per-session CSRF token on every form, checked on every POST;
// roles as in the API; a strict Content-Security-Policy on every response.
package web

import (
	"context"
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/docket-run/docket"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Defaults of Config.
const (
	SessionTTLDefault = 12 * time.Hour
	// recheckKeyEvery: a session re-authenticates its API key this often,
	// so a revoked key signs its sessions out within it.
	recheckKeyEvery = 30 * time.Second
	// pageSize is the number of jobs per page of the jobs list.
	pageSize = 50
)

// Authenticator checks API key secrets (docket.Client implements it).
type Authenticator interface {
	AuthenticateAPIKey(ctx context.Context, secret string) (*docket.APIKey, error)
}

// Config configures a Handler.
type Config struct {
	// Client reads and acts on jobs. Required.
	Client *docket.Client
	// Auth checks the API keys people sign in with; default Client.
	Auth Authenticator
	// SignIn checks the API key of a sign-in form posted by r; default
	// Auth, with no limit. docket serve passes the API server's
	// SignInKey, so the form counts against the client address's limit
	// on failed authentications and uses the memory of unknown keys as a
	// bearer token does. An error with a method RetryAfterSeconds() int
	// answering more than 0 means the address is over the limit: the form
	// is answered 429 with Retry-After.
	SignIn func(r *http.Request, secret string) (*docket.APIKey, error)
	// Overview reads the overview's and the queues page's figures with
	// bounded queries; default Client.Overview. One read serves every view
	// for a second (the handler caches it).
	Overview func(ctx context.Context, p *docket.OverviewParams) (*docket.JobOverview, error)
	// Webhooks lists and redelivers webhook deliveries for the dead
	// letters page; nil: the page shows none (docket serve passes its
	// webhook service).
	Webhooks *docket.Webhooks
	// BusHealth reports whether the event bus is up (nil: it is), as for
	// the API's /healthz. Live pages refresh on published events while it
	// is; without BusHealth, or while it reports an error, their streams
	// refresh every 5 s instead (events are not being published).
	BusHealth func() error
	// Secret signs session cookies; default 32 random bytes, so sessions
	// end when the process restarts (they are held in memory anyway).
	Secret []byte
	// SessionTTL is how long a session lasts after sign-in; default 12 h.
	SessionTTL time.Duration
	// Secure marks every cookie Secure; default false, as docket serve
	// listens on plain HTTP on loopback by default. Without it a cookie is
	// Secure when its request came over TLS, to this handler or to a proxy
	// that sends X-Forwarded-Proto: https.
	Secure bool
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Handler serves the dashboard.
type Handler struct {
	cfg      Config
	client   *docket.Client
	mux      *http.ServeMux
	pages    map[string]*page
	sessions *sessions
	static   fs.FS
	ov       overviewCache // the overview's and the queues page's read
}

// New builds the dashboard handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Auth == nil {
		cfg.Auth = cfg.Client
	}
	if cfg.SignIn == nil {
		auth := cfg.Auth
		cfg.SignIn = func(r *http.Request, secret string) (*docket.APIKey, error) {
			return auth.AuthenticateAPIKey(r.Context(), secret)
		}
	}
	if cfg.Overview == nil {
		cfg.Overview = cfg.Client.Overview
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = SessionTTLDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	sess, err := newSessions(cfg.Secret, cfg.SessionTTL, cfg.Now)
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, client: cfg.Client, mux: http.NewServeMux(), pages: pages, sessions: sess, static: static}
	h.routes()
	return h, nil
}

// ServeHTTP implements http.Handler: every response carries the security
// headers, whatever the route.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w.Header())
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.cfg.Logger.Error("web handler panicked", "method", r.Method, "path", r.URL.Path, "panic", v)
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}()
	h.mux.ServeHTTP(w, r)
}

// ContentSecurityPolicy is sent with every response: scripts, styles,
// images and connections from this origin only — no inline script or
// style, no eval, no framing, forms post here only.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func setSecurityHeaders(hd http.Header) {
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
}
