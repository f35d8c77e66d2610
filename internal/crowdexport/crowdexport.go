// Package crowdexport writes the results export of a pool — the API's
// GET /v1/pools/{id}/results and the dashboard's download — so that a file
// fetched with a key and one saved from the dashboard are the same, byte
// for byte, on every backend.
package crowdexport

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// page is how many units the export reads per query.
const page = 1000

// Result is a unit's aggregated answer, the body of GET
// /v1/units/{id}/result: result, confidence and finalizedAt are null until
// the unit is FINALIZED, lowConfidence says the confidence is under the
// task's target (docket.Unit.LowConfidence).
type Result struct {
	UnitID        uuid.UUID       `json:"unitId"`
	State         string          `json:"state"`
	Result        json.RawMessage `json:"result"`
	Confidence    *float64        `json:"confidence"`
	LowConfidence bool            `json:"lowConfidence"`
	JudgmentCount int             `json:"judgmentCount"`
	FinalizedAt   *time.Time      `json:"finalizedAt"`
}

// ResultOf is u's Result.
func ResultOf(u *docket.Unit) Result {
	r := Result{UnitID: u.ID, State: string(u.State), Result: u.Result, Confidence: u.Confidence,
		LowConfidence: u.LowConfidence, JudgmentCount: u.JudgmentCount}
	if len(r.Result) == 0 {
		r.Result = json.RawMessage("null")
	}
	if !u.FinalizedAt.IsZero() {
		t := u.FinalizedAt.UTC()
		r.FinalizedAt = &t
	}
	return r
}

// Line is one JSON line of the export: the unit's Result, its run and
// its input.
type Line struct {
	Result
	RunID *uuid.UUID      `json:"runId"`
	Input json.RawMessage `json:"input"`
}

// LineOf is u's line.
func LineOf(u *docket.Unit) Line {
	l := Line{Result: ResultOf(u), Input: u.Input}
	if u.RunID != uuid.Nil {
		l.RunID = &u.RunID
	}
	return l
}

// header is the CSV export's first row.
var header = []string{"unitId", "runId", "state", "result", "confidence", "judgmentCount", "finalizedAt", "lowConfidence"}

// record is u's CSV row. The result is compact JSON text, as the JSON
// lines have it: PostgreSQL's jsonb spells it with a space after each
// colon and comma, SQLite keeps what was written. buf is reused.
func record(u *docket.Unit, buf *bytes.Buffer) []string {
	conf, run := "", ""
	if u.Confidence != nil {
		conf = strconv.FormatFloat(*u.Confidence, 'g', -1, 64)
	}
	if u.RunID != uuid.Nil {
		run = u.RunID.String()
	}
	buf.Reset()
	if err := json.Compact(buf, u.Result); err != nil {
		buf.Reset()
		buf.Write(u.Result)
	}
	return []string{u.ID.String(), run, string(u.State), buf.String(), conf,
		strconv.Itoa(u.JudgmentCount), u.FinalizedAt.UTC().Format(time.RFC3339Nano), strconv.FormatBool(u.LowConfidence)}
}

// Write streams the results of pool's finalized regular units, newest
// first, to w in format (jsonl or csv, checked by the caller): JSON lines
// or CSV with a header row. It sets the content type and sends 200 first
// (the caller sets any other header before), then pages through the units
// by id, so it holds one page in memory whatever the pool's size. A
// listing that fails after the status is sent ends the stream early; its
// error is returned for the caller to log. A client that goes away ends it
// with a nil error.
func Write(ctx context.Context, w http.ResponseWriter, c *docket.Client, pool uuid.UUID, format string) error {
	regular := false
	p := docket.UnitListParams{States: []docket.UnitState{docket.UnitFinalized}, Golden: &regular, Limit: page}
	var (
		cw  *csv.Writer
		enc *json.Encoder
		buf bytes.Buffer
	)
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		cw = csv.NewWriter(w)
		_ = cw.Write(header)
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc = json.NewEncoder(w)
		enc.SetEscapeHTML(false)
	}
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	for {
		units, err := c.UnitList(ctx, pool, p)
		if err != nil {
			return err
		}
		for _, u := range units {
			if cw != nil {
				if cw.Write(record(u, &buf)) != nil {
					return nil // the client is gone: read no more pages
				}
			} else if enc.Encode(LineOf(u)) != nil {
				return nil
			}
		}
		if cw != nil {
			if cw.Flush(); cw.Error() != nil {
				return nil
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
		if len(units) < page {
			return nil
		}
		p.Before = units[len(units)-1].ID
	}
}
