package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// Bulk actions on jobs: retry or cancel a selection (the checkboxes of the
// jobs list, or of the dead letters page) or everything the list's filter
// matches. The first POST shows what would be done and asks the user to
// type the number of jobs; only a POST with that number acts. A filter
// must filter something: acting on every job is refused.
const (
	// bulkMax is the most jobs one bulk action acts on: the newest
	// bulkMax of a filter (repeat for more), or a selection of at most
	// that many.
	bulkMax = 1000
	// bulkSample is how many of the jobs the confirmation lists.
	bulkSample = 10
)

// bulkData is the bulk page's: a confirmation, or what was done.
type bulkData struct {
	Action string // "retry" or "cancel"
	Scope  string // "selected" or "filter"
	IDs    []string
	// The filter as typed (scope filter).
	State, Type, Queue, Args string
	Count                    int // how many jobs the action is on
	// Set fingerprints the ids a filter matched when the confirmation was
	// shown: a confirmation acts only on that same set (at the bulkMax
	// cap the count alone cannot tell that newer jobs took older ones'
	// places).
	Set    string
	More   bool // the filter matches more than bulkMax
	Sample []*docket.JobRow
	Errors []string // each naming its field
	Result *bulkResult
	Back   string // the jobs list this came from
}

// bulkResult is what a bulk action did.
type bulkResult struct {
	Done      int // changed
	Unchanged int // already in the wanted state (retry of a waiting job, cancel of a canceled one)
	Refused   int // not allowed in its state (retry of a SUCCESS job)
	Missing   int // deleted meanwhile
	Failed    int // another error
	Notes     []string
}

// parseBulkForm reads a bulk action's form: d as typed, with every
// problem an entry of d.Errors naming its field; the selected ids (scope
// selected: 1 to bulkMax distinct job ids), or the list parameters of the
// filter (scope filter: a filter that filters something, p.Limit
// bulkMax). An empty filter is a problem: a bulk action never acts on
// every job.
func parseBulkForm(f url.Values) (d *bulkData, ids []uuid.UUID, p *docket.ListParams) {
	d = &bulkData{Action: f.Get("action"), Scope: f.Get("scope"),
		State: f.Get("state"), Type: strings.TrimSpace(f.Get("type")), Queue: strings.TrimSpace(f.Get("queue")),
		Args: strings.TrimSpace(f.Get("args"))}
	d.Back = "/jobs"
	if q := bulkFilterQuery(d); len(q) > 0 {
		d.Back += "?" + q.Encode()
	}
	if d.Action != "retry" && d.Action != "cancel" {
		d.Errors = append(d.Errors, "action: must be retry or cancel")
	}
	switch d.Scope {
	case "selected":
		d.IDs = f["id"]
		seen := map[uuid.UUID]bool{}
		for _, s := range d.IDs {
			id, err := uuid.Parse(s)
			if err != nil || id == uuid.Nil {
				d.Errors = append(d.Errors, "id: "+strconv.Quote(s)+" is not a job id")
				continue
			}
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		if len(d.IDs) == 0 {
			d.Errors = append(d.Errors, "id: select at least one job")
		}
		if len(d.IDs) > bulkMax {
			d.Errors = append(d.Errors, fmt.Sprintf("id: at most %d jobs at once", bulkMax))
		}
	case "filter":
		if d.State == "" && d.Type == "" && d.Queue == "" && d.Args == "" {
			d.Errors = append(d.Errors, "filter: refusing to act on every job; filter by state, type, queue or args first")
			break
		}
		jd, lp, _ := parseJobsQuery(bulkFilterQuery(d))
		d.Errors = append(d.Errors, jd.Errors...)
		lp.Limit = bulkMax
		p = &lp
	default:
		d.Errors = append(d.Errors, "scope: must be selected or filter")
	}
	if len(d.Errors) > 0 {
		return d, nil, nil
	}
	return d, ids, p
}

func (h *Handler) jobsBulk(w http.ResponseWriter, r *http.Request) {
	f := r.PostForm
	d, ids, p := parseBulkForm(f)
	if msg := argsRefused(sessionOf(r.Context()).key.Role, d.Args); msg != "" {
		d.Errors = []string{msg}
		h.renderPageStatus(w, r, http.StatusForbidden, "bulk", "Bulk action", d)
		return
	}
	do := h.client.Retry
	if d.Action == "cancel" {
		do = h.client.Cancel
	}
	if p != nil {
		lctx, cancel := context.WithTimeout(r.Context(), dashboardTimeout)
		rows, err := h.client.List(lctx, *p)
		cancel()
		if err != nil {
			h.renderFailure(w, r, "Listing the jobs failed", err)
			return
		}
		d.More = len(rows) == bulkMax
		for _, row := range rows {
			ids = append(ids, row.ID)
		}
		d.Sample = rows[:min(len(rows), bulkSample)]
	}
	if len(d.Errors) > 0 {
		h.renderPageStatus(w, r, http.StatusBadRequest, "bulk", "Bulk action", d)
		return
	}
	d.Count = len(ids)
	if p != nil {
		d.Set = idSetFingerprint(ids)
	}
	switch confirm := strings.TrimSpace(f.Get("confirm")); {
	case d.Count == 0 || confirm == "":
		h.renderPage(w, r, "bulk", "Confirm", d)
		return
	case confirm == strconv.Itoa(d.Count) && p != nil && f.Get("set") != d.Set:
		d.Errors = append(d.Errors, fmt.Sprintf("confirm: the filter now matches other jobs than the %d confirmed: check and confirm again", d.Count))
		h.renderPageStatus(w, r, http.StatusConflict, "bulk", "Confirm", d)
		return
	case confirm == strconv.Itoa(d.Count):
	case confirm == f.Get("expect"):
		d.Errors = append(d.Errors, fmt.Sprintf("confirm: the filter now matches %d jobs, not %s: check and confirm again", d.Count, confirm))
		h.renderPageStatus(w, r, http.StatusConflict, "bulk", "Confirm", d)
		return
	default:
		d.Errors = append(d.Errors, fmt.Sprintf("confirm: type %d to confirm", d.Count))
		h.renderPageStatus(w, r, http.StatusBadRequest, "bulk", "Confirm", d)
		return
	}
	d.Result = h.bulkDo(r.Context(), d.Action, ids, do)
	h.renderPage(w, r, "bulk", "Bulk "+d.Action, d)
}

// bulkDo acts on each job through the Client, as the job page does, and
// counts the outcomes.
func (h *Handler) bulkDo(ctx context.Context, action string, ids []uuid.UUID, do func(context.Context, uuid.UUID) (*docket.JobRow, error)) *bulkResult {
	res := &bulkResult{}
	note := func(id uuid.UUID, err error) {
		if len(res.Notes) < bulkSample {
			res.Notes = append(res.Notes, id.String()+": "+err.Error())
		}
	}
	for _, id := range ids {
		before, err := h.client.Get(ctx, id)
		if err == nil {
			var after *docket.JobRow
			after, err = do(ctx, id)
			if err == nil && (after.State != before.State || after.CancelRequested != before.CancelRequested) {
				res.Done++
				continue
			}
			if err == nil {
				res.Unchanged++
				continue
			}
		}
		var inv *docket.InvalidTransitionError
		switch {
		case errors.Is(err, docket.ErrNotFound):
			res.Missing++
		case errors.As(err, &inv), errors.Is(err, docket.ErrRunConflict): // a step's job: its run is retried
			res.Refused++
			note(id, err)
		default:
			res.Failed++
			note(id, err)
			h.cfg.Logger.Warn("web: bulk "+action+" of a job failed", "job", id, "error", err)
		}
	}
	return res
}

// bulkFilterQuery is d's filter as the jobs list's query.
func bulkFilterQuery(d *bulkData) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"state": d.State, "type": d.Type, "queue": d.Queue, "args": d.Args} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// Filtered reports whether the list is filtered (a bulk action on
// everything it shows is offered only then).
func (d *jobsData) Filtered() bool {
	return d.State != "" || d.Type != "" || d.Queue != "" || d.Args != ""
}

// idSetFingerprint is a short hash of ids in their order (the newest
// first, as the list gives them).
func idSetFingerprint(ids []uuid.UUID) string {
	h := sha256.New()
	for _, id := range ids {
		h.Write(id[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
