package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/remote"
)

// openapiDoc is the part of the OpenAPI document the tests read.
type openapiDoc struct {
	OpenAPI string                                 `json:"openapi"`
	Paths   map[string]map[string]openapiOperation `json:"paths"`
}

type openapiOperation struct {
	Description string           `json:"description"`
	Security    *[]any           `json:"security"`
	Parameters  []map[string]any `json:"parameters"`
	Responses   map[string]any   `json:"responses"`
}

var openapiMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func parseOpenAPI(t *testing.T, data []byte) (*openapiDoc, map[string]any) {
	t.Helper()
	var doc openapiDoc
	require.NoError(t, json.Unmarshal(data, &doc), "openapi.json is not valid JSON")
	var raw map[string]any
	require.NoError(t, json.Unmarshal(data, &raw))
	require.Regexp(t, `^3\.1\.\d+$`, doc.OpenAPI)
	return &doc, raw
}

// TestOpenAPIMatchesRoutes checks the document and the route table both
// ways: every served route is documented, every documented operation is
// served, and each operation states the roles the route really grants.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	s := New(Config{Client: b.client})
	doc, _ := parseOpenAPI(t, openapiDocument)

	served := map[string]route{}
	for _, rt := range s.routes {
		served[strings.ToUpper(rt.Method)+" "+rt.Path] = rt
	}
	documented := map[string]openapiOperation{}
	for path, item := range doc.Paths {
		for method, op := range item {
			if slices.Contains(openapiMethods, method) {
				documented[strings.ToUpper(method)+" "+path] = op
			}
		}
	}

	var missingFromDoc, notServed []string
	for k := range served {
		if _, ok := documented[k]; !ok {
			missingFromDoc = append(missingFromDoc, k)
		}
	}
	for k := range documented {
		if _, ok := served[k]; !ok {
			notServed = append(notServed, k)
		}
	}
	sort.Strings(missingFromDoc)
	sort.Strings(notServed)
	// Both lists are reported, then the routes in both are checked.
	if len(missingFromDoc) > 0 {
		t.Errorf("routes served but not in openapi.json: %v", missingFromDoc)
	}
	if len(notServed) > 0 {
		t.Errorf("operations in openapi.json that the server does not serve: %v", notServed)
	}

	for k, rt := range served {
		op, ok := documented[k]
		if !ok {
			continue
		}
		if rt.Perm == permPublic {
			require.NotNil(t, op.Security, "%s is public: its operation needs \"security\": []", k)
			require.Empty(t, *op.Security, "%s is public: its operation needs \"security\": []", k)
			require.True(t, strings.HasPrefix(op.Description, "Public"), "%s: description should start with \"Public\"", k)
			continue
		}
		require.Nil(t, op.Security, "%s needs a key: it must not override the bearer security", k)
		require.Equal(t, rolesWith(rt.Perm), documentedRoles(t, k, op.Description), "%s: the roles in its description", k)
		// A key is read from the database, so any such call can find it
		// unreachable: 503 problems/database-unavailable.
		for _, status := range []string{"401", "403", "503"} {
			require.Contains(t, op.Responses, status, "%s needs a key: document %s", k, status)
		}
	}
}

// TestOpenAPIQueryParameters: for every operation, the query parameters
// openapi.json declares are exactly those its route takes (route.Query,
// which the server refuses any other than): a parameter the server takes
// undocumented, or one documented that it refuses, fails. Every operation
// documents its 400, since every route can answer one.
func TestOpenAPIQueryParameters(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	_, raw := parseOpenAPI(t, openapiDocument)
	documented := map[string][]string{}
	for path, item := range raw["paths"].(map[string]any) {
		item := item.(map[string]any)
		common, _ := item["parameters"].([]any) // the path item's, shared by its operations
		for method, op := range item {
			if !slices.Contains(openapiMethods, method) {
				continue
			}
			responses, _ := op.(map[string]any)["responses"].(map[string]any)
			require.Contains(t, responses, "400", "%s %s: every route refuses an unknown query parameter", method, path)
			own, _ := op.(map[string]any)["parameters"].([]any)
			names := []string{}
			for _, p := range slices.Concat(common, own) {
				p := p.(map[string]any)
				if ref, ok := p["$ref"].(string); ok {
					p = resolveRef(t, raw, ref).(map[string]any)
				}
				if p["in"] == "query" {
					names = append(names, p["name"].(string))
				}
			}
			slices.Sort(names)
			documented[strings.ToUpper(method)+" "+path] = names
		}
	}
	for _, rt := range s.routes {
		k := rt.Method + " " + rt.Path
		want, ok := documented[k]
		if !ok {
			continue // TestOpenAPIMatchesRoutes names it
		}
		got := append([]string{}, rt.Query...)
		slices.Sort(got)
		if len(got) == 0 {
			got = []string{}
		}
		require.Equal(t, want, got, "%s: the query parameters of openapi.json (expected) and of the route (actual)", k)
	}
}

// TestOpenAPIDocument checks the document on its own: version, path
// parameters declared, every $ref resolves, and the server serves it.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	doc, raw := parseOpenAPI(t, openapiDocument)

	// Every {param} of a path is a declared path parameter.
	params := regexp.MustCompile(`\{([^}]+)\}`)
	for path, item := range doc.Paths {
		for method, op := range item {
			var declared []string
			for _, p := range op.Parameters {
				if ref, ok := p["$ref"].(string); ok {
					p = resolveRef(t, raw, ref).(map[string]any)
				}
				if p["in"] == "path" {
					declared = append(declared, p["name"].(string))
					require.Equal(t, true, p["required"], "%s %s: path parameter %s must be required", method, path, p["name"])
				}
			}
			var want []string
			for _, m := range params.FindAllStringSubmatch(path, -1) {
				want = append(want, m[1])
			}
			sort.Strings(declared)
			sort.Strings(want)
			require.Equal(t, want, declared, "%s %s: path parameters", method, path)
			require.NotEmpty(t, op.Responses, "%s %s: responses", method, path)
		}
	}

	// Every $ref points at something.
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if ref, ok := e.(string); ok && k == "$ref" {
					resolveRef(t, raw, ref)
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(raw)

	// Problems are application/problem+json with errors[{field, message}].
	problemSchema := resolveRef(t, raw, "#/components/schemas/Problem").(map[string]any)
	require.Contains(t, problemSchema["properties"], "errors")
	fieldError := resolveRef(t, raw, "#/components/schemas/FieldError").(map[string]any)
	require.ElementsMatch(t, []any{"field", "message"}, fieldError["required"])
	bad := resolveRef(t, raw, "#/components/responses/BadRequest").(map[string]any)
	require.Contains(t, bad["content"], "application/problem+json")
}

// TestOpenAPIQueueMayBeEmpty: a job's queue "" is the default (the job
// type), as docs/api.md's table and the server have it, and the schema
// admits it (it said minLength 1).
func TestOpenAPIQueueMayBeEmpty(t *testing.T) {
	t.Parallel()
	_, raw := parseOpenAPI(t, openapiDocument)
	submit := resolveRef(t, raw, "#/components/schemas/SubmitJobRequest").(map[string]any)
	queue := submit["properties"].(map[string]any)["queue"].(map[string]any)
	if ref, ok := queue["$ref"].(string); ok {
		queue = resolveRef(t, raw, ref).(map[string]any)
	}
	min, _ := queue["minLength"].(float64)
	require.Zero(t, min, "queue: minLength")
	require.Regexp(t, queue["pattern"].(string), "", "queue: pattern")
	require.Regexp(t, queue["pattern"].(string), "mail.send:eu/1")
	require.NotRegexp(t, queue["pattern"].(string), "bad queue")

	b := setup(t, testdb.Backends()[0])
	var got submitResponse
	b.do(t, docket.RoleProducer, "POST", "/v1/jobs", `{"jobType":"email","queue":""}`).JSON(t, &got)
	row, err := b.client.Get(t.Context(), got.JobID)
	require.NoError(t, err)
	require.Equal(t, "email", row.Queue)
}

func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Backends()[0])
	r := b.do(t, "", "GET", "/v1/openapi.json", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	require.JSONEq(t, string(openapiDocument), string(r.Body))
	b.do(t, "", "POST", "/v1/openapi.json", nil).Problem(t, http.StatusMethodNotAllowed)
}

// resolveRef follows a local JSON pointer ("#/a/b").
func resolveRef(t *testing.T, raw map[string]any, ref string) any {
	t.Helper()
	require.True(t, strings.HasPrefix(ref, "#/"), "only local refs: %s", ref)
	var cur any = raw
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		require.True(t, ok, "$ref %s: %s is not an object", ref, part)
		cur, ok = m[part]
		require.True(t, ok, "$ref %s does not resolve", ref)
	}
	return cur
}

// rolesWith lists the roles granted perm, sorted.
func rolesWith(perm permission) []string {
	var out []string
	for role, perms := range grants {
		if slices.Contains(perms, perm) {
			out = append(out, string(role))
		}
	}
	sort.Strings(out)
	return out
}

// documentedRoles reads "Roles: a, b." from the first line of a
// description.
func documentedRoles(t *testing.T, op, description string) []string {
	t.Helper()
	first, _, _ := strings.Cut(description, "\n")
	list, ok := strings.CutPrefix(first, "Roles: ")
	require.True(t, ok, "%s: description must start with \"Roles: …\"", op)
	var out []string
	for _, r := range strings.Split(strings.TrimSuffix(list, "."), ",") {
		r = strings.TrimSpace(r)
		require.True(t, docket.Role(r).Valid(), "%s: unknown role %q", op, r)
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPISchemasMatchTypes checks that each schema has exactly the JSON
// fields of the Go type the handlers decode or encode.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	t.Parallel()
	_, raw := parseOpenAPI(t, openapiDocument)
	for schema, v := range map[string]any{
		"SubmitJobRequest":    submitRequest{},
		"JobAccepted":         submitResponse{},
		"BatchSubmitRequest":  batchRequest{},
		"BatchSubmitResponse": batchResponse{},
		"BatchItemResult":     batchItem{},
		"Job":                 jobView{},
		"JobList":             listResponse{},
		"JobSummary":          summaryResponse{},
		"Attempt":             attemptView{},
		"AttemptList":         attemptsResponse{},
		"Queue":               queueView{},
		"QueueList":           queuesResponse{},
		"QueuePaused":         pauseResponse{},
		"LeaseRequest":        leaseRequest{},
		"Lease":               remote.Lease{},
		"LeaseResponse":       remote.LeaseResponse{},
		"HeartbeatRequest":    heartbeatRequest{},
		"HeartbeatResponse":   remote.HeartbeatResponse{},
		"CompleteRequest":     completeRequest{},
		"CompleteResponse":    remote.StatusResponse{},
		"FailRequest":         failRequest{},
		"FailResponse":        remote.StatusResponse{},
		"ReleaseRequest":      releaseRequest{},
		"ReleaseResponse":     remote.StatusResponse{},
		"Health":              healthResponse{},
		"Problem":             Problem{},
		"FieldError":          FieldError{},
		"DeadLetter":          deadLetterView{},
		"DeadLetterList":      deadLettersResponse{},
		"WebhookRequest":      webhookRequest{},
		"Webhook":             webhookView{},
		"WebhookList":         webhooksResponse{},
		"WebhookDelivery":     deliveryView{},
		"WebhookDeliveryList": deliveriesResponse{},
		"WorkflowVersion":     workflowView{},
		"WorkflowList":        workflowsResponse{},
		"WorkflowDefinition":  flow.Definition{},
		"WorkflowStep":        flow.Step{},
		"WorkflowJobStep":     flow.JobStep{},
		"WorkflowSignalStep":  flow.SignalStep{},
		"WorkflowHumanStep":   flow.HumanStep{},
		"StartRunRequest":     startRunRequest{},
		"RunStarted":          startRunResponse{},
		"Run":                 runView{},
		"RunDetail":           runDetail{},
		"RunStep":             stepView{},
		"RunList":             runsResponse{},
		"RunBatchResponse":    runBatchResponse{},
		"RunBatchItem":        runBatchItem{},
		"SignalRequest":       signalRequest{},
	} {
		s := resolveRef(t, raw, "#/components/schemas/"+schema).(map[string]any)
		props, _ := s["properties"].(map[string]any)
		var documented []string
		for name := range props {
			documented = append(documented, name)
		}
		sort.Strings(documented)
		require.Equal(t, jsonFields(reflect.TypeOf(v)), documented, "schema %s against %T", schema, v)
	}
}

// jsonFields lists the JSON names of a struct's fields, embedded structs
// flattened, sorted.
func jsonFields(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			out = append(out, jsonFields(ft)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIRequestBodiesAreClosed: the server refuses a body key that is
// not a field (decodeJSON), so every JSON request body that is an object
// with properties says additionalProperties: false, as a client
// generating code from the document must be told.
func TestOpenAPIRequestBodiesAreClosed(t *testing.T) {
	t.Parallel()
	_, raw := parseOpenAPI(t, openapiDocument)
	var open []string
	for path, item := range raw["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			body, ok := op.(map[string]any)["requestBody"].(map[string]any)
			if !ok {
				continue
			}
			media, ok := body["content"].(map[string]any)["application/json"].(map[string]any)
			if !ok {
				continue
			}
			schema := media["schema"].(map[string]any)
			if ref, ok := schema["$ref"].(string); ok {
				schema = resolveRef(t, raw, ref).(map[string]any)
			}
			if _, ok := schema["properties"]; ok && schema["additionalProperties"] != false {
				open = append(open, method+" "+path)
			}
		}
	}
	slices.Sort(open)
	require.Empty(t, open, "request bodies without additionalProperties: false")
}
