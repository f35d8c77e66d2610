package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// Cookie names.
const (
	sessionCookie = "docket_session"
	// signinCookie carries the CSRF token of the sign-in form, before
	// there is a session (double-submit: form field and cookie must match).
	signinCookie = "docket_signin"
)

// session is one signed-in browser. Sessions live in the server's memory:
// the cookie holds only a random id and its HMAC, so a session ends at
// sign-out, at expiry, when its API key is revoked, or when the process
// restarts.
type session struct {
	id      string
	key     *docket.APIKey
	secret  string // the API key, to re-check it every recheckKeyEvery
	csrf    string
	expires time.Time
	checked time.Time // last successful re-authentication
	made    uint64    // the order sessions were made in (sessions.made)

	// takeMu makes the session's takes of units one at a time, and taken
	// is the last assignment a take of this session got in each pool
	// (takeNext): a second "Start working" (a double click, a form sent
	// twice) finds the first one's assignment still ACTIVE and opens it
	// instead of taking another unit.
	takeMu sync.Mutex
	taken  map[uuid.UUID]uuid.UUID // pool → assignment

	// tested is what the test questions this session submitted scored,
	// by assignment, the newest testsKept (testOrder oldest first), for
	// the page after each (feedback.go).
	testMu    sync.Mutex
	tested    map[uuid.UUID]*testView
	testOrder []uuid.UUID

	// live counts the session's open live streams, at most
	// liveStreamsPerSession (liveSlot).
	liveMu sync.Mutex
	live   int
}

type sessions struct {
	secret []byte
	ttl    time.Duration
	now    func() time.Time

	mu   sync.Mutex
	byID map[string]*session
	made uint64 // sessions made so far
}

// sessionsPerKeyMax is how many live sessions one API key may have: a
// sign-in beyond them ends the key's oldest, so signing in again and again
// cannot grow the server's memory without bound.
const sessionsPerKeyMax = 100

func newSessions(secret []byte, ttl time.Duration, now func() time.Time) (*sessions, error) {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, fmt.Errorf("make session secret: %w", err)
		}
	}
	if len(secret) < 16 {
		return nil, errors.New("web: session secret must be at least 16 bytes")
	}
	return &sessions{secret: secret, ttl: ttl, now: now, byID: map[string]*session{}}, nil
}

func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (s *sessions) sign(id string) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// cookieValue is id.hmac(id).
func (s *sessions) cookieValue(id string) string { return id + "." + s.sign(id) }

// create starts a session for a key signed in with secret.
func (s *sessions) create(key *docket.APIKey, secret string) *session {
	now := s.now()
	ss := &session{id: randomToken(), key: key, secret: secret, csrf: randomToken(), expires: now.Add(s.ttl), checked: now}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Drop expired sessions while here, and count the key's live ones.
	var oldest *session
	live := 0
	for id, o := range s.byID {
		switch {
		case !now.Before(o.expires):
			delete(s.byID, id)
		case o.key.ID == key.ID:
			live++
			if oldest == nil || o.made < oldest.made {
				oldest = o
			}
		}
	}
	if live >= sessionsPerKeyMax {
		delete(s.byID, oldest.id)
	}
	s.made++
	ss.made = s.made
	s.byID[ss.id] = ss
	return ss
}

// lookup returns the live session a cookie value names, or nil.
func (s *sessions) lookup(value string) *session {
	id, mac, ok := strings.Cut(value, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(s.sign(id))) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.byID[id]
	if ss == nil {
		return nil
	}
	if !s.now().Before(ss.expires) {
		delete(s.byID, id)
		return nil
	}
	return ss
}

func (s *sessions) delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
}

// stillValid re-authenticates the session's key at most every
// recheckKeyEvery; a revoked key ends the session. A re-check that could
// not be made — the request canceled (its browser gone), the database
// failing the read — ends nothing: the next request checks again.
func (h *Handler) stillValid(ctx context.Context, ss *session) bool {
	now := h.cfg.Now()
	h.sessions.mu.Lock()
	due := now.Sub(ss.checked) >= recheckKeyEvery
	h.sessions.mu.Unlock()
	if !due {
		return true
	}
	key, err := h.cfg.Auth.AuthenticateAPIKey(ctx, ss.secret)
	if err != nil && !errors.Is(err, docket.ErrNotFound) {
		if ctx.Err() == nil {
			h.cfg.Logger.Warn("web: re-checking a session's key failed; checking again on its next request", "error", err)
		}
		return true
	}
	if err != nil || key.ID != ss.key.ID {
		h.sessions.delete(ss.id)
		return false
	}
	h.sessions.mu.Lock()
	ss.checked = now
	h.sessions.mu.Unlock()
	return true
}

// setCookie sets one of our cookies: HttpOnly, SameSite=Strict, and
// Secure when the browser reached us over TLS (behindTLS) or Config.Secure
// says so.
func (h *Handler) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: h.cfg.Secure || behindTLS(r), SameSite: http.SameSiteStrictMode,
	})
}

// behindTLS reports whether the browser sent r over TLS: to this server,
// or to a proxy in front of it that says so (X-Forwarded-Proto: https, as
// nginx, Caddy and the cloud load balancers send it). A client that sends
// the header over plain HTTP only keeps its own cookies from being sent
// back, so the header needs no trust.
func behindTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}

// csrfOK reports whether the form's csrf field is want (constant time).
func csrfOK(r *http.Request, want string) bool {
	got := r.PostFormValue("csrf")
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

type ctxKey struct{}

func sessionOf(ctx context.Context) *session {
	ss, _ := ctx.Value(ctxKey{}).(*session)
	return ss
}
