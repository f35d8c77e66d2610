package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// The dead letters page: DEAD jobs (newest first, filtered by queue and
// type, paged with the jobs list's cursor) with a retry of a selection or
// of every DEAD job matching a non-empty filter after a typed
// confirmation; and, for admin keys (as GET /v1/dead-letters), the events
// durable consumers gave up on, each retried with Client.DeadLetterRetry.

// Limits of a bulk retry.
const (
	// retryBatch is how many DEAD jobs one read of a filtered retry takes.
	retryBatch = 500
	// retryMax is the most jobs one filtered retry retries; past it the
	// page says more remain (post again).
	retryMax = 5000
	// deadEvents is how many event dead letters a page lists (and the
	// most one retry form takes).
	deadEvents = pageSize
	// retryConfirm is the word a filtered retry must be confirmed with.
	retryConfirm = "retry"
)

// deadData is the dead letters page's.
type deadData struct {
	Queue, Type string
	Errors      []string
	Jobs        []*docket.JobRow
	// Next and First page the DEAD jobs (First: on a later page); the
	// events' cursor is kept.
	Next, First string
	// Events are the consumers' dead letters (admin only), a page of
	// them; EventsShown says they were read. EventsNext and EventsFirst
	// page them, the jobs' cursor kept.
	Events                  []*docket.DeadLetter
	EventsShown             bool
	EventsNext, EventsFirst string
	// cursor and events are the query's cursors, as given.
	cursor, events string
	eventsAfter    *docket.DeadLetter
	// Deliveries are the webhooks' DEAD deliveries (admin, with
	// Config.Webhooks; deadhooks.go); DeliveriesMore: some webhook has
	// more than listed.
	Deliveries      []deadDelivery
	DeliveriesShown bool
	DeliveriesMore  bool
	Message         string
	// Filtered: a queue or a type filters the list, so every match may be
	// retried at once.
	Filtered bool
}

// deadQuery reads the page's query: the filter and the cursor, each bad
// value an entry of d.Errors naming its field.
func deadQuery(q url.Values) (*deadData, docket.ListParams) {
	d := &deadData{Queue: strings.TrimSpace(q.Get("queue")), Type: strings.TrimSpace(q.Get("type"))}
	p := docket.ListParams{States: []docket.JobState{docket.JobStateDead}, Limit: pageSize + 1}
	if d.Queue != "" {
		p.Queues = []string{d.Queue}
	}
	if d.Type != "" {
		p.Types = []string{d.Type}
	}
	d.Filtered = d.Queue != "" || d.Type != ""
	if c := q.Get("cursor"); c != "" {
		id, ok := decodeCursor(c)
		if !ok {
			d.Errors = append(d.Errors, "cursor: not a cursor this page made")
		}
		p.Before, d.cursor = id, c
	}
	if c := q.Get("events"); c != "" {
		after, ok := docket.ParseDeadLetterCursor(c)
		if !ok {
			d.Errors = append(d.Errors, "events: not a cursor this page made")
		}
		d.eventsAfter, d.events = after, c
	}
	return d, p
}

// deadURL is the page's URL with the filter and the given cursors (each
// left out when empty).
func deadURL(d *deadData, cursor, events string) string {
	q := url.Values{}
	for k, v := range map[string]string{"queue": d.Queue, "type": d.Type, "cursor": cursor, "events": events} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if len(q) == 0 {
		return "/dead"
	}
	return "/dead?" + q.Encode()
}

func (h *Handler) deadList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d, p := deadQuery(q)
	if n, err := strconv.Atoi(q.Get("retried")); err == nil && n >= 0 {
		d.Message = "Retried " + strconv.Itoa(n) + " DEAD jobs: they are back in their queues."
		if s, err := strconv.Atoi(q.Get("skipped")); err == nil && s > 0 {
			d.Message += " Skipped " + strconv.Itoa(s) + " workflow step jobs: a step's job is not retried on its own; retry its run, on the run's page (a FAILED run; a CANCELED one is not retried)."
		}
		if q.Get("more") == "1" {
			d.Message += " More match the filter: retry again for the next " + strconv.Itoa(retryMax) + "."
		}
	}
	if n, err := strconv.Atoi(q.Get("requested")); err == nil && n >= 0 {
		d.Message = "Retry requested for " + strconv.Itoa(n) + " events: their consumers take them up."
	}
	if n, err := strconv.Atoi(q.Get("redelivered")); err == nil && n >= 0 {
		d.Message = strconv.Itoa(n) + " webhook deliveries are due again now."
	}
	h.showDead(w, r, d, p)
}

func (h *Handler) showDead(w http.ResponseWriter, r *http.Request, d *deadData, p docket.ListParams) {
	if len(d.Errors) > 0 {
		h.renderPageStatus(w, r, http.StatusBadRequest, "dead", "Dead letters", d)
		return
	}
	h.showDeadStatus(w, r, http.StatusOK, d, p)
}

// showDeadStatus renders the page with status, d.Errors shown.
func (h *Handler) showDeadStatus(w http.ResponseWriter, r *http.Request, status int, d *deadData, p docket.ListParams) {
	ctx, cancel := context.WithTimeout(r.Context(), dashboardTimeout)
	defer cancel()
	rows, err := h.client.List(ctx, p)
	if err != nil {
		h.renderFailure(w, r, "Listing DEAD jobs failed", err)
		return
	}
	if len(rows) > pageSize {
		rows = rows[:pageSize]
		d.Next = deadURL(d, encodeCursor(rows[pageSize-1].ID), d.events)
	}
	if d.cursor != "" {
		d.First = deadURL(d, "", d.events)
	}
	d.Jobs = rows
	if sessionOf(r.Context()).key.Role == docket.RoleAdmin {
		// One more than the page tells whether there is a next page.
		events, err := h.client.DeadLetterList(ctx, docket.DeadLetterListParams{Limit: deadEvents + 1, After: d.eventsAfter})
		if err != nil {
			h.renderFailure(w, r, "Listing dead letters failed", err)
			return
		}
		if len(events) > deadEvents {
			events = events[:deadEvents]
			d.EventsNext = deadURL(d, d.cursor, docket.DeadLetterCursor(events[deadEvents-1]))
		}
		if d.events != "" {
			d.EventsFirst = deadURL(d, d.cursor, "")
		}
		d.Events, d.EventsShown = events, true
		if h.cfg.Webhooks != nil {
			if d.Deliveries, d.DeliveriesMore, err = h.deadDeliveries(ctx); err != nil {
				h.renderFailure(w, r, "Listing webhook deliveries failed", err)
				return
			}
			d.DeliveriesShown = true
		}
	}
	h.renderPageStatus(w, r, status, "dead", "Dead letters", d)
}

// deadRetry is a bulk retry as posted: the selected job ids, or (Filtered)
// every DEAD job of the queue and type.
type deadRetry struct {
	IDs         []uuid.UUID
	Filtered    bool
	Queue, Type string
}

// parseDeadRetry reads a bulk retry form: scope "selected" with one id per
// ticked job (at most a page of them, each a UUID), or scope "filter" with
// a non-empty filter (queue or type) confirmed by typing retryConfirm.
// Every problem is an entry naming its field.
func parseDeadRetry(form url.Values) (*deadRetry, []string) {
	var errs []string
	dr := &deadRetry{Queue: strings.TrimSpace(form.Get("queue")), Type: strings.TrimSpace(form.Get("type"))}
	switch form.Get("scope") {
	case "selected":
		ids := form["id"]
		if len(ids) == 0 {
			errs = append(errs, "id: tick at least one job")
		}
		if len(ids) > pageSize {
			errs = append(errs, "id: at most "+strconv.Itoa(pageSize)+" jobs at once; retry a filter for more")
		}
		seen := map[uuid.UUID]bool{}
		for _, s := range ids {
			id, err := uuid.Parse(s)
			if err != nil || id == uuid.Nil || len(s) != 36 {
				errs = append(errs, "id: not a job id: "+strconv.Quote(s))
				break
			}
			if !seen[id] {
				seen[id] = true
				dr.IDs = append(dr.IDs, id)
			}
		}
	case "filter":
		dr.Filtered = true
		if dr.Queue == "" && dr.Type == "" {
			errs = append(errs, "filter: filter by a queue or a type first; an empty filter is refused")
		}
		if strings.TrimSpace(strings.ToLower(form.Get("confirm"))) != retryConfirm {
			errs = append(errs, "confirm: type "+retryConfirm+" to retry every DEAD job the filter matches")
		}
	default:
		errs = append(errs, "scope: must be selected or filter")
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return dr, nil
}

// deadRetryPost retries the selection or the filter, then shows the page
// saying how many jobs went back to their queues.
func (h *Handler) deadRetryPost(w http.ResponseWriter, r *http.Request) {
	dr, errs := parseDeadRetry(r.PostForm)
	if errs != nil {
		d, p := deadQuery(url.Values{"queue": {r.PostForm.Get("queue")}, "type": {r.PostForm.Get("type")}})
		d.Errors = errs
		rows, err := h.client.List(r.Context(), p)
		if err == nil {
			d.Jobs = rows[:min(len(rows), pageSize)]
		}
		h.renderPageStatus(w, r, http.StatusBadRequest, "dead", "Dead letters", d)
		return
	}
	n, skipped, more, err := h.retryDead(r.Context(), dr)
	if err != nil {
		h.renderFailure(w, r, "Retrying failed after "+strconv.Itoa(n)+" jobs", err)
		return
	}
	q := url.Values{"retried": {strconv.Itoa(n)}}
	if skipped > 0 {
		q.Set("skipped", strconv.Itoa(skipped))
	}
	if dr.Queue != "" {
		q.Set("queue", dr.Queue)
	}
	if dr.Type != "" {
		q.Set("type", dr.Type)
	}
	if more {
		q.Set("more", "1")
	}
	http.Redirect(w, r, "/dead?"+q.Encode(), http.StatusSeeOther)
}

// retryDead retries the jobs of dr with Client.Retry, one at a time (the
// same call as a job page's Retry); a job no longer DEAD is left as it is.
// A workflow step's job is refused (its run is retried): skipped counts
// them. A filtered retry reads DEAD jobs in batches, newest first, each
// batch after the last (so it ends even if a retry changes nothing), up
// to retryMax; more reports that some may remain.
func (h *Handler) retryDead(ctx context.Context, dr *deadRetry) (n, skipped int, more bool, err error) {
	retry := func(row *docket.JobRow) error {
		if row.State != docket.JobStateDead {
			return nil
		}
		_, err := h.client.Retry(ctx, row.ID)
		var inv *docket.InvalidTransitionError
		if errors.As(err, &inv) || errors.Is(err, docket.ErrNotFound) {
			return nil // it moved meanwhile
		}
		if errors.Is(err, docket.ErrRunConflict) {
			skipped++ // a step's job: its run is retried, not the job
			return nil
		}
		if err == nil {
			n++
		}
		return err
	}
	if !dr.Filtered {
		for _, id := range dr.IDs {
			row, err := h.client.Get(ctx, id)
			if errors.Is(err, docket.ErrNotFound) {
				continue
			}
			if err != nil {
				return n, skipped, false, err
			}
			if err := retry(row); err != nil {
				return n, skipped, false, err
			}
		}
		return n, skipped, false, nil
	}
	p := docket.ListParams{States: []docket.JobState{docket.JobStateDead}, Limit: retryBatch}
	if dr.Queue != "" {
		p.Queues = []string{dr.Queue}
	}
	if dr.Type != "" {
		p.Types = []string{dr.Type}
	}
	for seen := 0; ; {
		rows, err := h.client.List(ctx, p)
		if err != nil {
			return n, skipped, false, err
		}
		for _, row := range rows {
			if seen == retryMax {
				return n, skipped, true, nil
			}
			seen++
			if err := retry(row); err != nil {
				return n, skipped, false, err
			}
		}
		if len(rows) < retryBatch {
			return n, skipped, false, nil
		}
		p.Before = rows[len(rows)-1].ID
	}
}

// parseEventRefs reads the ticked event dead letters: each value is the
// consumer and the event id, path-escaped and joined by "/". At most
// deadEvents; every problem names the field.
func parseEventRefs(form url.Values) ([][2]string, []string) {
	vals := form["event"]
	if len(vals) == 0 {
		return nil, []string{"event: tick at least one event"}
	}
	if len(vals) > deadEvents {
		return nil, []string{"event: at most " + strconv.Itoa(deadEvents) + " at once"}
	}
	var out [][2]string
	for _, v := range vals {
		c, e, ok := strings.Cut(v, "/")
		consumer, err1 := url.PathUnescape(c)
		event, err2 := url.PathUnescape(e)
		if !ok || err1 != nil || err2 != nil || consumer == "" || event == "" {
			return nil, []string{"event: not an event of this page: " + strconv.Quote(v)}
		}
		out = append(out, [2]string{consumer, event})
	}
	return out, nil
}

// eventRef is a dead letter's value in the page's form.
func eventRef(d *docket.DeadLetter) string {
	return url.PathEscape(d.Consumer) + "/" + url.PathEscape(d.EventID)
}

// deadEventsRetry asks the consumers to handle the ticked events again
// (admin, as POST /v1/dead-letters/{consumer}/{eventId}/retry).
func (h *Handler) deadEventsRetry(w http.ResponseWriter, r *http.Request) {
	refs, errs := parseEventRefs(r.PostForm)
	if errs != nil {
		d, p := deadQuery(url.Values{})
		d.Errors = errs
		rows, err := h.client.List(r.Context(), p)
		if err == nil {
			d.Jobs = rows[:min(len(rows), pageSize)]
		}
		h.renderPageStatus(w, r, http.StatusBadRequest, "dead", "Dead letters", d)
		return
	}
	n := 0
	for _, ref := range refs {
		_, err := h.client.DeadLetterRetry(r.Context(), ref[0], ref[1])
		switch {
		case errors.Is(err, docket.ErrNotFound):
			// handled meanwhile
		case err != nil:
			h.renderFailure(w, r, "Retrying an event failed", err)
			return
		default:
			n++
		}
	}
	http.Redirect(w, r, "/dead?requested="+strconv.Itoa(n), http.StatusSeeOther)
}
