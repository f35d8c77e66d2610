package web

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// pageNames are the pages, one template file each, rendered inside
// layout.html. Partials are templates a page file defines besides
// "content" (the overview's "panel").
var pageNames = []string{"signin", "error", "overview", "jobs", "job", "runs", "run", "workflows", "workflow", "pools", "pool", "work", "assignment", "dead", "queues", "unit", "bulk", "contributor"}

// page is one parsed page with the layout.
type page struct{ t *template.Template }

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"since": func(a, b time.Time) string {
		if a.IsZero() || b.IsZero() {
			return "—"
		}
		return b.Sub(a).Round(time.Millisecond).String()
	},
	"pretty": func(raw json.RawMessage) string {
		if len(raw) == 0 {
			return ""
		}
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "  "); err != nil {
			return string(raw)
		}
		return b.String()
	},
	"lower": func(s docket.JobState) string { return string(bytes.ToLower([]byte(s))) },
	// lc lowers a state of any kind, for a CSS class.
	"lc":          func(s any) string { return strings.ToLower(fmt.Sprint(s)) },
	"isNil":       func(id uuid.UUID) bool { return id == uuid.Nil },
	"eventRef":    eventRef,
	"deliveryRef": deliveryRef,
	// left is the time from now to t as m:ss (0:00 when past), what the
	// work page's countdown shows before its script runs.
	"left": func(now, t time.Time) string {
		s := max(int(t.Sub(now).Seconds()), 0)
		return fmt.Sprintf("%d:%02d", s/60, s%60)
	},
}

func parsePages() (map[string]*page, error) {
	pages := map[string]*page{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parse page %s: %w", name, err)
		}
		pages[name] = &page{t: t}
	}
	return pages, nil
}

// view is what every page template gets.
type view struct {
	Title string
	// Signed-in user; nil on the sign-in page.
	User *user
	Data any
}

type user struct {
	Name    string
	Role    docket.Role
	CSRF    string
	Operate bool // may open the operator pages
	ActJobs bool // may cancel and retry
	ActRuns bool // may cancel, pause, resume and retry runs
	Admin   bool // may pause, resume and close pools, forgive contributors
	Work    bool // may open the work pages
}

func userOf(ss *session) *user {
	if ss == nil {
		return nil
	}
	r := ss.key.Role
	return &user{Name: ss.key.Name, Role: r, CSRF: ss.csrf,
		Operate: can(r, accessOperate), ActJobs: can(r, accessActJobs), Work: can(r, accessWork),
		ActRuns: can(r, accessActRuns), Admin: can(r, accessAdmin)}
}

// render executes a page (template "layout", or a partial) into a buffer
// first, so a template error is a 500 and never half a page.
func (h *Handler) render(w http.ResponseWriter, status int, name, tmpl string, v *view) {
	var b bytes.Buffer
	if err := h.pages[name].t.ExecuteTemplate(&b, tmpl, v); err != nil {
		h.cfg.Logger.Error("render page", "page", name, "template", tmpl, "error", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func (h *Handler) renderPage(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	h.renderPageStatus(w, r, http.StatusOK, name, title, data)
}

func (h *Handler) renderPageStatus(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	h.render(w, status, name, "layout", &view{Title: title, User: userOf(sessionOf(r.Context())), Data: data})
}

func (h *Handler) renderError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.renderErrorAs(w, r, sessionOf(r.Context()), status, msg)
}

func (h *Handler) renderErrorAs(w http.ResponseWriter, _ *http.Request, ss *session, status int, msg string) {
	h.render(w, status, "error", "layout", &view{Title: http.StatusText(status), User: userOf(ss),
		Data: errorData{Status: status, Message: msg}})
}

// unavailableRetryAfter is the Retry-After, in seconds, of a page that
// failed because the database could not be reached.
const unavailableRetryAfter = 5

// renderFailure is the error page of a read or a change that failed with
// err, msg saying what failed ("Listing jobs failed"): 503 with
// Retry-After, logged as a warning, while the database cannot be reached
// (docket.IsUnavailable: the same page works once it is back); 500
// otherwise.
func (h *Handler) renderFailure(w http.ResponseWriter, r *http.Request, msg string, err error) {
	if docket.IsUnavailable(err) {
		h.cfg.Logger.Warn("web: the database is unavailable", "method", r.Method, "path", r.URL.Path, "error", err)
		w.Header().Set("Retry-After", fmt.Sprint(unavailableRetryAfter))
		h.renderError(w, r, http.StatusServiceUnavailable,
			fmt.Sprintf("%s: the database cannot be reached; try again in a few seconds. (%v)", msg, err))
		return
	}
	h.renderError(w, r, http.StatusInternalServerError, msg+": "+err.Error())
}

type errorData struct {
	Status  int
	Message string
	// Next is where the sign-in link leads back to ("" for the home).
	Next string
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// signinData is the sign-in page's.
type signinData struct {
	CSRF  string
	Next  string
	Error string
}

func (h *Handler) signinPage(w http.ResponseWriter, r *http.Request) {
	token := h.signinToken(w, r)
	h.render(w, http.StatusOK, "signin", "layout", &view{Title: "Sign in",
		Data: signinData{CSRF: token, Next: safeNext(r.URL.Query().Get("next"))}})
}

// signinToken is the sign-in form's CSRF token: the one the browser's
// sign-in cookie holds, when it holds one of ours, so that every sign-in
// form open in the browser's tabs stays good; else a new one, set.
func (h *Handler) signinToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(signinCookie); err == nil && isToken(c.Value) {
		return c.Value
	}
	token := randomToken()
	h.setCookie(w, r, signinCookie, token, 3600)
	return token
}

// isToken reports whether s has the form of randomToken's tokens.
func isToken(s string) bool {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	return err == nil && len(b) == 32
}

// signin checks the form's CSRF token against the sign-in cookie, then
// the API key; a valid key of a role with any page starts a session.
func (h *Handler) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	c, err := r.Cookie(signinCookie)
	if err != nil || !csrfOK(r, c.Value) {
		h.renderError(w, r, http.StatusForbidden, "The sign-in form's CSRF token is missing or wrong: reload the sign-in page and try again.")
		return
	}
	next := safeNext(r.PostFormValue("next"))
	fail := func(msg string) {
		token := h.signinToken(w, r)
		h.render(w, http.StatusUnauthorized, "signin", "layout", &view{Title: "Sign in",
			Data: signinData{CSRF: token, Next: next, Error: msg}})
	}
	secret := r.PostFormValue("key")
	if secret == "" {
		fail("Enter an API key.")
		return
	}
	key, err := h.cfg.SignIn(r, secret)
	if docket.IsUnavailable(err) {
		// Not the key's fault: say so, rather than that it is unknown.
		h.cfg.Logger.Warn("web: the database is unavailable", "method", r.Method, "path", r.URL.Path, "error", err)
		w.Header().Set("Retry-After", fmt.Sprint(unavailableRetryAfter))
		h.render(w, http.StatusServiceUnavailable, "signin", "layout", &view{Title: "Sign in",
			Data: signinData{CSRF: h.signinToken(w, r), Next: next, Error: "The database cannot be reached: sign in again in a few seconds."}})
		return
	}
	var limited interface{ RetryAfterSeconds() int }
	if errors.As(err, &limited) && limited.RetryAfterSeconds() > 0 {
		wait := limited.RetryAfterSeconds()
		w.Header().Set("Retry-After", strconv.Itoa(wait))
		token := h.signinToken(w, r)
		h.render(w, http.StatusTooManyRequests, "signin", "layout", &view{Title: "Sign in",
			Data: signinData{CSRF: token, Next: next, Error: fmt.Sprintf(
				"Too many keys that are not valid were tried from your address: wait %d s before trying again.", wait)}})
		return
	}
	if err != nil {
		fail("That key is unknown or revoked.")
		return
	}
	if len(grants[key.Role]) == 0 {
		fail("Keys of role " + string(key.Role) + " cannot sign in to the dashboard.")
		return
	}
	ss := h.sessions.create(key, secret)
	h.setCookie(w, r, sessionCookie, h.sessions.cookieValue(ss.id), int(h.cfg.SessionTTL.Seconds()))
	h.setCookie(w, r, signinCookie, "", -1)
	if next == "" {
		next = home(key.Role)
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *Handler) signout(w http.ResponseWriter, r *http.Request) {
	h.sessions.delete(sessionOf(r.Context()).id)
	h.setCookie(w, r, sessionCookie, "", -1)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}
