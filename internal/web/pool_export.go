package web

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// exportPage is how many units an export reads per query, as the API's.
const exportPage = 1000

// exportLine is one JSON line of an export: the fields and names of the
// API's GET /v1/pools/{id}/results?format=jsonl, so that a file saved from
// the dashboard and one fetched with a key are the same.
type exportLine struct {
	UnitID        uuid.UUID       `json:"unitId"`
	State         string          `json:"state"`
	Result        json.RawMessage `json:"result"`
	Confidence    *float64        `json:"confidence"`
	LowConfidence bool            `json:"lowConfidence"`
	JudgmentCount int             `json:"judgmentCount"`
	FinalizedAt   *time.Time      `json:"finalizedAt"`
	RunID         *uuid.UUID      `json:"runId"`
	Input         json.RawMessage `json:"input"`
}

// poolResults streams GET /pools/{id}/results?format=jsonl|csv: the
// results of the pool's finalized regular units, newest first, as the
// API's export does (one page of units in memory at a time), under the
// session instead of an API key.
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
		h.renderError(w, r, http.StatusInternalServerError, "Reading the pool failed: "+err.Error())
		return
	}
	regular := false
	p := docket.UnitListParams{States: []docket.UnitState{docket.UnitFinalized}, Golden: &regular, Limit: exportPage}
	var cw *csv.Writer
	var enc *json.Encoder
	name := "pool-" + id.String() + "-results." + format
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		cw = csv.NewWriter(w)
		_ = cw.Write([]string{"unitId", "runId", "state", "result", "confidence", "judgmentCount", "finalizedAt", "lowConfidence"})
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc = json.NewEncoder(w)
		enc.SetEscapeHTML(false)
	}
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	for {
		units, err := h.client.UnitList(r.Context(), id, p)
		if err != nil {
			// The status is sent: the download just ends early.
			h.cfg.Logger.Error("export results failed", "pool", id, "error", err)
			return
		}
		for _, u := range units {
			if cw != nil {
				if cw.Write(csvRecord(u)) != nil {
					return // the client is gone: read no more pages
				}
				continue
			}
			if enc.Encode(lineOf(u)) != nil {
				return
			}
		}
		if cw != nil {
			if cw.Flush(); cw.Error() != nil {
				return
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
		if len(units) < exportPage {
			return
		}
		p.Before = units[len(units)-1].ID
	}
}

func lineOf(u *docket.Unit) exportLine {
	l := exportLine{UnitID: u.ID, State: string(u.State), Result: u.Result, Confidence: u.Confidence, LowConfidence: u.LowConfidence,
		JudgmentCount: u.JudgmentCount, Input: u.Input}
	if len(l.Result) == 0 {
		l.Result = json.RawMessage("null")
	}
	if !u.FinalizedAt.IsZero() {
		t := u.FinalizedAt.UTC()
		l.FinalizedAt = &t
	}
	if u.RunID != uuid.Nil {
		l.RunID = &u.RunID
	}
	return l
}

func csvRecord(u *docket.Unit) []string {
	conf, run := "", ""
	if u.Confidence != nil {
		conf = strconv.FormatFloat(*u.Confidence, 'g', -1, 64)
	}
	if u.RunID != uuid.Nil {
		run = u.RunID.String()
	}
	return []string{u.ID.String(), run, string(u.State), string(u.Result), conf,
		strconv.Itoa(u.JudgmentCount), u.FinalizedAt.UTC().Format(time.RFC3339Nano), strconv.FormatBool(u.LowConfidence)}
}
