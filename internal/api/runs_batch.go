package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// Body formats of POST /v1/workflows/{name}/runs:batch.
const (
	batchJSON  = "application/json"     // {"runs": [{input, idempotencyKey, version}, …]}
	batchJSONL = "application/x-ndjson" // one run object a line
	batchCSV   = "text/csv"             // a header, then one run a row: the input object keyed by the header
)

// batchRun is one run of a batch, decoded and checked.
type batchRun struct {
	input   json.RawMessage
	key     string
	version int
	bad     bool // did not decode: its problems are recorded
}

// runBatchResponse is the answer to a runs batch: one item per run, in
// the order of the body.
type runBatchResponse struct {
	Workflow string `json:"workflow"`
	// Started counts the runs started by this request, Existing those
	// whose idempotency key named a run that existed already.
	Started  int             `json:"started"`
	Existing int             `json:"existing"`
	Items    []*runBatchItem `json:"items"`
}

type runBatchItem struct {
	Index    int             `json:"index"`
	RunID    uuid.UUID       `json:"runId"`
	Status   docket.RunState `json:"status"`
	Existing bool            `json:"existing"`
}

// startRunBatch serves POST /v1/workflows/{name}/runs:batch: many runs of
// one workflow, as a JSON object, JSON lines or CSV. Every run is decoded
// and checked before any is written: one bad run is a 400 naming every bad
// run by index and field (runs[12].input), and nothing is started. Then
// the runs are started in transactions of runChunk runs, in order.
func (s *Server) startRunBatch(w http.ResponseWriter, r *http.Request) {
	resp, err := s.runBatch(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, resp)
}

func (s *Server) runBatch(w http.ResponseWriter, r *http.Request) (*runBatchResponse, error) {
	name := r.PathValue("name")
	q, errs := query(r)
	if r.Header.Get(idempotencyHeader) != "" {
		errs = append(errs, FieldError{Field: idempotencyHeader, Message: "is not supported on a batch; give each run its idempotencyKey (CSV: ?keyColumn=)"})
	}
	version := 0
	if q.Has("version") {
		n, err := strconv.Atoi(q.Get("version"))
		if err != nil || n < 1 {
			errs = append(errs, FieldError{Field: "version", Message: "must be an integer of at least 1 (omit it for the latest version)"})
		}
		version = n
	}
	if err := refuseContentEncoding(w, r); err != nil {
		return nil, err
	}
	format, ferr := batchFormat(r.Header.Get("Content-Type"))
	keyColumn := q.Get("keyColumn")
	if q.Has("keyColumn") && ferr == nil && format != batchCSV {
		errs = append(errs, FieldError{Field: "keyColumn", Message: "applies to text/csv bodies only; JSON runs carry their idempotencyKey"})
	}
	if err := queryErrors(errs); err != nil {
		return nil, err
	}
	if ferr != nil {
		return nil, ferr
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBatchBytes)
	if err := docket.ValidateRunStart(docket.RunStartParams{Workflow: name}); err != nil {
		return nil, err
	}
	runs, err := decodeRunBatch(format, body, keyColumn, version, s.cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	// The workflow and every version named exist? Asked before anything
	// is written: the first chunk, one transaction, would say so for its
	// own runs only, after which a later run naming a version that does
	// not exist failed the batch with 1,000 runs started.
	if err := s.checkBatchVersions(r.Context(), name, runs); err != nil {
		return nil, err
	}
	resp := &runBatchResponse{Workflow: name, Items: make([]*runBatchItem, 0, len(runs))}
	for start := 0; start < len(runs); start += runChunk {
		chunk := runs[start:min(start+runChunk, len(runs))]
		params := make([]docket.RunStartParams, len(chunk))
		for i, run := range chunk {
			params[i] = docket.RunStartParams{Workflow: name, Input: run.input, Opts: &docket.RunStartOpts{IdempotencyKey: run.key, Version: run.version}}
		}
		res, err := s.client.RunStartMany(r.Context(), params)
		if err != nil {
			err = runProblem(err, name, version)
			if start > 0 {
				return nil, batchPartial(err, start, runs)
			}
			return nil, err
		}
		for i, rr := range res {
			resp.Items = append(resp.Items, &runBatchItem{Index: start + i, RunID: rr.Run.ID, Status: rr.Run.State, Existing: rr.Duplicate})
			if rr.Duplicate {
				resp.Existing++
			} else {
				resp.Started++
			}
		}
	}
	return resp, nil
}

// checkBatchVersions reads each version the runs name (0, the latest,
// for those that name none) once: a 404 naming the first run of a
// version that does not exist, or of a workflow that does not.
func (s *Server) checkBatchVersions(ctx context.Context, name string, runs []batchRun) error {
	seen := map[int]bool{}
	for i, run := range runs {
		if seen[run.version] {
			continue
		}
		seen[run.version] = true
		_, err := s.client.WorkflowGet(ctx, name, run.version)
		switch {
		case errors.Is(err, docket.ErrNotFound):
			p := problemFor(runProblem(docket.ErrWorkflowNotFound, name, run.version)) // RunStart's own 404
			if run.version > 0 {
				p.Detail += fmt.Sprintf(" (the version of runs[%d]); nothing was started", i)
			}
			return p
		case err != nil:
			return err
		}
	}
	return nil
}

// batchPartial is the problem of a batch whose runs before start were
// started (their chunks are committed) when err stopped the rest: it says
// which, so that a client resends the rest (or everything, with keys).
// A contention (503, Retry-After) or a full database (507) keeps its
// status, but not the detail of a single transaction ("nothing was
// written, the same request again"): here the earlier runs were written,
// and the same request again starts those without a key a second time.
// An unreachable database (503, Retry-After) may have committed the chunk
// whose connection it lost: those runs are said to be maybe not started.
func batchPartial(err error, start int, runs []batchRun) *Problem {
	p := problemFor(err)
	var why, resend string
	notStarted := "were not"
	switch {
	case docket.IsUnavailable(err):
		notStarted = "may not have been"
		why = fmt.Sprintf("the database could not be reached (runs %d to %d were being written: if the connection was lost as they committed, they were started)", start, min(start+runChunk, len(runs))-1)
		resend = fmt.Sprintf("send runs from %d on again after Retry-After (%d s)", start, p.RetryAfter)
	case errors.Is(err, docket.ErrContention):
		why = "the database could not write their transaction for a conflict with another one (on SQLite: another process held the write lock too long)"
		resend = fmt.Sprintf("send runs from %d on again after Retry-After (%d s)", start, p.RetryAfter)
	case docket.IsStorageFull(err):
		why = "the database has no room left for them"
		resend = fmt.Sprintf("send runs from %d on again once space is freed", start)
	default:
		p.Detail = fmt.Sprintf("runs 0 to %d were started; runs from %d on were not: %s", start-1, start, p.Detail)
		return p
	}
	if slices.ContainsFunc(runs, func(r batchRun) bool { return r.key == "" }) {
		resend += fmt.Sprintf("; the whole batch again would start runs 0 to %d again, as not every run has an idempotencyKey", start-1)
	} else {
		resend += ", or the whole batch: every run has an idempotencyKey, so the started ones are not started twice"
	}
	p.Detail = fmt.Sprintf("runs 0 to %d were started; runs from %d on %s: %s; %s", start-1, start, notStarted, why, resend)
	return p
}

// batchFormat reads the Content-Type of a runs batch (default JSON).
func batchFormat(ct string) (string, error) {
	if ct == "" {
		return batchJSON, nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case err != nil:
	case mt == batchJSON:
		return batchJSON, nil
	case mt == batchJSONL || mt == "application/jsonl" || mt == "application/x-jsonlines":
		return batchJSONL, nil
	case mt == batchCSV:
		return batchCSV, nil
	}
	return "", problem(http.StatusUnsupportedMediaType, "media-type", "Unsupported media type",
		"send application/json ({\"runs\": [...]}), application/x-ndjson (one run a line) or text/csv (a header, then one input a row)")
}

// batchProblems collects the problems of a batch, up to a bound.
type batchProblems struct {
	errs  []indexedError
	extra int // problems left out
}

type indexedError struct {
	index int
	FieldError
}

func (b *batchProblems) add(index int, fe ...FieldError) {
	for _, e := range fe {
		if len(b.errs) >= batchProblemsMax {
			b.extra++
			continue
		}
		field := fmt.Sprintf("runs[%d]", index)
		if e.Field != "" && e.Field != "(body)" {
			field += "." + e.Field
		}
		b.errs = append(b.errs, indexedError{index, FieldError{Field: field, Message: e.Message}})
	}
}

// err is the 400 naming every problem, by run index.
func (b *batchProblems) err() error {
	if len(b.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(b.errs, func(x, y indexedError) int { return x.index - y.index })
	errs := make([]FieldError, 0, len(b.errs)+1)
	for _, e := range b.errs {
		errs = append(errs, e.FieldError)
	}
	if b.extra > 0 {
		errs = append(errs, FieldError{Field: "(body)", Message: fmt.Sprintf("and %d more problems (the first %d are listed)", b.extra, batchProblemsMax)})
	}
	return invalidFields(errs)
}

// decodeRunBatch reads every run of a batch body. Runs that do not decode
// are named (runs[i] and the field) in one 400 after the whole body was
// read; maxLine bounds a JSON line.
func decodeRunBatch(format string, body io.Reader, keyColumn string, version int, maxLine int64) ([]batchRun, error) {
	var (
		runs []batchRun
		bad  batchProblems
		err  error
	)
	switch format {
	case batchJSON:
		runs, err = decodeBatchJSON(body, &bad)
	case batchJSONL:
		runs, err = decodeBatchJSONL(body, maxLine, &bad)
	default:
		runs, err = decodeBatchCSV(body, keyColumn, &bad)
	}
	if err != nil {
		return nil, readProblem(err)
	}
	switch {
	case len(runs) == 0:
		return nil, badRequest("the batch has no runs")
	case len(runs) > RunBatchMax:
		return nil, badRequest(fmt.Sprintf("the batch has more than %d runs; split it", RunBatchMax))
	}
	checkRunBatch(version, runs, &bad)
	return runs, bad.err()
}

// readProblem is the problem of a body that could not be read.
func readProblem(err error) error {
	var maxErr *http.MaxBytesError
	var p *Problem
	switch {
	case errors.As(err, &maxErr):
		return tooLarge(maxErr.Limit)
	case errors.As(err, &p):
		return p
	}
	return badRequest("could not read the body: " + err.Error())
}

// decodeRun decodes one run object as strictly as the body of POST
// /v1/workflows/{name}/runs.
func decodeRun(raw []byte) (batchRun, []FieldError) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return batchRun{bad: true}, []FieldError{{Message: "must be a JSON object: {\"input\": …, \"idempotencyKey\": …}"}}
	}
	req := &startRunRequest{workflow: "x"} // the path's name is checked once, by checkRunBatch
	if err := decodeJSON(raw, req); err != nil {
		p := problemFor(err)
		if len(p.Errors) == 0 {
			return batchRun{bad: true}, []FieldError{{Message: p.Detail}}
		}
		return batchRun{bad: true, key: req.IdempotencyKey}, p.Errors
	}
	return batchRun{input: rawOrNull(req.Input), key: req.IdempotencyKey, version: req.Version}, nil
}

func decodeBatchJSON(body io.Reader, bad *batchProblems) ([]batchRun, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, badRequest("the body is empty; send {\"runs\": [...]}")
	}
	var req struct {
		Runs []json.RawMessage `json:"runs"`
	}
	if err := decodeJSON(data, &req); err != nil {
		return nil, err
	}
	if len(req.Runs) > RunBatchMax {
		return nil, invalidField("runs", fmt.Sprintf("has %d runs; at most %d are allowed", len(req.Runs), RunBatchMax))
	}
	runs := make([]batchRun, len(req.Runs))
	for i, raw := range req.Runs {
		run, errs := decodeRun(raw)
		if errs != nil {
			bad.add(i, errs...)
		}
		runs[i] = run
	}
	return runs, nil
}

func decodeBatchJSONL(body io.Reader, maxLine int64, bad *batchProblems) ([]batchRun, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), int(maxLine)+1)
	var runs []batchRun
	for line := 1; sc.Scan(); line++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue // blank lines (and a final newline) are not runs
		}
		if len(runs) == RunBatchMax {
			return nil, badRequest(fmt.Sprintf("the batch has more than %d runs; split it", RunBatchMax))
		}
		run, errs := decodeRun(raw)
		for i := range errs {
			errs[i].Message = fmt.Sprintf("line %d: %s", line, errs[i].Message)
		}
		if errs != nil {
			bad.add(len(runs), errs...)
		}
		runs = append(runs, run)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, badRequest(fmt.Sprintf("a line is longer than %d bytes", maxLine))
		}
		return nil, err
	}
	return runs, nil
}

func decodeBatchCSV(body io.Reader, keyColumn string, bad *batchProblems) ([]batchRun, error) {
	br := bufio.NewReader(body)
	if b, err := br.Peek(3); err == nil && bytes.Equal(b, []byte("\xef\xbb\xbf")) {
		_, _ = br.Discard(3) // a byte order mark, as spreadsheets write it
	}
	cr := csv.NewReader(br)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, badRequest("the body is empty; send a header line, then one run a line")
	}
	if err != nil {
		return nil, csvProblem("(header)", err)
	}
	header = append([]string(nil), header...)
	keys := make([]json.RawMessage, len(header))
	var herrs []FieldError
	seen := map[string]int{}
	keyAt := -1
	for i, h := range header {
		field := fmt.Sprintf("(header)[%d]", i)
		switch j, dup := seen[h]; {
		case h == "":
			herrs = append(herrs, FieldError{Field: field, Message: "a column has no name"})
		case dup:
			herrs = append(herrs, FieldError{Field: field, Message: fmt.Sprintf("column %q appears twice (columns %d and %d)", h, j, i)})
		}
		seen[h] = i
		keys[i], _ = json.Marshal(h)
		if h == keyColumn {
			keyAt = i
		}
	}
	if keyColumn != "" && keyAt < 0 {
		herrs = append(herrs, FieldError{Field: "keyColumn", Message: fmt.Sprintf("names no column of the header (%s)", strings.Join(header, ", "))})
	}
	if len(herrs) > 0 {
		return nil, invalidFields(herrs)
	}
	var runs []batchRun
	var buf bytes.Buffer
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if len(runs) == RunBatchMax {
			return nil, badRequest(fmt.Sprintf("the batch has more than %d runs; split it", RunBatchMax))
		}
		index := len(runs)
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
				bad.add(index, FieldError{Message: fmt.Sprintf("line %d has %d fields; the header has %d", pe.StartLine, len(rec), len(header))})
				runs = append(runs, batchRun{bad: true})
				continue
			}
			if errors.As(err, &pe) {
				// A broken quote: the rest of the body cannot be split
				// into rows reliably.
				bad.add(index, FieldError{Message: fmt.Sprintf("line %d: %v", pe.StartLine, pe.Err)})
				return append(runs, batchRun{bad: true}), nil
			}
			return nil, err
		}
		buf.Reset()
		buf.WriteByte('{')
		var rowErrs []FieldError
		for i, v := range rec {
			if strings.ContainsRune(v, 0) {
				rowErrs = append(rowErrs, FieldError{Field: "input." + header[i], Message: "contains a NUL character, which the database cannot store"})
			}
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.Write(keys[i])
			buf.WriteByte(':')
			val, _ := json.Marshal(v)
			buf.Write(val)
		}
		buf.WriteByte('}')
		run := batchRun{input: bytes.Clone(buf.Bytes()), bad: rowErrs != nil}
		if rowErrs != nil {
			bad.add(index, rowErrs...)
		}
		if keyAt >= 0 {
			run.key = rec[keyAt]
			if run.key == "" {
				// A run without a key would start again when the batch
				// is resent.
				line, _ := cr.FieldPos(keyAt)
				bad.add(index, FieldError{Field: "idempotencyKey", Message: fmt.Sprintf("line %d: the key column %q is empty", line, keyColumn)})
				run.bad = true
			}
		}
		runs = append(runs, run)
	}
	return runs, nil
}

func csvProblem(field string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return invalidField(field, fmt.Sprintf("line %d: %v", pe.StartLine, pe.Err))
	}
	return err
}

// checkRunBatch makes RunStart's checks of every run that decoded, and
// refuses an idempotency key given to two runs of the batch.
func checkRunBatch(version int, runs []batchRun, bad *batchProblems) {
	keys := map[string]int{}
	for i := range runs {
		run := &runs[i]
		if run.version == 0 {
			run.version = version
		}
		if !run.bad {
			err := docket.ValidateRunStart(docket.RunStartParams{Workflow: "x", Input: run.input, Opts: &docket.RunStartOpts{IdempotencyKey: run.key, Version: run.version}})
			if err != nil {
				bad.add(i, problemFor(err).Errors...)
				continue // its key is not compared: one problem a field
			}
		}
		if run.key == "" {
			continue
		}
		if j, dup := keys[run.key]; dup {
			bad.add(i, FieldError{Field: "idempotencyKey", Message: fmt.Sprintf("is also the key of runs[%d]; one key, one run", j)})
			continue
		}
		keys[run.key] = i
	}
}
