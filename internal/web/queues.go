package web

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/docket-run/docket"
)

// The queues page: every queue with its job counts (the overview's cached
// counts, no count query of its own) and its pause flag, with Pause and
// Resume for admin keys (Client.PauseQueue, ResumeQueue: workers stop or
// start acquiring the queue's jobs; running jobs finish).

// queuesData is the queues page's.
type queuesData struct {
	States  []docket.JobState
	Queues  []queueRow
	Message string
	Errors  []string
	// CanPause: the session may pause and resume (admin).
	CanPause bool
}

func (h *Handler) queuesList(w http.ResponseWriter, r *http.Request) {
	h.showQueues(w, r, http.StatusOK, "", nil)
}

func (h *Handler) showQueues(w http.ResponseWriter, r *http.Request, status int, message string, errs []string) {
	qs, err := h.cfg.Counts(r.Context())
	if err != nil {
		h.renderError(w, r, http.StatusInternalServerError, "Counting jobs failed: "+err.Error())
		return
	}
	d := &queuesData{States: docket.JobStates(), Message: message, Errors: errs, CanPause: can(sessionOf(r.Context()).key.Role, accessAdmin)}
	for _, q := range qs {
		row := queueRow{Name: q.Name, Paused: q.Paused, Counts: map[docket.JobState]int{}}
		for st, n := range q.Counts {
			row.Counts[st] = n
			row.Total += n
		}
		d.Queues = append(d.Queues, row)
	}
	slices.SortFunc(d.Queues, func(a, b queueRow) int { return strings.Compare(a.Name, b.Name) })
	q := r.URL.Query()
	if m := q.Get("done"); message == "" && (m == "paused" || m == "resumed") && docket.CheckName("queue", q.Get("queue")) == nil {
		d.Message = "Queue " + q.Get("queue") + " " + m + "; the table catches up within 5 s."
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
			h.renderError(w, r, http.StatusInternalServerError, "Pausing or resuming failed: "+err.Error())
			return
		}
		http.Redirect(w, r, "/queues?"+url.Values{"done": {done}, "queue": {name}}.Encode(), http.StatusSeeOther)
	}
}
