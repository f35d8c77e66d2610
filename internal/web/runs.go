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

// runStates is every run state, for the filter.
var runStates = []docket.RunState{docket.RunRunning, docket.RunPaused, docket.RunSucceeded, docket.RunFailed, docket.RunCanceled}

// runsData is the runs list's.
type runsData struct {
	States   []docket.RunState
	Workflow string // the filter's values as typed
	State    string
	Errors   []string // about the filter, each naming its field
	Runs     []*docket.Run
	Next     string // URL of the next page; "" on the last
}

// parseRunsQuery reads the runs list's query; every bad value is an entry
// of d.Errors naming its field.
func parseRunsQuery(q url.Values) (*runsData, docket.RunListParams) {
	d := &runsData{States: runStates, Workflow: strings.TrimSpace(q.Get("workflow")), State: q.Get("state")}
	p := docket.RunListParams{Workflow: d.Workflow, Limit: pageSize + 1}
	if d.State != "" {
		st := docket.RunState(strings.ToUpper(d.State))
		if !st.Valid() {
			d.Errors = append(d.Errors, "state: unknown run state "+d.State)
		} else {
			d.State = string(st) // as the form's options spell it, so the form keeps it
		}
		p.States = []docket.RunState{st}
	}
	if c := q.Get("cursor"); c != "" {
		id, ok := decodeCursor(c)
		if !ok {
			d.Errors = append(d.Errors, "cursor: not a cursor this page made")
		}
		p.Before = id
	}
	return d, p
}

// decodeCursor reads an id cursor (base64url of its 16 bytes).
func decodeCursor(c string) (uuid.UUID, bool) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(c)
	if err != nil || len(b) != 16 || uuid.UUID(b) == uuid.Nil {
		return uuid.Nil, false
	}
	return uuid.UUID(b), true
}

func encodeCursor(id uuid.UUID) string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// nextURL is path with the non-empty filter values and the cursor.
func nextURL(path string, filter map[string]string, last uuid.UUID) string {
	q := url.Values{}
	for k, v := range filter {
		if v != "" {
			q.Set(k, v)
		}
	}
	q.Set("cursor", encodeCursor(last))
	return path + "?" + q.Encode()
}

// runsList pages through runs newest first, filtered by workflow and state.
func (h *Handler) runsList(w http.ResponseWriter, r *http.Request) {
	d, p := parseRunsQuery(r.URL.Query())
	if len(d.Errors) > 0 {
		h.renderPageStatus(w, r, http.StatusBadRequest, "runs", "Runs", d)
		return
	}
	runs, err := h.client.RunList(r.Context(), p)
	if err != nil {
		h.renderFailure(w, r, "Listing runs failed", err)
		return
	}
	if len(runs) > pageSize {
		runs = runs[:pageSize]
		d.Next = nextURL("/runs", map[string]string{"workflow": d.Workflow, "state": d.State}, runs[pageSize-1].ID)
	}
	d.Runs = runs
	h.renderPage(w, r, "runs", "Runs", d)
}

// runStepsShown is how many step instances the run page lists.
const runStepsShown = 500

// runData is the run page's.
type runData struct {
	Run     *docket.Run
	DAG     *dagChart // nil when the definition could not be read
	Message string    // what the last action did, or why it was refused
	// Steps are the step instances the table lists: the first
	// runStepsShown; Hidden counts the rest (a fan-out of 10,000 items
	// would otherwise be a table of 10,000 rows).
	Steps  []*docket.RunStep
	Hidden int
	// The operations the user may ask of the run in its state.
	CanCancel, CanPause, CanResume, CanRetry bool
}

func (h *Handler) runDetail(w http.ResponseWriter, r *http.Request) {
	h.showRun(w, r, http.StatusOK, "")
}

// runDone words what an action did (runAction's redirect names it by
// code, ?done=, so that no link puts words on the page), from the run as
// read.
func runDone(code string, run *docket.Run) string {
	switch code {
	case "cancel", "pause", "resume", "retry":
		return code + " done: the run is " + string(run.State)
	case "cancel-requested":
		return "cancel requested: the run is CANCELED once its running steps stopped"
	}
	return ""
}

func (h *Handler) showRun(w http.ResponseWriter, r *http.Request, status int, message string) {
	d, st, msg, err := h.runPageData(r)
	if d == nil {
		h.renderNoData(w, r, st, msg, err)
		return
	}
	if message == "" {
		message = runDone(r.URL.Query().Get("done"), d.Run)
	}
	d.Message = message
	h.renderPageStatus(w, r, status, "run", "Run "+d.Run.ID.String(), d)
}

// runPageData reads the run of the path for its page; nil with a status
// and a message when it cannot, or with what failed and the error of a
// read that failed (renderNoData renders either).
func (h *Handler) runPageData(r *http.Request) (*runData, int, string, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return nil, http.StatusNotFound, "Not a run id: " + r.PathValue("id"), nil
	}
	run, err := h.client.RunGet(r.Context(), id)
	if errors.Is(err, docket.ErrNotFound) {
		return nil, http.StatusNotFound, "No run " + id.String() + ".", nil
	}
	if err != nil {
		return nil, 0, "Reading the run failed", err
	}
	d := &runData{Run: run, Steps: run.Steps}
	if len(d.Steps) > runStepsShown {
		d.Steps, d.Hidden = d.Steps[:runStepsShown], len(d.Steps)-runStepsShown
	}
	if v, err := h.client.WorkflowGet(r.Context(), run.Workflow, run.Version); err == nil {
		d.DAG = layoutDAG(runSteps(v.Definition, run))
	} else {
		h.cfg.Logger.Warn("web: run page without its DAG", "run", id, "error", err)
	}
	if can(sessionOf(r.Context()).key.Role, accessActRuns) {
		switch run.State {
		case docket.RunRunning:
			d.CanCancel, d.CanPause = !run.CancelRequested, true
		case docket.RunPaused:
			d.CanCancel, d.CanResume = !run.CancelRequested, true
		case docket.RunFailed:
			d.CanRetry = true
		}
	}
	return d, http.StatusOK, "", nil
}

// renderNoData is the error page of a page whose data could not be had:
// renderFailure's when a read failed with err, else status and msg.
func (h *Handler) renderNoData(w http.ResponseWriter, r *http.Request, status int, msg string, err error) {
	if err != nil {
		h.renderFailure(w, r, msg, err)
		return
	}
	h.renderError(w, r, status, msg)
}

// runAction is a POST /runs/{id}/{verb} handler: the operation through
// the Client, then a redirect to the run page saying what happened; a
// refusal (ErrRunConflict) is shown on the page with 409.
func (h *Handler) runAction(verb string, do func(*docket.Client, context.Context, uuid.UUID) (*docket.Run, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(r.PathValue("id"))
		if err != nil {
			h.renderError(w, r, http.StatusNotFound, "Not a run id: "+r.PathValue("id"))
			return
		}
		run, err := do(h.client, r.Context(), id)
		switch {
		case errors.Is(err, docket.ErrNotFound):
			h.renderError(w, r, http.StatusNotFound, "No run "+id.String()+".")
		case errors.Is(err, docket.ErrRunConflict):
			h.showRun(w, r, http.StatusConflict, "Cannot "+verb+": "+err.Error())
		case err != nil:
			h.renderFailure(w, r, verb+" failed", err)
		default:
			done := verb
			if run.CancelRequested && run.State != docket.RunCanceled {
				done = "cancel-requested"
			}
			http.Redirect(w, r, "/runs/"+id.String()+"?done="+done, http.StatusSeeOther)
		}
	}
}
