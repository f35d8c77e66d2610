package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// crowdFuzz is a server on SQLite for the fuzz targets of the human work
// endpoints, with a pool and a source of contributor keys.
type crowdFuzz struct {
	b    *bundle
	srv  *Server
	pool *docket.Pool
	n    int
}

func newCrowdFuzz(f *testing.F) *crowdFuzz {
	b := setup(f, testdb.Backends()[0])
	cf := &crowdFuzz{b: b, srv: New(Config{Client: b.client, Logger: slog.New(slog.DiscardHandler)})}
	ctx := context.Background()
	tmpl, err := docket.ParseTask([]byte(sameProduct))
	if err != nil {
		f.Fatal(err)
	}
	if _, _, err := b.client.TaskPut(ctx, "same-product", tmpl); err != nil {
		f.Fatal(err)
	}
	def, err := docket.DecodeWorkflow([]byte(`{"name": "wf", "steps": [{"name": "label", "human": {"task": "same-product"}}]}`))
	if err != nil {
		f.Fatal(err)
	}
	if _, _, err := b.client.WorkflowPut(ctx, def); err != nil {
		f.Fatal(err)
	}
	if cf.pool, _, err = b.client.PoolEnsure(ctx, "wf", 1, "label", "same-product"); err != nil {
		f.Fatal(err)
	}
	cf.addUnits(f, 50)
	return cf
}

func (cf *crowdFuzz) addUnits(t testing.TB, n int) {
	inputs := make([]json.RawMessage, n)
	for i := range inputs {
		inputs[i] = json.RawMessage(`{"left": "a", "right": "b"}`)
	}
	if _, err := cf.b.client.UnitsAdd(context.Background(), cf.pool.ID, inputs); err != nil {
		t.Fatal(err)
	}
}

// contributorKey makes a new contributor with the pool's skill and a key.
func (cf *crowdFuzz) contributorKey(t testing.TB) (uuid.UUID, string) {
	cf.n++
	c, err := cf.b.client.ContributorCreate(context.Background(), docket.ContributorCreateParams{ExternalID: fmt.Sprintf("fuzz-%d", cf.n), Skills: []string{"en"}})
	if err != nil {
		t.Fatal(err)
	}
	secret, _, err := cf.b.client.CreateContributorKey(context.Background(), c.ID, "fuzz")
	if err != nil {
		t.Fatal(err)
	}
	return c.ID, secret
}

func (cf *crowdFuzz) do(secret, method, path string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+secret)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	w := httptest.NewRecorder()
	cf.srv.ServeHTTP(w, r)
	return w
}

// checkAnswer fails on a 5xx and on a malformed problem: every refusal is
// problem+json naming each field once, with a message.
func checkAnswer(t *testing.T, what string, body []byte, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code >= 500 {
		t.Fatalf("%s %q: %d %s", what, body, w.Code, w.Body)
	}
	if w.Code < 400 {
		return
	}
	if w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s %q: %d with %s", what, body, w.Code, w.Header().Get("Content-Type"))
	}
	var p Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != w.Code || p.Detail == "" {
		t.Fatalf("%s %q: problem %s", what, body, w.Body)
	}
	named := map[string]bool{}
	for _, e := range p.Errors {
		if e.Field == "" || e.Message == "" || named[e.Field] {
			t.Fatalf("%s %q: field errors %+v", what, body, p.Errors)
		}
		named[e.Field] = true
	}
}

// FuzzTaskPut: PUT /v1/tasks/{name} never answers 5xx; a refusal names
// its fields and stores nothing; an acceptance is what GET returns.
func FuzzTaskPut(f *testing.F) {
	for _, seed := range []string{
		sameProduct, `{"title": "t", "fields": [{"name": "n", "kind": "number", "min": 5, "max": 1}]}`,
		`{"title": "", "fields": [{"name": "Same", "kind": "choice"}], "priority": "high", "color": 1}`,
		`{"title": "b", "fields": [{"name": "b", "kind": "bbox", "labels": ["x", "x"], "max": 1e400}]}`,
		`{"title": "x", "title": "y", "fields": []}`, `[]`, `null`, `{`, "\x00", ``,
	} {
		f.Add("t", []byte(seed))
	}
	cf := newCrowdFuzz(f)
	admin := cf.b.keys[docket.RoleAdmin]
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		if name == "" || name == "." || name == ".." || len(name) > 200 {
			return
		}
		path := "/v1/tasks/" + url.PathEscape(name)
		before := cf.do(admin, "GET", path, nil)
		w := cf.do(admin, "PUT", path, body)
		checkAnswer(t, "PUT "+path, body, w)
		if w.Code == http.StatusOK || w.Code == http.StatusCreated {
			var put taskView
			if err := json.Unmarshal(w.Body.Bytes(), &put); err != nil || put.Name != name {
				t.Fatalf("PUT %s: %d %s", path, w.Code, w.Body)
			}
			var got taskView
			if err := json.Unmarshal(cf.do(admin, "GET", path, nil).Body.Bytes(), &got); err != nil || got.Hash != put.Hash {
				t.Fatalf("GET %s after PUT: %v", path, err)
			}
			return
		}
		if after := cf.do(admin, "GET", path, nil); !bytes.Equal(after.Body.Bytes(), before.Body.Bytes()) {
			t.Fatalf("PUT %s %q was refused (%d) but changed the task", path, body, w.Code)
		}
	})
}

// FuzzContributorBodies sends arbitrary bodies to POST /v1/contributors,
// PATCH /v1/contributors/{id} and POST /v1/contributors/{id}/keys: never
// a 5xx, every refusal a well-formed problem.
func FuzzContributorBodies(f *testing.F) {
	for _, seed := range []string{
		`{"externalId": "e", "name": "n", "skills": ["en"], "channels": ["web"]}`,
		`{"externalId": "", "skills": ["", "a", "a"], "channels": 3}`,
		`{"state": "banned"}`, `{"state": "gone", "skills": null}`, `{"name": "x"}`, `{}`, `[]`, `{"externalId": 1}`, ``,
	} {
		f.Add(uint8(0), []byte(seed))
		f.Add(uint8(1), []byte(seed))
		f.Add(uint8(2), []byte(seed))
	}
	cf := newCrowdFuzz(f)
	admin := cf.b.keys[docket.RoleAdmin]
	id, _ := cf.contributorKey(f)
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		method, path := "POST", "/v1/contributors"
		switch which % 3 {
		case 1:
			method, path = "PATCH", "/v1/contributors/"+id.String()
		case 2:
			path = "/v1/contributors/" + id.String() + "/keys"
		}
		checkAnswer(t, method+" "+path, body, cf.do(admin, method, path, body))
	})
}

// FuzzPoolGolden sends arbitrary bodies to POST /v1/pools/{id}/golden:
// never a 5xx; a refusal adds no unit.
func FuzzPoolGolden(f *testing.F) {
	for _, seed := range []string{
		`{"units": [{"input": {"left": "a"}, "answer": {"same": "yes"}}]}`,
		`{"units": [{"input": {"left": "a"}, "answer": {"same": "maybe"}}, {"input": 3, "answer": null}]}`,
		`{"units": []}`, `{"units": [{"input": {}, "answer": {"note": "\u0000"}}]}`, `{"units": 1}`, `[]`, ``,
		// The explanation of an answer: a string, at most 2,000 characters, no NUL.
		`{"units": [{"input": {}, "answer": {"same": "yes"}, "feedback": "both <b>X-1</b>"}]}`,
		`{"units": [{"input": {}, "answer": {"same": "yes"}, "feedback": "a\u0000b"}]}`,
		`{"units": [{"input": {}, "answer": {"same": "yes"}, "feedback": 7}, {"input": {}, "answer": {"same": "no"}, "feedback": null}]}`,
		`{"units": [{"input": {}, "answer": {"same": "yes"}, "feedback": "\ud800"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Add([]byte(`{"units": [{"input": {}, "answer": {"same": "yes"}, "feedback": "` + strings.Repeat("é", docket.GoldenFeedbackMaxLength+1) + `"}]}`))
	cf := newCrowdFuzz(f)
	admin := cf.b.keys[docket.RoleAdmin]
	path := "/v1/pools/" + cf.pool.ID.String() + "/golden"
	f.Fuzz(func(t *testing.T, body []byte) {
		before, err := cf.b.client.PoolGet(context.Background(), cf.pool.ID)
		if err != nil {
			t.Fatal(err)
		}
		w := cf.do(admin, "POST", path, body)
		checkAnswer(t, "POST "+path, body, w)
		if w.Code >= 400 {
			after, err := cf.b.client.PoolGet(context.Background(), cf.pool.ID)
			if err != nil || after.Counts.Golden != before.Counts.Golden {
				t.Fatalf("POST %s %q was refused but added units (%v)", path, body, err)
			}
		}
	})
}

// FuzzWorkBodies sends arbitrary bodies to POST /v1/assignments,
// /v1/assignments/{id}/extend and /v1/judgments: never a 5xx; a refused
// judgment leaves the assignment ACTIVE.
func FuzzWorkBodies(f *testing.F) {
	for _, seed := range []string{
		`{"same": "yes"}`, `{"same": "maybe", "extra": 1}`, `{"note": "x"}`, `{"same": null}`, `[]`, `"yes"`, `{`, ``,
	} {
		f.Add(uint8(2), []byte(seed))
	}
	f.Add(uint8(0), []byte(`{"poolId": "x"}`))
	f.Add(uint8(0), []byte(`{}`))
	f.Add(uint8(1), []byte(`{"seconds": 60}`))
	f.Add(uint8(1), []byte(`{"seconds": 1e9}`))
	cf := newCrowdFuzz(f)
	me, secret := cf.contributorKey(f)
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		ctx := context.Background()
		taken, err := cf.b.client.AssignmentTake(ctx, cf.pool.ID, me)
		if docket.IsNoUnit(err) {
			me, secret = cf.contributorKey(t)
			cf.addUnits(t, 50)
			taken, err = cf.b.client.AssignmentTake(ctx, cf.pool.ID, me)
		}
		if err != nil {
			t.Fatal(err)
		}
		aid := taken.Assignment.ID.String()
		switch which % 3 {
		case 0:
			checkAnswer(t, "POST /v1/assignments", body, cf.do(secret, "POST", "/v1/assignments", body))
		case 1:
			checkAnswer(t, "POST extend", body, cf.do(secret, "POST", "/v1/assignments/"+aid+"/extend", body))
		case 2:
			wrapped, _ := json.Marshal(map[string]any{"assignmentId": aid, "data": json.RawMessage(body)})
			if !json.Valid(body) {
				wrapped = []byte(`{"assignmentId": "` + aid + `", "data": ` + string(body) + `}`)
			}
			w := cf.do(secret, "POST", "/v1/judgments", wrapped)
			checkAnswer(t, "POST /v1/judgments", wrapped, w)
			a, err := cf.b.client.AssignmentGet(ctx, taken.Assignment.ID)
			if err != nil {
				t.Fatal(err)
			}
			if w.Code >= 400 && a.State != docket.AssignmentActive {
				t.Fatalf("judgment %q refused (%d) but the assignment is %s", wrapped, w.Code, a.State)
			}
			if w.Code == http.StatusAccepted && a.State != docket.AssignmentSubmitted {
				t.Fatalf("judgment %q accepted but the assignment is %s", wrapped, a.State)
			}
		}
	})
}
