package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// The contributor's pages: the pools they may work on (the search of GET
// /v1/me/pools, Client.EligiblePools), and the work page of one
// assignment. Every action calls the same docket.Client methods as the
// API's contributor endpoints, for the contributor the session's key is
// bound to; an assignment of someone else answers 404, like an unknown one.

// WorkContentSecurityPolicy is ContentSecurityPolicy with images from any
// http(s) address: a unit's photo lives wherever the requester keeps it.
// It is sent with the work page only; scripts, styles and connections stay
// on this origin, and Referrer-Policy keeps the page's address from the
// image's host.
const WorkContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' http: https:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func (h *Handler) workRoutes() {
	h.mux.Handle("GET /work", h.authed([]access{accessWork}, h.work))
	h.mux.Handle("POST /work/pools/{id}/take", h.authed([]access{accessWork}, h.workTake))
	h.mux.Handle("GET /work/a/{id}", h.authed([]access{accessWork}, h.workPage))
	h.mux.Handle("POST /work/a/{id}/submit", h.authedLimit([]access{accessWork}, workFormMaxBytes, h.workSubmit))
	h.mux.Handle("POST /work/a/{id}/skip", h.authed([]access{accessWork}, h.workSkip))
	h.mux.Handle("POST /work/a/{id}/heartbeat", h.authed([]access{accessWork}, h.workHeartbeat))
}

// me is the contributor the session's key is bound to; uuid.Nil for a key
// of no contributor (an admin's).
func me(r *http.Request) uuid.UUID { return sessionOf(r.Context()).key.ContributorID }

// workPool is a pool on the contributor's list.
type workPool struct {
	Pool      *docket.Pool
	Title     string
	Available int
}

// workData is the pools page's.
type workData struct {
	// NoContributor: the key is bound to no contributor (an admin's key).
	NoContributor bool
	// Banned: the contributor is banned, so no pool hands them work.
	Banned  bool
	Pools   []workPool
	Message string
	// Test: what the test question just submitted scored (feedback.go).
	Test *testView
}

// workMessages are the messages a redirect to /work may ask for (by code:
// a URL cannot put words on the page).
var workMessages = map[string]string{
	"saved":   "Saved. That pool has no unit left for you.",
	"skipped": "Skipped. That pool has no other unit for you.",
	"none":    "That pool has no unit left for you.",
	"closed":  "That pool hands out no work now (paused or closed).",
	"refused": "You may not work on that pool.",
	"gone":    "That assignment is over.",
	// A take past the pool's safe rate after a judgment or a skip (an
	// explicit take is answered 429).
	"saved-busy":   "Saved. That pool hands out work at a limited rate: take its next unit in a moment.",
	"skipped-busy": "Skipped. That pool hands out work at a limited rate: take its next unit in a moment.",
	// The next take refused after a judgment or a skip went through: the
	// pool paused or closed meanwhile, or the contributor flagged (by that
	// very answer) — the page says what was done before why no unit came.
	"saved-closed":    "Saved. That pool hands out no work now (paused or closed).",
	"skipped-closed":  "Skipped. That pool hands out no work now (paused or closed).",
	"saved-refused":   "Saved. You may not work on that pool.",
	"skipped-refused": "Skipped. You may not work on that pool.",
}

func (h *Handler) work(w http.ResponseWriter, r *http.Request) {
	d := &workData{Message: workMessages[r.URL.Query().Get("m")], Test: testShown(r)}
	id := me(r)
	if id == uuid.Nil {
		d.NoContributor = true
		h.renderPage(w, r, "work", "Work", d)
		return
	}
	// A banned contributor's search finds no pool: say why, rather than
	// "no work right now".
	switch banned, err := h.banned(r); {
	case err != nil:
		h.renderFailure(w, r, "Reading your account failed", err)
		return
	case banned:
		d.Banned = true
		h.renderPage(w, r, "work", "Work", d)
		return
	}
	pools, err := h.client.EligiblePools(r.Context(), id, 0)
	if err != nil {
		h.renderFailure(w, r, "Listing your pools failed", err)
		return
	}
	for _, e := range pools {
		p := workPool{Pool: e.Pool, Available: e.Available, Title: e.Pool.Task}
		if ct, err := h.client.CompiledTask(r.Context(), e.Pool.Task, e.Pool.TaskVersion); err == nil {
			p.Title = ct.Template.Title
		}
		d.Pools = append(d.Pools, p)
	}
	h.renderPage(w, r, "work", "Work", d)
}

// contributorOnly refuses a key bound to no contributor.
func (h *Handler) contributorOnly(w http.ResponseWriter, r *http.Request) bool {
	if me(r) == uuid.Nil {
		h.renderError(w, r, http.StatusForbidden, "Only a contributor's key works on units: sign in with one.")
		return false
	}
	return true
}

// workTake takes a unit of the pool and opens its work page.
func (h *Handler) workTake(w http.ResponseWriter, r *http.Request) {
	if !h.contributorOnly(w, r) {
		return
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "Not a pool id: "+r.PathValue("id"))
		return
	}
	h.takeNext(w, r, id, "none", uuid.Nil)
}

// takeNext takes the next unit of the pool and redirects to its page, or
// to the pools with the message noneCode when none is left; tested, when
// not uuid.Nil, is the assignment whose test result the page shows
// (feedback.go).
//
// It takes at most one unit per pool at a time for the session: the
// session's takes run one after the other, and when the last unit this
// session took in the pool is still ACTIVE, its page opens again instead.
// So a "Start working" clicked twice, or a judgment or skip form sent
// twice (the judgment is idempotent per assignment, the release of a
// released assignment a no-op), leads to one assignment, not two.
func (h *Handler) takeNext(w http.ResponseWriter, r *http.Request, poolID uuid.UUID, noneCode string, tested uuid.UUID) {
	ss := sessionOf(r.Context())
	ss.takeMu.Lock()
	defer ss.takeMu.Unlock()
	// query is a redirect's query: the message m (none for "") and the
	// test result to show.
	query := func(m string) string {
		v := url.Values{}
		if m != "" {
			v.Set("m", m)
		}
		if tested != uuid.Nil {
			v.Set("t", tested.String())
		}
		if len(v) == 0 {
			return ""
		}
		return "?" + v.Encode()
	}
	// after is the message code of a refused take: after a judgment or a
	// skip, one that says it went through ("saved-closed").
	after := func(code string) string {
		if noneCode == "none" {
			return code
		}
		return noneCode + "-" + code
	}
	q := query("")
	if noneCode != "none" {
		q = query(noneCode)
	}
	if id, ok := ss.taken[poolID]; ok {
		// A banned contributor is refused as before: the take says so.
		a, err := h.client.AssignmentGet(r.Context(), id)
		if err == nil && a.State == docket.AssignmentActive && a.ContributorID == me(r) && h.cfg.Now().Before(a.ExpiresAt) {
			if banned, err := h.banned(r); err == nil && !banned {
				http.Redirect(w, r, "/work/a/"+id.String()+q, http.StatusSeeOther)
				return
			}
		}
	}
	t, err := h.client.AssignmentTake(r.Context(), poolID, me(r))
	var notOpen *docket.PoolNotOpenError
	var notEligible *docket.NotEligibleError
	var takeRate *docket.TakeRateError
	switch {
	case err == nil:
		if ss.taken == nil {
			ss.taken = map[uuid.UUID]uuid.UUID{}
		}
		ss.taken[poolID] = t.Assignment.ID
		http.Redirect(w, r, "/work/a/"+t.Assignment.ID.String()+q, http.StatusSeeOther)
	case docket.IsNoUnit(err):
		http.Redirect(w, r, "/work"+query(noneCode), http.StatusSeeOther)
	case errors.As(err, &notOpen):
		http.Redirect(w, r, "/work"+query(after("closed")), http.StatusSeeOther)
	case errors.As(err, &notEligible):
		http.Redirect(w, r, "/work"+query(after("refused")), http.StatusSeeOther)
	case errors.As(err, &takeRate) && noneCode != "none":
		// The judgment or the skip went through: say so, not 429.
		http.Redirect(w, r, "/work"+query(noneCode+"-busy"), http.StatusSeeOther)
	case errors.As(err, &takeRate):
		secs := max(1, int(math.Ceil(takeRate.RetryAfter.Seconds())))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		h.renderError(w, r, http.StatusTooManyRequests,
			fmt.Sprintf("That pool hands out work at a limited rate: try again in %d s.", secs))
	case errors.Is(err, docket.ErrNotFound):
		h.renderError(w, r, http.StatusNotFound, "No pool "+poolID.String()+".")
	default:
		h.renderFailure(w, r, "Taking a unit failed", err)
	}
}

// assignmentData is the work page's.
type assignmentData struct {
	Assignment   *docket.Assignment
	Pool         *docket.Pool
	Title        string
	Instructions string
	Display      []workDisplay
	Fields       []workField
	// Active: the form is shown (the assignment is ACTIVE, its lease has
	// not run out, and its unit is not canceled).
	Active bool
	// Canceled: the unit was canceled (its run canceled, say): the work is
	// no longer wanted, whatever the assignment's state.
	Canceled bool
	// Now is the server's time, for the countdown's clock skew;
	// HeartbeatEvery how often the page beats, in seconds.
	Now            time.Time
	HeartbeatEvery int
	// Problems is the list of the last submission's problems (field:
	// message), shown above the form; each is also shown at its field.
	Problems []string
	// FocusProblems: the list of problems takes the focus when the page
	// opens, when no field of the form is in error (a problem of the whole
	// judgment); else the first field in error takes it.
	FocusProblems bool
	Message       string
	// Test: what the test question submitted before this unit scored
	// (feedback.go); nil for none.
	Test *testView
}

// assignmentMessages are the messages a redirect to a work page may ask
// for.
var assignmentMessages = map[string]string{
	"saved":   "Saved. Here is the next unit.",
	"skipped": "Skipped. Here is another unit.",
}

// heartbeatEvery is how often the work page beats: a tenth of the lease,
// from 3 s to 60 s.
func heartbeatEvery(assignmentSeconds int) int { return min(max(assignmentSeconds/10, 3), 60) }

// mine reads the assignment of the path, refusing one of someone else.
func (h *Handler) mine(w http.ResponseWriter, r *http.Request) (*docket.Assignment, bool) {
	if !h.contributorOnly(w, r) {
		return nil, false
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "Not an assignment id: "+r.PathValue("id"))
		return nil, false
	}
	a, err := h.client.AssignmentGet(r.Context(), id)
	switch {
	case errors.Is(err, docket.ErrNotFound) || err == nil && a.ContributorID != me(r):
		// Another contributor's assignment answers like an unknown one, as
		// the API does: the page does not confirm that the id exists.
		h.renderError(w, r, http.StatusNotFound, "No assignment "+id.String()+".")
		return nil, false
	case err != nil:
		h.renderFailure(w, r, "Reading the assignment failed", err)
		return nil, false
	}
	return a, true
}

func (h *Handler) workPage(w http.ResponseWriter, r *http.Request) {
	a, ok := h.mine(w, r)
	if !ok {
		return
	}
	h.showAssignment(w, r, http.StatusOK, a, nil, nil, assignmentMessages[r.URL.Query().Get("m")])
}

// showAssignment renders the work page of a, its form filled with form
// and problems (nil: fresh), with the test result the page's ?t= names.
func (h *Handler) showAssignment(w http.ResponseWriter, r *http.Request, status int, a *docket.Assignment, form url.Values, problems []problem, message string) {
	ctx := r.Context()
	pool, err := h.client.PoolGet(ctx, a.PoolID)
	if err != nil {
		h.renderFailure(w, r, "Reading the pool failed", err)
		return
	}
	ct, err := h.client.CompiledTask(ctx, pool.Task, pool.TaskVersion)
	if err != nil {
		h.renderFailure(w, r, "Reading the task failed", err)
		return
	}
	unit, err := h.client.UnitGet(ctx, a.UnitID)
	if err != nil {
		h.renderFailure(w, r, "Reading the unit failed", err)
		return
	}
	input := decodeInput(unit.Input)
	byField := map[string][]string{}
	canceled := unit.State == docket.UnitCanceled
	d := &assignmentData{Assignment: a, Pool: pool, Title: ct.Template.Title, Instructions: ct.Template.Instructions,
		Display: workDisplays(ct.Display, input), Canceled: canceled, Now: h.cfg.Now(),
		Active:         a.State == docket.AssignmentActive && a.ExpiresAt.After(h.cfg.Now()) && !canceled,
		HeartbeatEvery: heartbeatEvery(pool.AssignmentSeconds), Message: message, Test: testShown(r)}
	for _, p := range problems {
		if p.Field == "" {
			d.Problems = append(d.Problems, p.Message)
			continue
		}
		d.Problems = append(d.Problems, p.Field+": "+p.Message)
		byField[fieldOf(p.Field)] = append(byField[fieldOf(p.Field)], p.Message)
	}
	d.Fields = workFields(ct.Fields, input, form, byField)
	// After a refused answer the focus goes to what to fix first, so that a
	// keyboard or screen reader user starts there, not at the page's top.
	if len(d.Problems) > 0 {
		d.FocusProblems = true
		for i := range d.Fields {
			if len(d.Fields[i].Errors) > 0 {
				d.Fields[i].Autofocus, d.FocusProblems = true, false
				break
			}
		}
	}
	w.Header().Set("Content-Security-Policy", WorkContentSecurityPolicy)
	h.renderPageStatus(w, r, status, "assignment", ct.Template.Title, d)
}

// problem is one problem of a submitted form: a path into the judgment
// ("boxes[1].w"; "" for the whole) and what is wrong.
type problem struct{ Field, Message string }

// workSubmit reads the form into a judgment and submits it through
// Client.JudgmentSubmit; a judgment the task refuses shows the form again
// with every problem at its field (422); a stored one takes the next unit
// of the pool at once.
// banned reports whether the signed-in contributor is banned: as over the
// API, a banned contributor submits and heartbeats nothing (they may still
// skip, which gives the unit back).
func (h *Handler) banned(r *http.Request) (bool, error) {
	c, err := h.client.ContributorGet(r.Context(), me(r))
	if err != nil {
		return false, err
	}
	return c.State == docket.ContributorBanned, nil
}

func (h *Handler) workSubmit(w http.ResponseWriter, r *http.Request) {
	a, ok := h.mine(w, r)
	if !ok {
		return
	}
	switch banned, err := h.banned(r); {
	case err != nil:
		h.renderFailure(w, r, "Reading your account failed", err)
		return
	case banned:
		h.renderError(w, r, http.StatusForbidden, "You are banned: you can no longer submit judgments.")
		return
	}
	ctx := r.Context()
	pool, err := h.client.PoolGet(ctx, a.PoolID)
	if err != nil {
		h.renderFailure(w, r, "Reading the pool failed", err)
		return
	}
	ct, err := h.client.CompiledTask(ctx, pool.Task, pool.TaskVersion)
	if err != nil {
		h.renderFailure(w, r, "Reading the task failed", err)
		return
	}
	data, formProblems := judgmentFromForm(ct.Fields, r.PostForm)
	var problems []problem
	for _, f := range ct.Fields {
		for _, m := range formProblems[f.Name] {
			problems = append(problems, problem{f.Name, m})
		}
	}
	if len(problems) > 0 {
		// Validate the rest too, so that one post names every problem;
		// the fields the form could not read are left out.
		if err := ct.ValidateJudgment(data); err != nil {
			problems = append(problems, taskProblems(err, formProblems)...)
		}
		h.showAssignment(w, r, http.StatusUnprocessableEntity, a, r.PostForm, problems, "")
		return
	}
	sub, err := h.client.JudgmentSubmit(ctx, a.ID, me(r), data)
	var ve *docket.TaskValidationError
	var ae *docket.AssignmentError
	var conflict *docket.JudgmentConflictError
	switch {
	case errors.As(err, &ve):
		h.showAssignment(w, r, http.StatusUnprocessableEntity, a, r.PostForm, taskProblems(err, nil), "")
	case errors.As(err, &ae):
		h.showAssignment(w, r, http.StatusConflict, h.reread(ctx, a), nil, nil, "Not saved: "+refusal(ae))
	case errors.As(err, &conflict):
		h.showAssignment(w, r, http.StatusConflict, h.reread(ctx, a), nil, nil, "Not saved: another answer was already saved for this unit.")
	case err != nil:
		h.renderFailure(w, r, "Saving the judgment failed", err)
	default:
		h.takeNext(w, r, a.PoolID, "saved", keepTest(r, a.ID, ct, sub.Test))
	}
}

// taskProblems lists a *TaskValidationError's problems, but those of the
// fields in skip.
func taskProblems(err error, skip map[string][]string) []problem {
	var ve *docket.TaskValidationError
	if !errors.As(err, &ve) {
		return []problem{{"", err.Error()}}
	}
	var out []problem
	for _, fe := range ve.Errors {
		if _, ok := skip[fieldOf(fe.Field)]; ok && fe.Field != "" {
			continue
		}
		out = append(out, problem{fe.Field, fe.Message})
	}
	return out
}

// refusal says in words why an assignment refused a change.
func refusal(ae *docket.AssignmentError) string {
	switch ae.Reason {
	case docket.RefusedExpired:
		return "your time on this unit ran out."
	case docket.RefusedUnitCanceled:
		return "this unit was canceled; the work is no longer wanted."
	case docket.RefusedNotOwner:
		return "this assignment is another contributor's."
	}
	return "this assignment is " + string(ae.State) + "."
}

// reread reads a again after a refused change (its state moved); a on
// error.
func (h *Handler) reread(ctx context.Context, a *docket.Assignment) *docket.Assignment {
	if b, err := h.client.AssignmentGet(ctx, a.ID); err == nil {
		return b
	}
	return a
}

// workSkip releases the assignment (its slot is free at once) and takes
// another unit of the pool.
func (h *Handler) workSkip(w http.ResponseWriter, r *http.Request) {
	a, ok := h.mine(w, r)
	if !ok {
		return
	}
	_, err := h.client.AssignmentRelease(r.Context(), a.ID, me(r))
	var ae *docket.AssignmentError
	switch {
	case errors.As(err, &ae):
		// Over already (expired or submitted): nothing to give back.
	case err != nil:
		h.renderFailure(w, r, "Releasing the assignment failed", err)
		return
	}
	h.takeNext(w, r, a.PoolID, "skipped", uuid.Nil)
}

// heartbeatView is the heartbeat's answer to the page's script.
type heartbeatView struct {
	State     string    `json:"state"`
	ExpiresAt time.Time `json:"expiresAt"`
	Now       time.Time `json:"now"`
	Error     string    `json:"error,omitempty"`
}

// workHeartbeat records that the page is still open
// (Client.AssignmentHeartbeat) and answers the lease as JSON: 200, or 409
// when the assignment is no longer held.
func (h *Handler) workHeartbeat(w http.ResponseWriter, r *http.Request) {
	a, ok := h.mine(w, r)
	if !ok {
		return
	}
	status := http.StatusOK
	v := heartbeatView{State: string(a.State), ExpiresAt: a.ExpiresAt.UTC(), Now: h.cfg.Now().UTC()}
	banned, err := h.banned(r)
	var b *docket.Assignment
	if err == nil && !banned {
		b, err = h.client.AssignmentHeartbeat(r.Context(), a.ID, me(r))
	}
	if err == nil && !banned {
		// A canceled unit takes no answer (JudgmentSubmit refuses it),
		// though its assignment stays held until it lapses: the open page
		// says so now, not after the work is done.
		var u *docket.Unit
		if u, err = h.client.UnitGet(r.Context(), a.UnitID); err == nil && u.State == docket.UnitCanceled {
			err = &docket.AssignmentError{AssignmentID: a.ID, Reason: docket.RefusedUnitCanceled, State: b.State}
		}
	}
	var ae *docket.AssignmentError
	switch {
	case banned:
		status, v.Error = http.StatusForbidden, "you are banned"
	case errors.As(err, &ae):
		status, v.State, v.Error = http.StatusConflict, string(ae.State), refusal(ae)
	case docket.IsUnavailable(err):
		// The unit is still held; the page's next beat tries again.
		status, v.Error = http.StatusServiceUnavailable, "the database cannot be reached"
		w.Header().Set("Retry-After", strconv.Itoa(unavailableRetryAfter))
		h.cfg.Logger.Warn("web: the database is unavailable", "method", r.Method, "path", r.URL.Path, "error", err)
	case err != nil:
		status, v.Error = http.StatusInternalServerError, "the heartbeat failed"
		h.cfg.Logger.Error("assignment heartbeat", "assignment_id", a.ID, "error", err)
	default:
		v.State, v.ExpiresAt = string(b.State), b.ExpiresAt.UTC()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
