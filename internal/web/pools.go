package web

import (
	"context"
	"errors"
	"net/http"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// poolRow is a pool with its progress: regular units final (FINALIZED or
// CANCELED) of all, from the pool's counters (no count query).
type poolRow struct {
	*docket.Pool
	Units, Done int
	Max         int // of the progress bar: Units, at least 1
}

func poolRowOf(p *docket.Pool) poolRow {
	c := p.Counts
	return poolRow{Pool: p, Units: c.New + c.Judgable + c.Paused + c.Finalized + c.Canceled, Done: c.Finalized + c.Canceled, Max: max(1, c.New+c.Judgable+c.Paused+c.Finalized+c.Canceled)}
}

// poolsData is the pools list's.
type poolsData struct {
	Pools  []poolRow
	Errors []string
	Next   string
}

func (h *Handler) poolsList(w http.ResponseWriter, r *http.Request) {
	d := &poolsData{}
	p := docket.PoolListParams{Limit: pageSize + 1}
	if c := r.URL.Query().Get("cursor"); c != "" {
		id, ok := decodeCursor(c)
		if !ok {
			d.Errors = append(d.Errors, "cursor: not a cursor this page made")
			h.renderPageStatus(w, r, http.StatusBadRequest, "pools", "Pools", d)
			return
		}
		p.Before = id
	}
	pools, err := h.client.PoolList(r.Context(), p)
	if err != nil {
		h.renderFailure(w, r, "Listing pools failed", err)
		return
	}
	if len(pools) > pageSize {
		pools = pools[:pageSize]
		d.Next = nextURL("/pools", nil, pools[pageSize-1].ID)
	}
	for _, p := range pools {
		d.Pools = append(d.Pools, poolRowOf(p))
	}
	h.renderPage(w, r, "pools", "Pools", d)
}

// poolData is a pool page's: its counters, its newest units, and the
// status changes an admin may make.
type poolData struct {
	Pool                          poolRow
	Units                         []*docket.Unit
	Message                       string
	Stats                         *poolStats // nil when StatsError says why
	StatsError                    string
	Quality                       *qualityPanel // nil when QualityError says why
	QualityError                  string
	CanPause, CanResume, CanClose bool
}

// poolUnits is how many of the newest units the pool page lists.
const poolUnits = 20

func (h *Handler) poolDetail(w http.ResponseWriter, r *http.Request) {
	h.showPool(w, r, http.StatusOK, "")
}

func (h *Handler) showPool(w http.ResponseWriter, r *http.Request, status int, message string) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "Not a pool id: "+r.PathValue("id"))
		return
	}
	p, err := h.client.PoolGet(r.Context(), id)
	if errors.Is(err, docket.ErrNotFound) {
		h.renderError(w, r, http.StatusNotFound, "No pool "+id.String()+".")
		return
	}
	if err != nil {
		h.renderFailure(w, r, "Reading the pool failed", err)
		return
	}
	units, err := h.client.UnitList(r.Context(), id, docket.UnitListParams{Limit: poolUnits})
	if err != nil {
		h.renderFailure(w, r, "Listing the units failed", err)
		return
	}
	if done := r.URL.Query().Get("done"); message == "" && (done == "pause" || done == "resume" || done == "close") {
		// poolAction's redirect names what it did by code: no link puts
		// words on the page.
		message = done + " done: the pool is " + string(p.Status)
	}
	d := &poolData{Pool: poolRowOf(p), Units: units, Message: message}
	if d.Stats, err = h.loadStats(r.Context(), p, h.cfg.Now()); err != nil {
		d.StatsError = err.Error()
	}
	if d.Quality, err = h.loadQuality(r.Context(), p, d.Stats); err != nil {
		d.QualityError = err.Error()
	}
	if can(sessionOf(r.Context()).key.Role, accessAdmin) {
		d.CanPause = p.Status == docket.PoolOpen
		d.CanResume = p.Status == docket.PoolPaused
		d.CanClose = p.Status == docket.PoolOpen || p.Status == docket.PoolPaused
	}
	h.renderPageStatus(w, r, status, "pool", "Pool "+p.Workflow+"/"+p.Step, d)
}

// poolAction is a POST /pools/{id}/{verb} handler (admin): a refused
// change (a pool in another status) is shown on the page with 409.
func (h *Handler) poolAction(verb string, do func(*docket.Client, context.Context, uuid.UUID) (*docket.Pool, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(r.PathValue("id"))
		if err != nil {
			h.renderError(w, r, http.StatusNotFound, "Not a pool id: "+r.PathValue("id"))
			return
		}
		_, err = do(h.client, r.Context(), id)
		var tr *docket.CrowdTransitionError
		switch {
		case errors.Is(err, docket.ErrNotFound):
			h.renderError(w, r, http.StatusNotFound, "No pool "+id.String()+".")
		case errors.As(err, &tr):
			h.showPool(w, r, http.StatusConflict, "Cannot "+verb+": "+err.Error())
		case err != nil:
			h.renderFailure(w, r, verb+" failed", err)
		default:
			http.Redirect(w, r, "/pools/"+id.String()+"?done="+verb, http.StatusSeeOther)
		}
	}
}
