package web

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// RoleContributor is the role of the people who do human work (keys made
// by Client.CreateContributorKey): its sessions see the work pages only.
const RoleContributor = docket.RoleContributor

// access is what a page needs; roles grant it, as in the API.
type access int

const (
	accessOperate access = iota // the operator pages: admin, producer, viewer
	accessActJobs               // cancel and retry jobs: admin, producer
	accessWork                  // the work pages: contributor, admin
	accessActRuns               // cancel, pause, resume, retry runs: admin, producer
	accessAdmin                 // pause, resume, close pools; forgive contributors: admin
)

var grants = map[docket.Role][]access{
	docket.RoleAdmin:    {accessOperate, accessActJobs, accessWork, accessActRuns, accessAdmin},
	docket.RoleProducer: {accessOperate, accessActJobs, accessActRuns},
	docket.RoleViewer:   {accessOperate},
	RoleContributor:     {accessWork},
}

func can(role docket.Role, a access) bool { return slices.Contains(grants[role], a) }

// home is where a role lands after signing in.
func home(role docket.Role) string {
	if can(role, accessOperate) {
		return "/"
	}
	return "/work"
}

func (h *Handler) routes() {
	h.mux.Handle("GET /static/", http.StripPrefix("/static/", h.serveStatic()))
	h.mux.HandleFunc("GET /signin", h.signinPage)
	h.mux.HandleFunc("POST /signin", h.signin)
	h.mux.Handle("POST /signout", h.authed(nil, h.signout))
	h.mux.Handle("GET /{$}", h.authed([]access{accessOperate}, h.overview))
	h.mux.Handle("GET /overview/panel", h.authed([]access{accessOperate}, h.overviewPanel))
	h.mux.Handle("GET /jobs", h.authed([]access{accessOperate}, h.jobsList))
	h.mux.Handle("GET /jobs/{id}", h.authed([]access{accessOperate}, h.jobDetail))
	h.mux.Handle("POST /jobs/{id}/cancel", h.authed([]access{accessOperate, accessActJobs}, h.jobCancel))
	h.mux.Handle("POST /jobs/{id}/retry", h.authed([]access{accessOperate, accessActJobs}, h.jobRetry))
	h.mux.Handle("GET /runs", h.authed([]access{accessOperate}, h.runsList))
	h.mux.Handle("GET /runs/{id}", h.authed([]access{accessOperate}, h.runDetail))
	for verb, do := range map[string]func(*docket.Client, context.Context, uuid.UUID) (*docket.Run, error){
		"cancel": (*docket.Client).RunCancel, "pause": (*docket.Client).RunPause,
		"resume": (*docket.Client).RunResume, "retry": (*docket.Client).RunRetry,
	} {
		h.mux.Handle("POST /runs/{id}/"+verb, h.authed([]access{accessOperate, accessActRuns}, h.runAction(verb, do)))
	}
	h.mux.Handle("GET /workflows", h.authed([]access{accessOperate}, h.workflowsList))
	h.mux.Handle("GET /workflows/{name}", h.authed([]access{accessOperate}, h.workflowDetail))
	h.mux.Handle("GET /pools", h.authed([]access{accessOperate}, h.poolsList))
	h.mux.Handle("GET /pools/{id}", h.authed([]access{accessOperate}, h.poolDetail))
	h.mux.Handle("GET /pools/{id}/results", h.authed([]access{accessOperate}, h.poolResults))
	h.mux.Handle("GET /units/{id}", h.authed([]access{accessOperate}, h.unitDetail))
	h.mux.Handle("GET /pools/{id}/contributors/{contributor}", h.authed([]access{accessOperate}, h.contributorDetail))
	h.mux.Handle("POST /pools/{id}/contributors/{contributor}/forgive", h.authed([]access{accessOperate, accessAdmin}, h.contributorForgive))
	for verb, do := range map[string]func(*docket.Client, context.Context, uuid.UUID) (*docket.Pool, error){
		"pause": (*docket.Client).PoolPause, "resume": (*docket.Client).PoolResume, "close": (*docket.Client).PoolClose,
	} {
		h.mux.Handle("POST /pools/{id}/"+verb, h.authed([]access{accessOperate, accessAdmin}, h.poolAction(verb, do)))
	}
	h.mux.Handle("GET /dead", h.authed([]access{accessOperate}, h.deadList))
	h.mux.Handle("POST /dead/retry", h.authed([]access{accessOperate, accessActJobs}, h.deadRetryPost))
	h.mux.Handle("POST /dead/events/retry", h.authed([]access{accessOperate, accessAdmin}, h.deadEventsRetry))
	h.mux.Handle("GET /queues", h.authed([]access{accessOperate}, h.queuesList))
	h.mux.Handle("POST /queues/pause", h.authed([]access{accessOperate, accessAdmin}, h.queuePause(true)))
	h.mux.Handle("POST /queues/resume", h.authed([]access{accessOperate, accessAdmin}, h.queuePause(false)))
	h.workRoutes()
	h.opsRoutes()
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.renderError(w, r, http.StatusNotFound, "No page at "+r.URL.Path+".")
	})
}

// notText names the path, if it is not text (docket.CheckText: a page's
// path values are parts of it), and each query or form parameter whose
// name or a value is not: no name, id or filter can be, and PostgreSQL
// refuses such a parameter (a 500 where SQLite found nothing).
func notText(r *http.Request) []string {
	var problems []string
	if err := docket.CheckText("path", r.URL.Path); err != nil {
		problems = append(problems, err.Error())
	}
	vals := r.Form // a POST's, with the query's
	if r.Method != http.MethodPost {
		vals = r.URL.Query()
	}
	bad := func(v string) bool { return docket.CheckText("", v) != nil }
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		switch {
		case bad(k): // named readably
			k = strings.ToValidUTF8(strings.ReplaceAll(k, "\x00", "\uFFFD"), "\uFFFD")
		case !slices.ContainsFunc(vals[k], bad):
			continue
		}
		problems = append(problems, docket.CheckText(k, "\x00").Error()) // "k: <why>"
	}
	return problems
}

// Limits of a posted form.
const (
	// formMaxBytes is the most a form may post.
	formMaxBytes = 64 << 10
	// workFormMaxBytes is the most a work page's judgment may post: a
	// judgment the API takes (1 MiB of JSON) must fit, and a text field's
	// 10,000 characters form-encoded may take 9 bytes each.
	workFormMaxBytes = 1 << 20
)

// authed wraps a page: no session → the sign-in page (GET) or 401; a
// role without every access in need → 403; a POST larger than
// formMaxBytes → 413; a POST without the session's CSRF token → 403.
func (h *Handler) authed(need []access, next http.HandlerFunc) http.Handler {
	return h.authedLimit(need, formMaxBytes, next)
}

// authedLimit is authed with a POST of at most limit bytes.
func (h *Handler) authedLimit(need []access, limit int64, next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ss *session
		if c, err := r.Cookie(sessionCookie); err == nil {
			ss = h.sessions.lookup(c.Value)
		}
		if ss != nil && !h.stillValid(r.Context(), ss) {
			ss = nil
		}
		if ss == nil {
			if r.Method == http.MethodGet && r.Header.Get("HX-Request") == "" {
				http.Redirect(w, r, "/signin?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			// A form sent after the session ended (a work page's answer,
			// say): signing in leads back to the page it was sent from.
			h.render(w, http.StatusUnauthorized, "error", "layout", &view{Title: http.StatusText(http.StatusUnauthorized),
				Data: errorData{Status: http.StatusUnauthorized, Message: "Sign in first.", Next: refererPath(r)}})
			return
		}
		for _, a := range need {
			if !can(ss.key.Role, a) {
				h.renderErrorAs(w, r, ss, http.StatusForbidden, "Your key's role ("+string(ss.key.Role)+") may not open this page.")
				return
			}
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
			if err := r.ParseForm(); err != nil {
				var tooLarge *http.MaxBytesError
				if errors.As(err, &tooLarge) {
					h.renderErrorAs(w, r, ss, http.StatusRequestEntityTooLarge,
						"The form is too large: at most "+strconv.FormatInt(limit>>10, 10)+" kB may be sent. Nothing was saved.")
					return
				}
				h.renderErrorAs(w, r, ss, http.StatusBadRequest, "The form could not be read: "+err.Error())
				return
			}
			if !csrfOK(r, ss.csrf) {
				h.renderErrorAs(w, r, ss, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and try again.")
				return
			}
		}
		if problems := notText(r); problems != nil {
			h.renderErrorAs(w, r, ss, http.StatusBadRequest, strings.Join(problems, "; "))
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, ss)))
	})
}

// refererPath is the path (and query) of the page of this site r was
// sent from, by its Referer header, when safeNext keeps it; "" otherwise.
func refererPath(r *http.Request) string {
	u, err := url.Parse(r.Referer())
	if err != nil || u.Host != r.Host || u.Scheme != "http" && u.Scheme != "https" {
		return ""
	}
	return safeNext(u.RequestURI())
}

// safeNext keeps a post-sign-in redirect on this site: a path, not
// //host or a scheme.
// A browser strips tabs and newlines from a Location and reads a
// backslash as a slash, so "/\t/evil.example" would leave the site: any
// control character or backslash refuses the target, and what remains must
// parse as a path with neither scheme nor host.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		return ""
	}
	for _, r := range next {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return ""
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return ""
	}
	return next
}

func (h *Handler) serveStatic() http.Handler {
	files := http.FileServerFS(h.static)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "VENDOR" || strings.HasSuffix(r.URL.Path, "/") || r.URL.Path == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}
