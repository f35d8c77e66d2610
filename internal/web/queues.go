package web

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/docket-run/docket"
)

// The queues page: every queue with its depth — QUEUED, RUNNING and RETRY
// jobs, capped as on the overview (its cached read, no query of its own) —
// and its pause flag, with Pause and
// Resume for admin keys (Client.PauseQueue, ResumeQueue: workers stop or
// start acquiring the queue's jobs; running jobs finish).

// queuesData is the queues page's.
type queuesData struct {
	Queues  []queueRow
	Cap     string
	Message string
	Errors  []string
	// CanPause: the session may pause and resume (admin).
	CanPause bool
}

func (h *Handler) queuesList(w http.ResponseWriter, r *http.Request) {
	h.showQueues(w, r, http.StatusOK, "", nil)
}

func (h *Handler) showQueues(w http.ResponseWriter, r *http.Request, status int, message string, errs []string) {
	o, _, err := h.jobOverview(r.Context())
	if err != nil {
		h.renderFailure(w, r, "Reading the queues failed", err)
		return
	}
	d := &queuesData{Queues: queueRows(o), Cap: thousands(overviewCap), Message: message, Errors: errs, CanPause: can(sessionOf(r.Context()).key.Role, accessAdmin)}
	q := r.URL.Query()
	if m := q.Get("done"); message == "" && (m == "paused" || m == "resumed") && docket.CheckName("queue", q.Get("queue")) == nil {
		d.Message = "Queue " + q.Get("queue") + " " + m + "."
	}
	h.renderPageStatus(w, r, status, "queues", "Queues", d)
}

// queuePause is POST /queues/pause and /queues/resume (admin): the form's
// queue, checked as the API checks it.
func (h *Handler) queuePause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PostForm.Get("queue")
		if err := docket.CheckName("queue", name); err != nil {
			var ve *docket.ValidationError
			msg := err.Error()
			if errors.As(err, &ve) {
				msg = ve.Message
			}
			h.showQueues(w, r, http.StatusBadRequest, "", []string{"queue: " + msg})
			return
		}
		set, done := h.client.ResumeQueue, "resumed"
		if paused {
			set, done = h.client.PauseQueue, "paused"
		}
		if err := set(r.Context(), name); err != nil {
			h.renderFailure(w, r, "Pausing or resuming failed", err)
			return
		}
		h.ov.forget() // the page it redirects to shows the new flag
		http.Redirect(w, r, "/queues?"+url.Values{"done": {done}, "queue": {name}}.Encode(), http.StatusSeeOther)
	}
}
