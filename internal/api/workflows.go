package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/flow"
)

func (s *Server) workflowRoutes() []route {
	return []route{
		{Method: "PUT", Path: "/v1/workflows/{name}", Perm: permSubmit, Handler: endpoint(s, s.putWorkflow)},
		{Method: "GET", Path: "/v1/workflows", Perm: permRead, Query: []string{"limit", "cursor"}, Handler: endpoint(s, s.listWorkflows)},
		{Method: "GET", Path: "/v1/workflows/{name}", Perm: permRead, Query: []string{"version"}, Handler: endpoint(s, s.getWorkflow)},
	}
}

// workflowView is one stored version of a workflow definition. Definition
// is the canonical form: steps and `after` lists sorted by name, defaults
// dropped.
type workflowView struct {
	Name       string                     `json:"name"`
	Version    int                        `json:"version"`
	Hash       string                     `json:"hash"`
	CreatedAt  time.Time                  `json:"createdAt"`
	Definition *docket.WorkflowDefinition `json:"definition"`
}

func workflowViewOf(v *docket.WorkflowVersion) *workflowView {
	return &workflowView{Name: v.Name, Version: v.Version, Hash: v.Hash, CreatedAt: v.CreatedAt.UTC(), Definition: v.Definition}
}

type workflowsResponse struct {
	Items []*workflowView `json:"items"`
	// NextCursor fetches the next page; null on the last one.
	NextCursor *string `json:"nextCursor"`
}

// putWorkflowRequest is the body of PUT /v1/workflows/{name}: a workflow
// definition. The shared decoder keeps the body as is (UnmarshalJSON) and
// reports malformed JSON and repeated keys; Validate decodes it, so that
// every problem — a wrong type or unknown field anywhere, the structure,
// the expressions, the name against the path — is named by its full path
// (steps[2].job.priority) in one 400.
type putWorkflowRequest struct {
	pathName string
	raw      []byte
	def      *flow.Definition // set by Validate
}

func (req *putWorkflowRequest) prepare(_ *Server, r *http.Request) {
	req.pathName = r.PathValue("name")
}

// ownedThroughout: every level of a definition is the API's; a repeated
// key anywhere is refused.
func (*putWorkflowRequest) ownedThroughout() {}

// UnmarshalJSON keeps the body for Validate.
func (req *putWorkflowRequest) UnmarshalJSON(data []byte) error {
	req.raw = bytes.Clone(data)
	return nil
}

// Validate implements Validator.
func (req *putWorkflowRequest) Validate() error {
	if len(req.raw) > flow.MaxDefinitionBytes {
		return tooLarge(flow.MaxDefinitionBytes)
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(req.raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return jsonProblem(err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return invalidField("(body)", "must be a JSON object: a workflow definition, not "+jsonKindOf(doc))
	}
	// Shape problems (wrong types, unknown fields) first; their values are
	// removed so that the rest decodes and is validated too.
	var shape []FieldError
	checkShape(&shape, "", "", definitionType, obj)
	clean, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("re-encode the definition: %w", err)
	}
	def, err := flow.Decode(clean)
	if err != nil {
		return workflowProblem(append(shape, validationFields(err)...))
	}
	var problems []FieldError
	switch {
	case def.Name == "" && !slices.ContainsFunc(shape, func(e FieldError) bool { return e.Field == "name" }):
		def.Name = req.pathName // the body may leave the name to the path
	case def.Name != "" && def.Name != req.pathName:
		problems = append(problems, FieldError{Field: "name", Message: fmt.Sprintf(
			"is %q but the path names %q: send the same name, or none", def.Name, req.pathName)})
	}
	if err := docket.ValidateWorkflow(def); err != nil {
		var ve *flow.ValidationError
		if !errors.As(err, &ve) {
			return err
		}
		for _, fe := range validationFields(ve) {
			// A value with a wrong type was dropped: what the structure
			// says about its absence is noise.
			if !slices.ContainsFunc(shape, func(bad FieldError) bool { return within(fe.Field, bad.Field) }) {
				problems = append(problems, fe)
			}
		}
	}
	if all := append(shape, problems...); len(all) > 0 {
		return workflowProblem(all)
	}
	req.def = def
	return nil
}

// within reports whether the field path is path or inside it.
func within(field, path string) bool {
	if !strings.HasPrefix(field, path) {
		return false
	}
	rest := field[len(path):]
	return rest == "" || rest[0] == '.' || rest[0] == '['
}

// validationFields are the problems of a *flow.ValidationError (the
// document-wide ones named "(body)"), or of any other error as one.
func validationFields(err error) []FieldError {
	var ve *flow.ValidationError
	if !errors.As(err, &ve) {
		return []FieldError{{Field: "(body)", Message: err.Error()}}
	}
	out := make([]FieldError, len(ve.Errors))
	for i, fe := range ve.Errors {
		out[i] = FieldError{Field: cmpOr(fe.Field, "(body)"), Message: fe.Message}
	}
	return out
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// workflowProblem is the 400 for the problems of a definition: one entry
// per field, in order of first appearance, the messages of a field that
// has several (two faults in one expression) joined; at most
// flow.MaxProblems fields, then one entry saying how many more.
func workflowProblem(errs []FieldError) *Problem {
	merged := mergeFields(errs)
	if extra := len(merged) - flow.MaxProblems; extra > 0 {
		merged = mergeFields(append(merged[:flow.MaxProblems:flow.MaxProblems],
			FieldError{Field: "(body)", Message: fmt.Sprintf("and %d more fields with problems", extra)}))
	}
	return invalidFields(merged)
}

func mergeFields(errs []FieldError) []FieldError {
	var merged []FieldError
	at := map[string]int{}
	for _, e := range errs {
		if i, ok := at[e.Field]; ok {
			if !strings.Contains(merged[i].Message, e.Message) {
				merged[i].Message += "; " + e.Message
			}
			continue
		}
		at[e.Field] = len(merged)
		merged = append(merged, e)
	}
	return merged
}

var (
	definitionType = reflect.TypeFor[flow.Definition]()
	stepType       = reflect.TypeFor[flow.Step]()
	rawMessageType = reflect.TypeFor[json.RawMessage]()
)

// checkShape records, with its path, every value of v (a JSON value decoded
// with UseNumber) that does not fit the Go type t — a wrong JSON type, an
// unknown field, a number that is not an integer — and removes it from its
// object (or nulls it in its array) so that the rest decodes. It returns
// false when v itself does not fit. who names the step the value is in.
// Keys match exactly (encoding/json would also take "Name" for "name").
func checkShape(bad *[]FieldError, path, who string, t reflect.Type, v any) bool {
	if v == nil || t == rawMessageType { // null is the zero value, as for encoding/json
		return true
	}
	wrong := func(want string) bool {
		*bad = append(*bad, FieldError{Field: cmpOr(path, "(body)"), Message: fmt.Sprintf("%smust be %s, not %s", who, want, jsonKindOf(v))})
		return false
	}
	switch t.Kind() {
	case reflect.Pointer:
		return checkShape(bad, path, who, t.Elem(), v)
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return wrong("an object")
		}
		names, types := jsonFieldsOf(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			sub := k
			if k == "" {
				sub = `""` // the empty key, named as the shared decoder names it
			}
			if path != "" {
				sub = path + "." + sub
			}
			ft, known := types[k]
			if !known {
				msg := fmt.Sprintf("%sunknown field %q (known: %s)", who, k, strings.Join(names, ", "))
				if i := slices.IndexFunc(names, func(n string) bool { return strings.EqualFold(n, k) }); i >= 0 {
					msg = fmt.Sprintf("%sunknown field %q (did you mean %q?)", who, k, names[i])
				}
				*bad = append(*bad, FieldError{Field: sub, Message: msg})
				delete(obj, k)
				continue
			}
			if !checkShape(bad, sub, who, ft, obj[k]) {
				delete(obj, k)
			}
		}
		return true
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return wrong("an array")
		}
		for i, el := range arr {
			w := who
			if t.Elem() == stepType {
				w = stepLabel(el, i)
			}
			if !checkShape(bad, fmt.Sprintf("%s[%d]", path, i), w, t.Elem(), el) {
				arr[i] = nil
			}
		}
		return true
	case reflect.String:
		if _, ok := v.(string); !ok {
			return wrong("a string")
		}
	case reflect.Int:
		n, ok := v.(json.Number)
		if !ok {
			return wrong("an integer")
		}
		if _, err := strconv.Atoi(string(n)); err != nil {
			*bad = append(*bad, FieldError{Field: path, Message: fmt.Sprintf("%smust be an integer, not %s", who, n)})
			return false
		}
	}
	return true
}

// stepLabel names the step v (an element of steps) in messages as package
// flow does: `step "name": `, or `step 3: ` when it has no valid name.
func stepLabel(v any, i int) string {
	if obj, ok := v.(map[string]any); ok {
		if name, ok := obj["name"].(string); ok && flow.CheckStepName(name) == "" {
			return fmt.Sprintf("step %q: ", name)
		}
	}
	return fmt.Sprintf("step %d: ", i)
}

// jsonFieldsOf lists the JSON names of a struct's fields, in order, and
// their types.
func jsonFieldsOf(t reflect.Type) ([]string, map[string]reflect.Type) {
	var names []string
	types := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, ok := jsonName(f)
		if !ok {
			continue
		}
		names = append(names, name)
		types[name] = f.Type
	}
	return names, types
}

// jsonKindOf names the JSON type of a value decoded with UseNumber.
func jsonKindOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "the number " + string(v)
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// putWorkflow stores the definition: 201 with the new version when its
// content changed (or the workflow is new), 200 with the latest version
// when it is the same.
func (s *Server) putWorkflow(ctx context.Context, r *http.Request, req *putWorkflowRequest) (int, *workflowView, error) {
	v, created, err := s.client.WorkflowPut(ctx, req.def)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return status, workflowViewOf(v), nil
}

func (s *Server) getWorkflow(ctx context.Context, r *http.Request, _ *Empty) (int, *workflowView, error) {
	name := r.PathValue("name")
	version, err := queryVersion(r)
	if err != nil {
		return 0, nil, err
	}
	v, err := s.client.WorkflowGet(ctx, name, version)
	switch {
	case errors.Is(err, docket.ErrNotFound) && version == 0:
		return 0, nil, notFound(fmt.Sprintf("no workflow %q", name))
	case errors.Is(err, docket.ErrNotFound):
		return 0, nil, notFound(fmt.Sprintf("workflow %q has no version %d", name, version))
	case err != nil:
		return 0, nil, err
	}
	return http.StatusOK, workflowViewOf(v), nil
}

// listWorkflows pages through the workflows by name, the latest version of
// each. The cursor is the last name of the previous page: a workflow
// stored meanwhile shows on a later page or not at all, never twice.
func (s *Server) listWorkflows(ctx context.Context, r *http.Request, _ *Empty) (int, *workflowsResponse, error) {
	q, errs := query(r)
	p := docket.WorkflowListParams{Limit: ListLimitDefault}
	if v := q.Get("limit"); q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > ListLimitMax {
			errs = append(errs, FieldError{Field: "limit", Message: fmt.Sprintf("must be an integer between 1 and %d", ListLimitMax)})
		}
		p.Limit = n
	}
	if q.Has("cursor") {
		name, err := decodeNameCursor(q.Get("cursor"))
		if err != nil {
			errs = append(errs, problemFor(err).Errors...)
		}
		p.After = name
	}
	if err := queryErrors(errs); err != nil {
		return 0, nil, err
	}
	limit := p.Limit
	p.Limit++ // one more tells whether there is a next page
	list, err := s.client.WorkflowList(ctx, p)
	if err != nil {
		return 0, nil, err
	}
	resp := &workflowsResponse{Items: make([]*workflowView, 0, min(len(list), limit))}
	if len(list) > limit {
		list = list[:limit]
		next := encodeNameCursor(list[limit-1].Name)
		resp.NextCursor = &next
	}
	for _, v := range list {
		resp.Items = append(resp.Items, workflowViewOf(v))
	}
	return http.StatusOK, resp, nil
}

// Name cursors are opaque to clients: the base64url of the last name.
func encodeNameCursor(name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(name))
}

func decodeNameCursor(s string) (string, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	name := string(b)
	if err != nil || flow.CheckWorkflowName(name) != "" || encodeNameCursor(name) != s {
		return "", invalidField("cursor", "is not a cursor this server returned")
	}
	return name, nil
}
