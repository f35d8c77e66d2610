package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/crowdexport"
)

func (s *Server) poolRoutes() []route {
	return []route{
		{Method: "GET", Path: "/v1/pools", Perm: permRead, Query: []string{"workflow", "step", "status", "limit", "cursor"}, Lists: []string{"status"}, Handler: endpoint(s, s.listPools)},
		{Method: "GET", Path: "/v1/pools/{poolId}", Perm: permRead, Handler: endpoint(s, s.getPool)},
		{Method: "POST", Path: "/v1/pools/{poolId}/pause", Perm: permAdmin, Handler: endpoint(s, s.movePool(s.client.PoolPause))},
		{Method: "POST", Path: "/v1/pools/{poolId}/resume", Perm: permAdmin, Handler: endpoint(s, s.movePool(s.client.PoolResume))},
		{Method: "POST", Path: "/v1/pools/{poolId}/close", Perm: permAdmin, Handler: endpoint(s, s.movePool(s.client.PoolClose))},
		{Method: "POST", Path: "/v1/pools/{poolId}/golden", Perm: permAdmin, Handler: endpoint(s, s.addGolden)},
		{Method: "GET", Path: "/v1/pools/{poolId}/units", Perm: permRead, Query: []string{"state", "golden", "runId", "limit", "cursor"}, Lists: []string{"state"}, Handler: endpoint(s, s.listUnits)},
		{Method: "GET", Path: "/v1/pools/{poolId}/results", Perm: permRead, Query: []string{"format"}, Handler: http.HandlerFunc(s.exportResults)},
		{Method: "GET", Path: "/v1/units/{unitId}", Perm: permRead, Handler: endpoint(s, s.getUnit)},
		{Method: "GET", Path: "/v1/units/{unitId}/result", Perm: permRead, Handler: endpoint(s, s.getUnitResult)},
	}
}

type poolCountsView struct {
	New               int `json:"new"`
	Judgable          int `json:"judgable"`
	Paused            int `json:"paused"`
	Finalized         int `json:"finalized"`
	Canceled          int `json:"canceled"`
	Golden            int `json:"golden"`
	Judgments         int `json:"judgments"`
	ActiveAssignments int `json:"activeAssignments"`
}

type poolView struct {
	PoolID            uuid.UUID      `json:"poolId"`
	Workflow          string         `json:"workflow"`
	WorkflowVersion   int            `json:"workflowVersion"`
	Step              string         `json:"step"`
	Task              string         `json:"task"`
	TaskVersion       int            `json:"taskVersion"`
	Status            string         `json:"status"`
	Priority          int            `json:"priority"`
	Skills            []string       `json:"skills"`
	Channels          []string       `json:"channels"`
	JudgmentsPerUnit  int            `json:"judgmentsPerUnit"`
	AssignmentSeconds int            `json:"assignmentSeconds"`
	Counts            poolCountsView `json:"counts"`
	CreatedAt         time.Time      `json:"createdAt"`
	UpdatedAt         time.Time      `json:"updatedAt"`
}

func poolViewOf(p *docket.Pool) *poolView {
	c := p.Counts
	return &poolView{
		PoolID: p.ID, Workflow: p.Workflow, WorkflowVersion: p.WorkflowVersion, Step: p.Step,
		Task: p.Task, TaskVersion: p.TaskVersion, Status: string(p.Status), Priority: p.Priority,
		Skills: nonNil(p.Skills), Channels: nonNil(p.Channels), JudgmentsPerUnit: p.JudgmentsPerUnit,
		AssignmentSeconds: p.AssignmentSeconds,
		Counts: poolCountsView{New: c.New, Judgable: c.Judgable, Paused: c.Paused, Finalized: c.Finalized,
			Canceled: c.Canceled, Golden: c.Golden, Judgments: c.Judgments, ActiveAssignments: c.ActiveAssignments},
		CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC(),
	}
}

type poolsResponse struct {
	Items      []*poolView `json:"items"`
	NextCursor *string     `json:"nextCursor"`
}

var poolStatuses = []string{"OPEN", "PAUSED", "CLOSED", "COMPLETED"}

func (s *Server) listPools(ctx context.Context, r *http.Request, _ *Empty) (int, *poolsResponse, error) {
	q, errs := query(r)
	limit, err := queryLimit(q.Get("limit"), q.Has("limit"))
	if err != nil {
		errs = append(errs, problemFor(err).Errors...)
	}
	p := docket.PoolListParams{Workflow: q.Get("workflow"), Step: q.Get("step"), Limit: limit + 1}
	for _, st := range splitList(q["status"]) {
		if !docket.PoolStatus(st).Valid() {
			errs = append(errs, FieldError{Field: "status", Message: fmt.Sprintf("%q is not a pool status (%v)", st, poolStatuses)})
			break
		}
		p.Statuses = append(p.Statuses, docket.PoolStatus(st))
	}
	if q.Has("cursor") {
		if p.Before, err = decodeCursor(q.Get("cursor")); err != nil {
			errs = append(errs, problemFor(err).Errors...)
		}
	}
	if err := queryErrors(errs); err != nil {
		return 0, nil, err
	}
	list, err := s.client.PoolList(ctx, p)
	if err != nil {
		return 0, nil, err
	}
	resp := &poolsResponse{Items: []*poolView{}}
	if len(list) > limit {
		list = list[:limit]
		next := encodeCursor(list[limit-1].ID)
		resp.NextCursor = &next
	}
	for _, pl := range list {
		resp.Items = append(resp.Items, poolViewOf(pl))
	}
	return http.StatusOK, resp, nil
}

func (s *Server) pool(ctx context.Context, r *http.Request) (*docket.Pool, error) {
	id, err := pathID(r, "poolId")
	if err != nil {
		return nil, err
	}
	p, err := s.client.PoolGet(ctx, id)
	if errors.Is(err, docket.ErrNotFound) {
		return nil, notFound("no pool " + id.String())
	}
	return p, err
}

func (s *Server) getPool(ctx context.Context, r *http.Request, _ *Empty) (int, *poolView, error) {
	p, err := s.pool(ctx, r)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, poolViewOf(p), nil
}

// movePool is the handler of pause, resume and close: 200 with the pool
// (also when it is in that status already), 409 from a status the move
// does not start from.
func (s *Server) movePool(move func(context.Context, uuid.UUID) (*docket.Pool, error)) func(context.Context, *http.Request, *Empty) (int, *poolView, error) {
	return func(ctx context.Context, r *http.Request, _ *Empty) (int, *poolView, error) {
		id, err := pathID(r, "poolId")
		if err != nil {
			return 0, nil, err
		}
		p, err := move(ctx, id)
		if errors.Is(err, docket.ErrNotFound) {
			return 0, nil, notFound("no pool " + id.String())
		}
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, poolViewOf(p), nil
	}
}

// MaxGoldenUnits is the most golden units one request adds.
const MaxGoldenUnits = 10000

type goldenRequest struct {
	Units []goldenItem `json:"units"`
}

type goldenItem struct {
	Input  json.RawMessage `json:"input"`
	Answer json.RawMessage `json:"answer"`
	// Feedback explains the answer to contributors who answered it
	// (optional: a string of docket.GoldenFeedbackMaxLength characters at
	// most, or null). Decoded by Validate, so that a value of the wrong
	// type is named with its unit's index.
	Feedback json.RawMessage `json:"feedback"`
	feedback string
	// unknown are the keys of the unit that are none of the above, and
	// notObject is set when the unit is not an object: named by
	// unitProblems with the unit's index (the request's decoder would
	// name an unknown key without its path, and only the first).
	unknown   []string
	notObject bool
}

// UnmarshalJSON implements json.Unmarshaler: the known keys, and the
// others kept to be named.
func (g *goldenItem) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		g.notObject = true
		return nil
	}
	for k, v := range m {
		switch k {
		case "input":
			g.Input = v
		case "answer":
			g.Answer = v
		case "feedback":
			g.Feedback = v
		default:
			g.unknown = append(g.unknown, k)
		}
	}
	slices.Sort(g.unknown)
	return nil
}

// Validate implements Validator: the list; the shape of each unit is
// checked by unitProblems, and the answers against the pool's task by the
// client, so that the handler names both at once.
func (req *goldenRequest) Validate() error {
	switch {
	case len(req.Units) == 0:
		return invalidField("units", "must list at least one unit")
	case len(req.Units) > MaxGoldenUnits:
		return invalidField("units", fmt.Sprintf("lists at most %d units per request", MaxGoldenUnits))
	}
	return nil
}

// unitProblems names each unit's input that is not an object, answer
// that is missing and explanation that is not a string or is refused.
func (req *goldenRequest) unitProblems() []FieldError {
	var errs []FieldError
	for i, u := range req.Units {
		if u.notObject {
			errs = append(errs, FieldError{Field: fmt.Sprintf("units[%d]", i), Message: "must be an object with input and answer"})
			continue
		}
		for _, k := range u.unknown {
			errs = append(errs, FieldError{Field: fmt.Sprintf("units[%d].%s", i, k), Message: "is not a known field (known: input, answer, feedback)"})
		}
		if !isObject(u.Input) {
			errs = append(errs, FieldError{Field: fmt.Sprintf("units[%d].input", i), Message: "must be a JSON object: the unit's data"})
		}
		if len(u.Answer) == 0 || string(u.Answer) == "null" {
			errs = append(errs, FieldError{Field: fmt.Sprintf("units[%d].answer", i), Message: "is required: the known answer, shaped like a judgment"})
		}
		if len(u.Feedback) > 0 && string(u.Feedback) != "null" {
			msg := "must be a string: why the answer is right"
			if json.Unmarshal(u.Feedback, &req.Units[i].feedback) == nil {
				msg = docket.GoldenFeedbackProblem(req.Units[i].feedback)
			}
			if msg != "" {
				errs = append(errs, FieldError{Field: fmt.Sprintf("units[%d].feedback", i), Message: msg})
			}
		}
		if len(errs) >= 100 {
			break
		}
	}
	return errs
}

func isObject(b json.RawMessage) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '{'
	}
	return false
}

type unitsResponse struct {
	Items      []*unitView `json:"items"`
	NextCursor *string     `json:"nextCursor"`
}

func (s *Server) addGolden(ctx context.Context, r *http.Request, req *goldenRequest) (int, *unitsResponse, error) {
	id, err := pathID(r, "poolId")
	if err != nil {
		return 0, nil, err
	}
	shape := req.unitProblems()
	golden := make([]docket.GoldenUnit, len(req.Units))
	for i, u := range req.Units {
		golden[i] = docket.GoldenUnit{Input: u.Input, Answer: u.Answer, Feedback: u.feedback}
	}
	var units []*docket.Unit
	if len(shape) > 0 {
		// Nothing is added; the answers are checked all the same, so
		// that every bad field is named in one answer.
		err = s.client.GoldenCheck(ctx, id, golden)
	} else {
		units, err = s.client.GoldenAdd(ctx, id, golden)
	}
	if errors.Is(err, docket.ErrNotFound) {
		return 0, nil, notFound("no pool " + id.String())
	}
	// Not crowdProblem's "hands out no assignment": no assignment was
	// asked for.
	if notOpen := (*docket.PoolNotOpenError)(nil); errors.As(err, &notOpen) {
		return 0, nil, conflict("pool-not-open", fmt.Sprintf("pool %s is %s: no unit can be added to it, golden units neither", notOpen.PoolID, notOpen.Status))
	}
	var ve *docket.CrowdValidationError
	switch {
	case len(shape) > 0 && errors.As(err, &ve):
		return 0, nil, invalidFields(addFields(shape, crowdFields(ve)...))
	case len(shape) > 0 && err == nil:
		return 0, nil, invalidFields(shape)
	}
	if err != nil {
		return 0, nil, err
	}
	resp := &unitsResponse{Items: make([]*unitView, len(units))}
	for i, u := range units {
		resp.Items[i] = unitViewOf(u)
	}
	return http.StatusCreated, resp, nil
}

type unitView struct {
	UnitID           uuid.UUID       `json:"unitId"`
	PoolID           uuid.UUID       `json:"poolId"`
	RunID            *uuid.UUID      `json:"runId"`
	StepIndex        int             `json:"stepIndex"`
	ParentUnitID     *uuid.UUID      `json:"parentUnitId"`
	Input            json.RawMessage `json:"input"`
	State            string          `json:"state"`
	Golden           bool            `json:"golden"`
	Answer           json.RawMessage `json:"answer,omitempty"`
	Feedback         string          `json:"feedback,omitempty"`
	SlotsTaken       int             `json:"slotsTaken"`
	JudgmentsPerUnit int             `json:"judgmentsPerUnit"`
	JudgmentCount    int             `json:"judgmentCount"`
	Result           json.RawMessage `json:"result"`
	Confidence       *float64        `json:"confidence"`
	LowConfidence    bool            `json:"lowConfidence"`
	FinalizedAt      *time.Time      `json:"finalizedAt"`
	CreatedAt        time.Time       `json:"createdAt"`
	UpdatedAt        time.Time       `json:"updatedAt"`
}

func idOrNull(id uuid.UUID) *uuid.UUID {
	if id == uuid.Nil {
		return nil
	}
	return &id
}

func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func jsonOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func unitViewOf(u *docket.Unit) *unitView {
	return &unitView{
		UnitID: u.ID, PoolID: u.PoolID, RunID: idOrNull(u.RunID), StepIndex: u.StepIndex,
		ParentUnitID: idOrNull(u.ParentUnitID), Input: u.Input, State: string(u.State), Golden: u.Golden,
		Answer: u.Answer, Feedback: u.Feedback, SlotsTaken: u.SlotsTaken, JudgmentsPerUnit: u.JudgmentsPerUnit, JudgmentCount: u.JudgmentCount,
		Result: jsonOrNull(u.Result), Confidence: u.Confidence, LowConfidence: u.LowConfidence, FinalizedAt: timeOrNull(u.FinalizedAt),
		CreatedAt: u.CreatedAt.UTC(), UpdatedAt: u.UpdatedAt.UTC(),
	}
}

var unitStates = []string{"NEW", "JUDGABLE", "PAUSED", "FINALIZED", "CANCELED"}

func (s *Server) listUnits(ctx context.Context, r *http.Request, _ *Empty) (int, *unitsResponse, error) {
	q, errs := query(r)
	id, err := pathID(r, "poolId")
	if err != nil {
		errs = append(errs, problemFor(err).Errors...)
	}
	limit, err := queryLimit(q.Get("limit"), q.Has("limit"))
	if err != nil {
		errs = append(errs, problemFor(err).Errors...)
	}
	p := docket.UnitListParams{Limit: limit + 1}
	for _, st := range splitList(q["state"]) {
		if !docket.UnitState(st).Valid() {
			errs = append(errs, FieldError{Field: "state", Message: fmt.Sprintf("%q is not a unit state (%v)", st, unitStates)})
			break
		}
		p.States = append(p.States, docket.UnitState(st))
	}
	if q.Has("golden") {
		g, err := strconv.ParseBool(q.Get("golden"))
		if err != nil {
			errs = append(errs, FieldError{Field: "golden", Message: "must be true or false"})
		}
		p.Golden = &g
	}
	if q.Has("runId") {
		if p.RunID, err = uuid.Parse(q.Get("runId")); err != nil {
			errs = append(errs, FieldError{Field: "runId", Message: "must be a UUID"})
		}
	}
	if q.Has("cursor") {
		if p.Before, err = decodeCursor(q.Get("cursor")); err != nil {
			errs = append(errs, problemFor(err).Errors...)
		}
	}
	if err := queryErrors(errs); err != nil {
		return 0, nil, err
	}
	if _, err := s.pool(ctx, r); err != nil {
		return 0, nil, err
	}
	list, err := s.client.UnitList(ctx, id, p)
	if err != nil {
		return 0, nil, err
	}
	resp := &unitsResponse{Items: []*unitView{}}
	if len(list) > limit {
		list = list[:limit]
		next := encodeCursor(list[limit-1].ID)
		resp.NextCursor = &next
	}
	for _, u := range list {
		resp.Items = append(resp.Items, unitViewOf(u))
	}
	return http.StatusOK, resp, nil
}

func (s *Server) unit(ctx context.Context, r *http.Request) (*docket.Unit, error) {
	id, err := pathID(r, "unitId")
	if err != nil {
		return nil, err
	}
	u, err := s.client.UnitGet(ctx, id)
	if errors.Is(err, docket.ErrNotFound) {
		return nil, notFound("no unit " + id.String())
	}
	return u, err
}

func (s *Server) getUnit(ctx context.Context, r *http.Request, _ *Empty) (int, *unitView, error) {
	u, err := s.unit(ctx, r)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, unitViewOf(u), nil
}

// unitResultView is a unit's aggregated answer: the export's lines hold
// the same fields (crowdexport.Result).
type unitResultView = crowdexport.Result

func unitResultOf(u *docket.Unit) *unitResultView {
	r := crowdexport.ResultOf(u)
	return &r
}

func (s *Server) getUnitResult(ctx context.Context, r *http.Request, _ *Empty) (int, *unitResultView, error) {
	u, err := s.unit(ctx, r)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, unitResultOf(u), nil
}

// exportResults streams the results of a pool's finalized regular units,
// newest first: JSON lines (the unit's result view with runId and input per
// line) or CSV (unitId, runId, state, result, confidence, judgmentCount,
// finalizedAt, lowConfidence; result as compact JSON text), written by
// crowdexport, as the dashboard's download is.
func (s *Server) exportResults(w http.ResponseWriter, r *http.Request) {
	q, errs := query(r)
	if _, err := pathID(r, "poolId"); err != nil {
		errs = append(errs, problemFor(err).Errors...)
	}
	format := q.Get("format")
	if format == "" {
		format = "jsonl"
	}
	if format != "jsonl" && format != "csv" {
		errs = append(errs, FieldError{Field: "format", Message: fmt.Sprintf("must be jsonl or csv, not %q", format)})
	}
	if err := queryErrors(errs); err != nil {
		s.fail(w, r, err)
		return
	}
	pool, err := s.pool(r.Context(), r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := crowdexport.Write(r.Context(), w, s.client, pool.ID, format); err != nil {
		// The status is sent: the stream just ends early.
		s.cfg.Logger.Error("export results failed", "pool", pool.ID, "error", err)
	}
}
