package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// runsFuzzServer is a real server (SQLite) with the approval workflow,
// and a function that sends a request as a producer.
func runsFuzzServer(f *testing.F) (*bundle, func(method, path, ct string, body []byte, headers ...string) *httptest.ResponseRecorder) {
	b := setup(f, testdb.Backends()[0])
	if _, _, err := b.client.WorkflowPut(f.Context(), mustDecodeWorkflow(f, "approval", approvalWorkflow)); err != nil {
		f.Fatal(err)
	}
	srv := New(Config{Client: b.client, Logger: slog.New(slog.DiscardHandler)})
	key := b.keys[docket.RoleProducer]
	return b, func(method, path, ct string, body []byte, headers ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, bytes.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+key)
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
}

func mustDecodeWorkflow(f *testing.F, name, body string) *docket.WorkflowDefinition {
	var raw map[string]any
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		f.Fatal(err)
	}
	raw["name"] = name
	data, _ := json.Marshal(raw)
	def, err := docket.DecodeWorkflow(data)
	if err != nil {
		f.Fatal(err)
	}
	return def
}

// checkRefusal fails unless w is a problem naming each field once, with a
// message.
func checkRefusal(t *testing.T, what string, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s: %d with %s", what, w.Code, w.Header().Get("Content-Type"))
	}
	var p Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != w.Code || p.Detail == "" {
		t.Fatalf("%s: problem %s", what, w.Body)
	}
	named := map[string]bool{}
	for _, e := range p.Errors {
		if e.Field == "" || e.Message == "" || named[e.Field] {
			t.Fatalf("%s: field errors %+v", what, p.Errors)
		}
		named[e.Field] = true
	}
}

func countRuns(t *testing.T, b *bundle) int {
	t.Helper()
	runs, err := b.client.RunList(t.Context(), docket.RunListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(runs)
}

// FuzzRunStart sends arbitrary bodies (and Idempotency-Key headers) to
// POST /v1/workflows/{name}/runs: never a 5xx; 202 is a run GET returns
// with the input sent; a refusal is a problem and starts nothing.
func FuzzRunStart(f *testing.F) {
	for _, seed := range []string{
		`{"input": {"a": 1}, "idempotencyKey": "k"}`, `{"input": null}`, `{}`, ``, `{"version": 1}`, `{"version": 2}`,
		`{"version": -1, "idempotencyKey": 5, "x": 1}`, `{"input": "\u0000"}`, `{"input": 1, "input": 2}`, `[]`, `{`, `{} {}`, "\x00",
	} {
		f.Add([]byte(seed), "")
		f.Add([]byte(seed), "hdr")
	}
	b, do := runsFuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		before := countRuns(t, b)
		var headers []string
		if key != "" {
			headers = []string{"Idempotency-Key", key}
		}
		w := do("POST", "/v1/workflows/approval/runs", "application/json", body, headers...)
		switch {
		case w.Code >= 500:
			t.Fatalf("POST %q: %d %s", body, w.Code, w.Body)
		case w.Code == http.StatusAccepted:
			var v startRunResponse
			if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || v.Workflow != "approval" {
				t.Fatalf("POST %q: %d %s (%v)", body, w.Code, w.Body, err)
			}
			g := do("GET", "/v1/runs/"+v.RunID.String(), "", nil)
			var got runDetail
			if err := json.Unmarshal(g.Body.Bytes(), &got); err != nil || got.RunID != v.RunID || !bytes.Equal(got.Input, v.Input) {
				t.Fatalf("GET after POST %q: %d %s", body, g.Code, g.Body)
			}
		default:
			checkRefusal(t, "POST "+string(body), w)
			if after := countRuns(t, b); after != before {
				t.Fatalf("POST %q was refused (%d) but started %d runs", body, w.Code, after-before)
			}
		}
	})
}

// FuzzRunBatch sends arbitrary batch bodies as JSON, JSON lines or CSV:
// never a 5xx; 202 lists one item per run started or found; a refusal is a
// problem naming each field once and starts nothing.
func FuzzRunBatch(f *testing.F) {
	for _, seed := range []struct {
		format byte
		body   string
	}{
		{0, `{"runs": [{"input": 1}, {"input": {"a": 2}, "idempotencyKey": "k"}]}`},
		{0, `{"runs": [7, {"x": 1}, {"idempotencyKey": "d"}, {"idempotencyKey": "d"}]}`},
		{0, `{"runs": []}`}, {0, `{"runs": null}`}, {0, ``},
		{1, "{\"input\": 1}\n\n{\"input\": 2, \"idempotencyKey\": \"k\"}\n"},
		{1, "[1]\n{\"input\": \"\\u0000\"}\n{"}, {1, "\n\n"},
		{2, "id,name\n1,a\n2,\"b, c\"\n"}, {2, "\xef\xbb\xbfa,b\n1\n1,2,3\n"}, {2, "a,a,\n1,2,3\n"},
		{2, "a\n\"unterminated\n"}, {2, "a\nx\x00y\n"}, {2, ""}, {3, "id,v\nk1,1\nk1,2\n"},
	} {
		f.Add(seed.format, []byte(seed.body))
	}
	b, do := runsFuzzServer(f)
	f.Fuzz(func(t *testing.T, format byte, body []byte) {
		path, ct := "/v1/workflows/approval/runs:batch", "application/json"
		switch format % 4 {
		case 1:
			ct = "application/x-ndjson"
		case 2:
			ct = "text/csv"
		case 3:
			ct, path = "text/csv", path+"?keyColumn=id"
		}
		before := countRuns(t, b)
		w := do("POST", path, ct, body)
		switch {
		case w.Code >= 500:
			t.Fatalf("POST %s %q: %d %s", ct, body, w.Code, w.Body)
		case w.Code == http.StatusAccepted:
			var res runBatchResponse
			if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || len(res.Items) == 0 || res.Started+res.Existing != len(res.Items) {
				t.Fatalf("POST %s %q: %d %s (%v)", ct, body, w.Code, w.Body, err)
			}
			if after := countRuns(t, b); after != before+res.Started && after < 1000 {
				t.Fatalf("POST %s %q: %d runs started, %d new in the store", ct, body, res.Started, after-before)
			}
		default:
			checkRefusal(t, "POST "+ct+" "+string(body), w)
			if after := countRuns(t, b); after != before {
				t.Fatalf("POST %s %q was refused (%d) but started %d runs", ct, body, w.Code, after-before)
			}
		}
	})
}
