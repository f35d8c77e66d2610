package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/docket-run/docket"
)

func (s *Server) taskRoutes() []route {
	return []route{
		{Method: "PUT", Path: "/v1/tasks/{name}", Perm: permAdmin, Handler: endpoint(s, s.putTask)},
		{Method: "GET", Path: "/v1/tasks", Perm: permRead, Query: []string{"limit", "cursor"}, Handler: endpoint(s, s.listTasks)},
		{Method: "GET", Path: "/v1/tasks/{name}", Perm: permRead, Query: []string{"version"}, Handler: endpoint(s, s.getTask)},
	}
}

// taskView is one stored version of a task template, in canonical form
// (defaults filled in).
type taskView struct {
	Name      string               `json:"name"`
	Version   int                  `json:"version"`
	Hash      string               `json:"hash"`
	CreatedAt time.Time            `json:"createdAt"`
	Template  *docket.TaskTemplate `json:"template"`
}

func taskViewOf(v *docket.TaskVersion) *taskView {
	return &taskView{Name: v.Name, Version: v.Version, Hash: v.Hash, CreatedAt: v.CreatedAt.UTC(), Template: v.Template}
}

type tasksResponse struct {
	Items      []*taskView `json:"items"`
	NextCursor *string     `json:"nextCursor"`
}

// putTaskRequest is the body of PUT /v1/tasks/{name}: a template. The
// shared decoder keeps the body (UnmarshalJSON); Validate parses it with
// the task package, which names every problem by its path.
type putTaskRequest struct {
	raw      []byte
	template *docket.TaskTemplate
}

// UnmarshalJSON keeps the body for Validate.
func (req *putTaskRequest) UnmarshalJSON(data []byte) error {
	req.raw = bytes.Clone(data)
	return nil
}

// Validate implements Validator.
func (req *putTaskRequest) Validate() error {
	t, err := docket.ParseTask(req.raw)
	if err != nil {
		return err
	}
	req.template = t
	return nil
}

// taskFields is the 400 of a *docket.TaskValidationError: one entry per
// field, the document as a whole named "(body)".
func taskFields(ve *docket.TaskValidationError, prefix string) []FieldError {
	out := make([]FieldError, len(ve.Errors))
	for i, fe := range ve.Errors {
		f := fe.Field
		switch {
		case f == "" && prefix == "":
			f = "(body)"
		case f == "":
			f = prefix
		case prefix != "":
			f = prefix + "." + f
		}
		out[i] = FieldError{Field: f, Message: fe.Message}
	}
	return mergeFields(out)
}

// putTask stores the template: 201 with a new version when its content
// changed (or the task is new), 200 with the latest version otherwise.
func (s *Server) putTask(ctx context.Context, r *http.Request, req *putTaskRequest) (int, *taskView, error) {
	v, created, err := s.client.TaskPut(ctx, r.PathValue("name"), req.template)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return status, taskViewOf(v), nil
}

func (s *Server) getTask(ctx context.Context, r *http.Request, _ *Empty) (int, *taskView, error) {
	name := r.PathValue("name")
	version, err := queryVersion(r)
	if err != nil {
		return 0, nil, err
	}
	v, err := s.client.TaskGet(ctx, name, version)
	switch {
	case errors.Is(err, docket.ErrNotFound) && version == 0:
		return 0, nil, notFound(fmt.Sprintf("no task %q", name))
	case errors.Is(err, docket.ErrNotFound):
		return 0, nil, notFound(fmt.Sprintf("task %q has no version %d", name, version))
	case err != nil:
		return 0, nil, err
	}
	return http.StatusOK, taskViewOf(v), nil
}

// listTasks pages through the tasks by name, the latest version of each.
func (s *Server) listTasks(ctx context.Context, r *http.Request, _ *Empty) (int, *tasksResponse, error) {
	q, errs := query(r)
	limit, err := queryLimit(q.Get("limit"), q.Has("limit"))
	if err != nil {
		errs = append(errs, problemFor(err).Errors...)
	}
	p := docket.TaskListParams{Limit: limit + 1}
	if q.Has("cursor") {
		name, err := decodeTaskCursor(q.Get("cursor"))
		if err != nil {
			errs = append(errs, problemFor(err).Errors...)
		}
		p.After = name
	}
	if err := queryErrors(errs); err != nil {
		return 0, nil, err
	}
	list, err := s.client.TaskList(ctx, p)
	if err != nil {
		return 0, nil, err
	}
	resp := &tasksResponse{Items: make([]*taskView, 0, min(len(list), limit))}
	if len(list) > limit {
		list = list[:limit]
		next := encodeNameCursor(list[limit-1].Name)
		resp.NextCursor = &next
	}
	for _, v := range list {
		resp.Items = append(resp.Items, taskViewOf(v))
	}
	return http.StatusOK, resp, nil
}

func decodeTaskCursor(s string) (string, error) {
	name, err := decodeAnyNameCursor(s)
	if err != nil || name == "" {
		return "", invalidField("cursor", "is not a cursor this server returned")
	}
	return name, nil
}

// queryLimit reads a page size: default ListLimitDefault, 1..ListLimitMax.
// queryVersion reads the ?version= of a task's or workflow's GET: 0,
// the latest, when it is not given; every bad parameter is named in one
// 400 (with the errors checkParams left).
func queryVersion(r *http.Request) (int, error) {
	q, errs := query(r)
	version := 0
	if q.Has("version") {
		n, err := strconv.Atoi(q.Get("version"))
		if err != nil || n < 1 {
			errs = append(errs, FieldError{Field: "version", Message: "must be an integer of at least 1 (omit it for the latest version)"})
		}
		version = n
	}
	return version, queryErrors(errs)
}

func queryLimit(v string, given bool) (int, error) {
	if !given {
		return ListLimitDefault, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > ListLimitMax {
		return 0, invalidField("limit", fmt.Sprintf("must be an integer between 1 and %d", ListLimitMax))
	}
	return n, nil
}

// decodeAnyNameCursor decodes a name cursor without checking the name's
// grammar (encodeNameCursor's inverse).
func decodeAnyNameCursor(s string) (string, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || encodeNameCursor(string(b)) != s {
		return "", invalidField("cursor", "is not a cursor this server returned")
	}
	return string(b), nil
}
