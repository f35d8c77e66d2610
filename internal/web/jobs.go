package web

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// jobsData is the jobs list's.
type jobsData struct {
	States []docket.JobState // every state, for the filter
	State  string            // the filter's values as typed
	Type   string
	Queue  string
	Args   string // args.path:value (search.go)
	// Search: the key may search by payload value (it may read payloads,
	// docket.Role.ReadsPayloads); the Args field is shown only then.
	Search bool
	ID     string
	Within int      // how many newest jobs an args search scans
	Errors []string // about the filter, each naming its field
	Jobs   []*docket.JobRow
	Next   string // URL of the next page; "" on the last
}

// parseJobsQuery reads the jobs list's query: the filter as typed, the
// list parameters, and the job id to open when ?id= is one. Every bad
// value is an entry of d.Errors naming its field.
func parseJobsQuery(q url.Values) (d *jobsData, p docket.ListParams, open uuid.UUID) {
	d = &jobsData{States: docket.JobStates(), State: q.Get("state"), Type: strings.TrimSpace(q.Get("type")),
		Queue: strings.TrimSpace(q.Get("queue")), ID: strings.TrimSpace(q.Get("id")), Args: strings.TrimSpace(q.Get("args")),
		Within: argsSearchWithin}
	if d.ID != "" {
		id, err := uuid.Parse(d.ID)
		if err == nil && id != uuid.Nil {
			return d, p, id
		}
		d.Errors = append(d.Errors, "id: not a job id (a UUID such as 0190c6a4-…)")
	}
	p = docket.ListParams{Limit: pageSize + 1}
	if d.State != "" {
		st := docket.JobState(strings.ToUpper(d.State))
		if !st.Valid() {
			d.Errors = append(d.Errors, "state: unknown state "+d.State)
		} else {
			d.State = string(st) // as the form's options spell it, so the form keeps it
		}
		p.States = []docket.JobState{st}
	}
	if d.Type != "" {
		p.Types = []string{d.Type}
	}
	if d.Queue != "" {
		p.Queues = []string{d.Queue}
	}
	if d.Args != "" {
		m, err := parseArgsSearch(d.Args)
		if err != nil {
			d.Errors = append(d.Errors, err.Error())
		}
		p.Args = m
	}
	if c := q.Get("cursor"); c != "" {
		b, err := base64.RawURLEncoding.Strict().DecodeString(c)
		if err != nil || len(b) != 16 || uuid.UUID(b) == uuid.Nil {
			d.Errors = append(d.Errors, "cursor: not a cursor this page made")
		} else {
			p.Before = uuid.UUID(b)
		}
	}
	return d, p, uuid.Nil
}

// jobsList pages through jobs newest first with the API's cursor (the
// last id of the page), filtered by state, type and queue in the query;
// ?id= opens that job.
func (h *Handler) jobsList(w http.ResponseWriter, r *http.Request) {
	d, p, id := parseJobsQuery(r.URL.Query())
	if id != uuid.Nil {
		http.Redirect(w, r, "/jobs/"+id.String(), http.StatusSeeOther)
		return
	}
	role := sessionOf(r.Context()).key.Role
	d.Search = role.ReadsPayloads()
	if msg := argsRefused(role, d.Args); msg != "" {
		d.Errors = []string{msg}
		h.renderPageStatus(w, r, http.StatusForbidden, "jobs", "Jobs", d)
		return
	}
	if len(d.Errors) > 0 {
		h.renderPageStatus(w, r, http.StatusBadRequest, "jobs", "Jobs", d)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dashboardTimeout)
	defer cancel()
	rows, err := h.client.List(ctx, p)
	if err != nil {
		h.renderFailure(w, r, "Listing jobs failed", err)
		return
	}
	if len(rows) > pageSize {
		rows = rows[:pageSize]
		next := url.Values{}
		for k, v := range d.filter() {
			if v != "" {
				next.Set(k, v)
			}
		}
		next.Set("cursor", base64.RawURLEncoding.EncodeToString(rows[pageSize-1].ID[:]))
		d.Next = "/jobs?" + next.Encode()
	}
	d.Jobs = rows
	h.renderPage(w, r, "jobs", "Jobs", d)
}

// filter is the list's filter as query values ("" when not set).
func (d *jobsData) filter() map[string]string {
	return map[string]string{"state": d.State, "type": d.Type, "queue": d.Queue, "args": d.Args}
}

// jobData is the job page's.
type jobData struct {
	Job      *docket.JobRow
	Attempts []*docket.JobAttempt
	// Full: the payload and attempts are shown (admin only, as in the
	// API's ?include=payload,attempts).
	Full      bool
	CanCancel bool
	CanRetry  bool
	Message   string // what the last action did
}

func (h *Handler) jobDetail(w http.ResponseWriter, r *http.Request) {
	h.showJob(w, r, http.StatusOK, "")
}

// jobDone words what an action did (act's redirect names it by code,
// ?done=, so that no link puts words on the page), from the job as read.
func jobDone(code string, row *docket.JobRow) string {
	switch code {
	case "cancel", "retry":
		return code + " done: the job is " + string(row.State)
	case "cancel-requested":
		return "cancel requested: the worker holding the job is told to stop"
	}
	return ""
}

func (h *Handler) showJob(w http.ResponseWriter, r *http.Request, status int, message string) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "Not a job id: "+r.PathValue("id"))
		return
	}
	row, err := h.client.Get(r.Context(), id)
	if errors.Is(err, docket.ErrNotFound) {
		h.renderError(w, r, http.StatusNotFound, "No job "+id.String()+".")
		return
	}
	if err != nil {
		h.renderFailure(w, r, "Reading the job failed", err)
		return
	}
	ss := sessionOf(r.Context())
	if message == "" {
		message = jobDone(r.URL.Query().Get("done"), row)
	}
	d := &jobData{Job: row, Full: ss.key.Role == docket.RoleAdmin, Message: message}
	if d.Full {
		if d.Attempts, err = h.client.Attempts(r.Context(), id); err != nil {
			h.renderFailure(w, r, "Reading the attempts failed", err)
			return
		}
	}
	if can(ss.key.Role, accessActJobs) {
		switch row.State {
		case docket.JobStateDead, docket.JobStateCanceled:
			d.CanRetry = true
		case docket.JobStateSuccess:
		default:
			d.CanCancel = !row.CancelRequested
		}
	}
	h.renderPageStatus(w, r, status, "job", "Job "+id.String(), d)
}

func (h *Handler) jobCancel(w http.ResponseWriter, r *http.Request) {
	h.act(w, r, "cancel", h.client.Cancel)
}

func (h *Handler) jobRetry(w http.ResponseWriter, r *http.Request) {
	h.act(w, r, "retry", h.client.Retry)
}

// act cancels or retries, then redirects to the job page (POST, redirect,
// GET) saying what happened; a refusal (a job in a state that does not
// allow it) is shown on the page with 409.
func (h *Handler) act(w http.ResponseWriter, r *http.Request, verb string, do func(ctx context.Context, id uuid.UUID) (*docket.JobRow, error)) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "Not a job id: "+r.PathValue("id"))
		return
	}
	row, err := do(r.Context(), id)
	switch {
	case errors.Is(err, docket.ErrNotFound):
		h.renderError(w, r, http.StatusNotFound, "No job "+id.String()+".")
	case err != nil:
		var inv *docket.InvalidTransitionError
		if errors.As(err, &inv) || errors.Is(err, docket.ErrRunConflict) { // a step's job: its run is retried
			h.showJob(w, r, http.StatusConflict, "Cannot "+verb+": "+err.Error())
			return
		}
		h.renderFailure(w, r, verb+" failed", err)
	default:
		done := verb
		if row.CancelRequested && row.State == docket.JobStateRunning {
			done = "cancel-requested"
		}
		http.Redirect(w, r, "/jobs/"+id.String()+"?done="+done, http.StatusSeeOther)
	}
}
