package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// FuzzWorkflowPut sends arbitrary bodies to PUT /v1/workflows/{name} on a
// real server (SQLite): the answer is never a 5xx; a refusal is a problem
// naming each field once, with a message, and stores nothing; an
// acceptance is 201 or 200 with the version GET then returns.
func FuzzWorkflowPut(f *testing.F) {
	for _, seed := range []string{
		designWorkflow, designWorkflowAgain,
		`{"steps":[{"name":"a","job":{"type":"t"}}]}`,
		`{"name":"w","steps":[{"name":"a","after":["b"],"job":{"type":"t"}},{"name":"b","after":["a"],"signal":{}}]}`,
		`{"steps":[{"name":"a","job":{"type":"t","priority":1e400,"maxAttempts":-1}},7,null,{"name":"a"}]}`,
		`{"steps":[{"name":"a","job":{"type":"t"}},{"name":"b","after":["a"],"if":"steps.a.output.x > 1","forEach":"[1,2]","job":{"type":"t"}}]}`,
		`{"steps":[{"name":"a","human":{"task":"t","overrides":{"x":[{"y":1,"y":2}]}}}]}`,
		`{"steps":[{"name":"a","if":"steps[\"a\"]","forEach":"item","job":{"type":"t"}}]}`,
		`{"Name":"w","STEPS":[]}`, `[]`, `null`, `"w"`, `{}`, `{`, `{} {}`, "\x00", ``,
	} {
		f.Add("w", []byte(seed))
	}
	f.Add("product-match", []byte(designWorkflow))
	f.Add("a b/c", []byte(`{"steps":[{"name":"a","job":{"type":"t"}}]}`))

	b := setup(f, testdb.Backends()[0])
	srv := New(Config{Client: b.client, Logger: slog.New(slog.DiscardHandler)})
	admin := b.keys[docket.RoleAdmin]
	do := func(method, path string, body []byte) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, bytes.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+admin)
		if body != nil {
			r.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		if name == "" || name == "." || name == ".." || len(name) > 200 {
			return // not one path segment: the router's, not this endpoint's
		}
		path := "/v1/workflows/" + url.PathEscape(name)
		before := do("GET", path, nil)
		w := do("PUT", path, body)
		switch {
		case w.Code >= 500:
			t.Fatalf("PUT %s %q: %d %s", path, body, w.Code, w.Body)
		case w.Code == http.StatusOK || w.Code == http.StatusCreated:
			var put workflowView
			if err := json.Unmarshal(w.Body.Bytes(), &put); err != nil || put.Name != name || put.Version < 1 {
				t.Fatalf("PUT %s: %d %s (%v)", path, w.Code, w.Body, err)
			}
			got := do("GET", path, nil)
			var latest workflowView
			if err := json.Unmarshal(got.Body.Bytes(), &latest); err != nil || latest.Hash != put.Hash || latest.Version != put.Version {
				t.Fatalf("GET %s after PUT: %d %s", path, got.Code, got.Body)
			}
		default:
			if w.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("PUT %s %q: %d with %s", path, body, w.Code, w.Header().Get("Content-Type"))
			}
			var p Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != w.Code || p.Detail == "" {
				t.Fatalf("PUT %s %q: problem %s", path, body, w.Body)
			}
			named := map[string]bool{}
			for _, e := range p.Errors {
				if e.Field == "" || e.Message == "" || named[e.Field] {
					t.Fatalf("PUT %s %q: field errors %+v", path, body, p.Errors)
				}
				named[e.Field] = true
			}
			after := do("GET", path, nil)
			if after.Code != before.Code || !bytes.Equal(after.Body.Bytes(), before.Body.Bytes()) {
				t.Fatalf("PUT %s %q was refused (%d) but changed the workflow:\nbefore %s\nafter %s", path, body, w.Code, before.Body, after.Body)
			}
		}
	})
}
