package web

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/crowdexport"
)

// poolResults streams GET /pools/{id}/results?format=jsonl|csv: the
// results of the pool's finalized regular units, newest first, written by
// crowdexport as the API's export is (one page of units in memory at a
// time), under the session instead of an API key.
func (h *Handler) poolResults(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "Not a pool id: "+r.PathValue("id"))
		return
	}
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "jsonl"
	}
	if format != "jsonl" && format != "csv" {
		h.renderError(w, r, http.StatusBadRequest, "format: must be jsonl or csv, not "+strconv.Quote(format))
		return
	}
	if _, err := h.client.PoolGet(r.Context(), id); errors.Is(err, docket.ErrNotFound) {
		h.renderError(w, r, http.StatusNotFound, "No pool "+id.String()+".")
		return
	} else if err != nil {
		h.renderFailure(w, r, "Reading the pool failed", err)
		return
	}
	w.Header().Set("Content-Disposition", `attachment; filename="pool-`+id.String()+`-results.`+format+`"`)
	w.Header().Set("Cache-Control", "no-store")
	if err := crowdexport.Write(r.Context(), w, h.client, id, format); err != nil {
		// The status is sent: the download just ends early.
		h.cfg.Logger.Error("export results failed", "pool", id, "error", err)
	}
}
