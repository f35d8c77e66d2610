package api

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, to read a database whole
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// pathParam matches the {names} of a route's path.
var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// TestRouteQueryParameters: on every route of the table, a query
// parameter the route does not declare is a 400 naming it (with every
// other): before the handler runs on a route without query parameters,
// handed to the handler (query) on the others, for it to name with its
// values' errors (TestQueryProblemNamesEveryField runs the real ones);
// one it declares passes, once, or more than once when it is a list. A
// route added to the table is covered.
func TestRouteQueryParameters(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	require.NotEmpty(t, s.routes)
	for _, rt := range s.routes {
		for _, name := range rt.Lists {
			require.Contains(t, rt.Query, name, "%s %s: a list that is not a parameter", rt.Method, rt.Path)
		}
		require.Len(t, slices.Compact(slices.Sorted(slices.Values(rt.Query))), len(rt.Query), "%s %s: a parameter declared twice", rt.Method, rt.Path)
		// The handler: one that answers what checkParams hands it (called
		// says it was, ran that it went on as if all was well).
		ran, called := false, false
		mux := http.NewServeMux()
		mux.Handle(rt.Method+" "+rt.Path, checkParams(rt, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			called = true
			if _, errs := query(r); len(errs) > 0 {
				writeProblem(w, invalidFields(errs))
				return
			}
			ran = true
			w.WriteHeader(http.StatusNoContent)
		})))
		path := pathParam.ReplaceAllString(rt.Path, "x")
		send := func(query string) *httptest.ResponseRecorder {
			ran, called = false, false
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, httptest.NewRequest(rt.Method, path+"?"+query, nil))
			return w
		}
		refused := func(query string, fields ...string) *Problem {
			t.Helper()
			w := send(query)
			require.Equal(t, http.StatusBadRequest, w.Code, "%s %s?%s: %s", rt.Method, rt.Path, query, w.Body)
			require.False(t, ran, "%s %s?%s: the handler went on", rt.Method, rt.Path, query)
			require.Equal(t, len(rt.Query) > 0, called, "%s %s?%s: the handler was called (or not)", rt.Method, rt.Path, query)
			require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
			p := problemOfBody(t, w.Body.Bytes())
			require.Equal(t, fields, problemFields(p), "%s %s?%s", rt.Method, rt.Path, query)
			return p
		}

		// Every declared parameter once, and the routes with none.
		declared := make([]string, len(rt.Query))
		for i, name := range rt.Query {
			declared[i] = name + "=1"
		}
		all := strings.Join(declared, "&")
		w := send(all)
		require.True(t, ran, "%s %s?%s: %d %s", rt.Method, rt.Path, all, w.Code, w.Body)

		// Unknown ones: each named, sorted, with the declared ones given.
		p := refused(strings.Join(append(declared, "zz=1", "aa=2"), "&"), "aa", "zz")
		want := "is not a known query parameter (this endpoint takes none)"
		if len(rt.Query) > 0 {
			want = "is not a known query parameter (known: " + strings.Join(rt.Query, ", ") + ")"
		}
		require.Equal(t, want, p.Errors[0].Message)

		// Twice: a list's values, or refused.
		for _, name := range rt.Query {
			if slices.Contains(rt.Lists, name) {
				send(name + "=1&" + name + "=2")
				require.True(t, ran, "%s %s: %s is a list", rt.Method, rt.Path, name)
				continue
			}
			p := refused(name+"=1&"+name+"=2", name)
			require.Contains(t, p.Errors[0].Message, "takes one value")
		}

		// A path value that is not text: refused before the handler is
		// called, whatever the route takes, with the unknown parameter.
		if names := pathParam.FindAllStringSubmatch(rt.Path, -1); len(names) > 0 {
			want := []string{}
			for _, m := range names {
				want = append(want, strings.TrimSuffix(m[1], "..."))
			}
			called = false
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, httptest.NewRequest(rt.Method, pathParam.ReplaceAllString(rt.Path, "a%00")+"?zz=1", nil))
			require.Equal(t, http.StatusBadRequest, w.Code, "%s %s: %s", rt.Method, rt.Path, w.Body)
			require.False(t, called, "%s %s: the handler was called with a path value that is not text", rt.Method, rt.Path)
			require.Equal(t, append(want, "zz"), problemFields(problemOfBody(t, w.Body.Bytes())), "%s %s", rt.Method, rt.Path)
		}
	}
}

// badQueryValues gives, for every route taking query parameters, a value
// of each of its parameters that the handler refuses; "" marks a
// parameter whose every text value is taken (free text: a name, a
// filter), exempt. TestQueryProblemNamesEveryField fails on a route or a
// parameter missing here, so that a new one is covered.
var badQueryValues = map[string]map[string]string{
	"GET /v1/me/pools":                        {"limit": "0"},
	"GET /v1/contributors":                    {"state": "flagged", "limit": "501", "cursor": "!"},
	"GET /v1/dead-letters":                    {"consumer": "", "limit": "0", "cursor": "x"},
	"GET /v1/events":                          {"types": "job.nope", lastEventIDParam: "x", "jobId": "x"},
	"GET /v1/jobs/{jobId}/events":             {"types": "unit.finalized", lastEventIDParam: "x"},
	"GET /v1/jobs":                            {"status": "DEAD,NOPE", "jobType": "", "queue": "", "priority": "99", "limit": "-1", "cursor": "!", "search": "user:42"},
	"GET /v1/jobs/{jobId}":                    {"include": "secrets"},
	"GET /v1/queues":                          {"limit": "0", "cursor": "!"},
	"GET /v1/pools":                           {"workflow": "", "step": "", "status": "NOPE", "limit": "x", "cursor": "!"},
	"GET /v1/pools/{poolId}/units":            {"state": "NOPE", "golden": "maybe", "runId": "x", "limit": "0", "cursor": "!"},
	"GET /v1/pools/{poolId}/results":          {"format": "xml"},
	"POST /v1/workflows/{name}/runs:batch":    {"version": "0", "keyColumn": "key"}, // keyColumn: the body is JSON
	"GET /v1/runs":                            {"workflow": "", "state": "NOPE", "createdAfter": "yesterday", "createdBefore": "2030-01-02", "limit": "0", "cursor": "!"},
	"GET /v1/runs/{runId}/events":             {"types": "job.progress", lastEventIDParam: "x"},
	"GET /v1/tasks":                           {"limit": "0", "cursor": "!"},
	"GET /v1/tasks/{name}":                    {"version": "latest"},
	"GET /v1/webhooks/{webhookId}/deliveries": {"status": "NOPE", "limit": "0"},
	"GET /v1/workflows":                       {"limit": "0", "cursor": "!"},
	"GET /v1/workflows/{name}":                {"version": "-1"},
}

// TestQueryProblemNamesEveryField: on every route taking query
// parameters, on both backends, a request with an unknown parameter and a
// bad value of a known one is one 400 naming both (the unknown one
// first), for each parameter in turn and for all at once, and nothing is
// written: the unknown parameter, found before the handler runs, no
// longer hides the bad values, to be found on the next request.
func TestQueryProblemNamesEveryField(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		var dbURL string
		b := setup(t, testdb.Backend{Name: backend.Name, URL: func(t testing.TB) string {
			dbURL = backend.URL(t)
			return dbURL
		}})
		db := openWhole(t, backend.Name, dbURL)
		// A contributor's key, for GET /v1/me/pools.
		r := b.do(t, docket.RoleAdmin, "POST", "/v1/contributors", `{"externalId": "e1", "name": "E", "skills": ["en"]}`)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		var c contributorView
		r.JSON(t, &c)
		r = b.do(t, docket.RoleAdmin, "POST", "/v1/contributors/"+c.ContributorID.String()+"/keys", "")
		require.Less(t, r.Status, 300, string(r.Body))
		var key contributorKeyView
		r.JSON(t, &key)
		b.keys[docket.RoleContributor] = key.Secret

		send := func(rt route, query string) *response {
			t.Helper()
			// A handler that does not answer would stream (an SSE route) or
			// read on: the deadline ends it.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			path := pathParam.ReplaceAllStringFunc(rt.Path, func(m string) string {
				if m == "{name}" {
					return "match"
				}
				return "0196e3a8-0000-7000-8000-000000000000" // a UUID no row has
			})
			var body io.Reader
			if rt.Method != "GET" {
				body = strings.NewReader(`{"runs": [{"input": {}}]}`)
			}
			req, err := http.NewRequestWithContext(ctx, rt.Method, b.server.URL+path+"?"+query, body)
			require.NoError(t, err)
			if body != nil {
				req.Header.Set("Content-Type", "application/json")
			}
			role := docket.RoleAdmin
			if rt.Perm == permWork {
				role = docket.RoleContributor
			}
			req.Header.Set("Authorization", "Bearer "+b.keys[role])
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err, "%s %s?%s", rt.Method, rt.Path, query)
			defer res.Body.Close()
			data, err := io.ReadAll(res.Body)
			require.NoError(t, err, "%s %s?%s: the handler did not answer", rt.Method, rt.Path, query)
			return &response{Status: res.StatusCode, Header: res.Header, Body: data}
		}

		before := readWhole(t, db)
		s := New(Config{Client: b.client})
		covered := 0
		for _, rt := range s.routes {
			if len(rt.Query) == 0 {
				continue
			}
			k := rt.Method + " " + rt.Path
			bad, ok := badQueryValues[k]
			require.True(t, ok, "%s takes query parameters: give badQueryValues their bad values", k)
			covered++
			require.ElementsMatch(t, rt.Query, slices.Collect(maps.Keys(bad)), "%s: badQueryValues must give every parameter of the route", k)
			var all []string
			var named []string
			for _, name := range rt.Query {
				v := bad[name]
				if v == "" {
					continue // free text
				}
				one := "zz=1&" + name + "=" + url.QueryEscape(v)
				p := send(rt, one).Problem(t, http.StatusBadRequest)
				require.Equal(t, []string{"zz", name}, problemFields(p), "%s?%s: %s", k, one, p.Detail)
				all = append(all, name+"="+url.QueryEscape(v))
				named = append(named, name)
			}
			query := strings.Join(append(all, "zz=1"), "&")
			p := send(rt, query).Problem(t, http.StatusBadRequest)
			fields := problemFields(p)
			require.Equal(t, "zz", fields[0], "%s?%s: %s", k, query, p.Detail)
			require.ElementsMatch(t, named, fields[1:], "%s?%s: %s", k, query, p.Detail)
		}
		require.Len(t, badQueryValues, covered, "badQueryValues names a route the server does not serve, or one without query parameters")
		require.Equal(t, before, readWhole(t, db), "a refused request wrote")
	})
}

func problemOfBody(t *testing.T, body []byte) *Problem {
	t.Helper()
	r := &response{Status: http.StatusBadRequest, Body: body}
	var p Problem
	r.JSON(t, &p)
	return &p
}

// TestUnknownQueryParameterWritesNothing: over HTTP, on both backends,
// every route refuses an unknown query parameter with a 400 naming it, and
// a refused write changes nothing in the database (read whole before and
// after). Among them POST /v1/jobs?idempotency_key=… and a queue's pause,
// which acted and ignored it: the same requests without the parameter
// write (so the check of the database can fail).
func TestUnknownQueryParameterWritesNothing(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend testdb.Backend) {
		var dbURL string
		b := setup(t, testdb.Backend{Name: backend.Name, URL: func(t testing.TB) string {
			dbURL = backend.URL(t)
			return dbURL
		}})
		db := openWhole(t, backend.Name, dbURL)
		ctx := context.Background()
		res, err := b.client.Insert(ctx, docket.RawArgs{Type: "a"}, nil)
		require.NoError(t, err)
		values := map[string]string{"jobId": res.Job.ID.String(), "queue": "mail", "name": "match", "consumer": "c", "eventId": "1-0"}

		// Requests that write when sent without the unknown parameter, in
		// an order where each finds what it needs (the workflow, its run).
		writes := []struct{ route, body string }{
			{"POST /v1/jobs", `{"jobType": "email", "idempotencyKey": "k1"}`},
			{"POST /v1/jobs:batch", `{"jobs": [{"jobType": "email"}]}`},
			{"POST /v1/jobs/{jobId}/cancel", ""},
			{"POST /v1/queues/{queue}/pause", ""},
			{"PUT /v1/workflows/{name}", `{"steps": [{"name": "fetch", "job": {"type": "fetch"}}]}`},
			{"POST /v1/workflows/{name}/runs", `{}`},
			{"PUT /v1/tasks/{name}", sameProduct},
			{"POST /v1/contributors", `{"externalId": "e1", "name": "E", "skills": ["en"]}`},
			{"POST /v1/contributors/{contributorId}/keys", ""}, // the contributor's key, for the routes of its work
		}
		bodies := map[string]string{}
		for _, w := range writes {
			bodies[w.route] = w.body
		}
		s := New(Config{Client: b.client})
		served := map[string]route{}
		for _, rt := range s.routes {
			served[rt.Method+" "+rt.Path] = rt
		}
		role := func(rt route) docket.Role {
			switch rt.Perm {
			case permPublic:
				return ""
			case permLease:
				return docket.RoleWorker
			case permWork:
				return docket.RoleContributor
			}
			return docket.RoleAdmin
		}
		path := func(rt route) string {
			return pathParam.ReplaceAllStringFunc(rt.Path, func(m string) string {
				if v, ok := values[m[1:len(m)-1]]; ok {
					return v
				}
				return "0196e3a8-0000-7000-8000-000000000000" // a UUID no row has
			})
		}
		do := func(rt route, query string) *response {
			body, ok := bodies[rt.Method+" "+rt.Path]
			var b2 any
			if ok && body != "" {
				b2 = body
			} else if rt.Method != "GET" {
				b2 = "{}"
			}
			return b.do(t, role(rt), rt.Method, path(rt)+query, b2)
		}

		for _, w := range writes {
			k := w.route
			rt, ok := served[k]
			require.True(t, ok, "%s: the server does not serve it", k)
			before := readWhole(t, db)
			p := do(rt, "?zz=1").Problem(t, http.StatusBadRequest)
			require.Equal(t, []string{"zz"}, problemFields(p), k)
			require.Equal(t, before, readWhole(t, db), "%s?zz=1 wrote", k)
			r := do(rt, "")
			require.Less(t, r.Status, 300, "%s without the parameter: %s", k, r.Body)
			require.NotEqual(t, before, readWhole(t, db), "%s without the parameter wrote nothing: the check above cannot fail", k)
			switch k {
			case "POST /v1/contributors":
				var c contributorView
				r.JSON(t, &c)
				values["contributorId"] = c.ContributorID.String()
			case "POST /v1/contributors/{contributorId}/keys":
				var key contributorKeyView
				r.JSON(t, &key)
				b.keys[docket.RoleContributor] = key.Secret
			}
		}

		// Every route.
		before := readWhole(t, db)
		for _, rt := range s.routes {
			p := do(rt, "?zz=1").Problem(t, http.StatusBadRequest)
			require.Equal(t, []string{"zz"}, problemFields(p), "%s %s", rt.Method, rt.Path)
		}
		require.Equal(t, before, readWhole(t, db), "a refused request wrote")

		// The misspellings of the issue.
		p := b.do(t, docket.RoleViewer, "GET", "/v1/jobs?stat=DEAD", nil).Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"stat"}, problemFields(p))
		p = b.do(t, docket.RoleProducer, "POST", "/v1/jobs?idempotency_key=k2", `{"jobType": "email"}`).Problem(t, http.StatusBadRequest)
		require.Equal(t, []string{"idempotency_key"}, problemFields(p))
		require.Equal(t, before, readWhole(t, db), "a refused request wrote")
	})
}

// wholeDB is a database to read every row of.
type wholeDB struct {
	db     *sql.DB
	tables string // the query listing the tables
}

func openWhole(t *testing.T, backend, url string) *wholeDB {
	t.Helper()
	w := &wholeDB{tables: `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`}
	driver, dsn := "pgx", url
	if backend == "sqlite" {
		driver, dsn = "sqlite", strings.TrimPrefix(url, "sqlite:")+"?_pragma=busy_timeout(10000)"
		w.tables = `SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`
	}
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	w.db = db
	return w
}

// readWhole reads every row of every table: table → its rows, each
// printed, sorted.
func readWhole(t *testing.T, w *wholeDB) map[string][]string {
	t.Helper()
	ctx := context.Background()
	rows, err := w.db.QueryContext(ctx, w.tables)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		tables = append(tables, name)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, tables)
	out := map[string][]string{}
	for _, table := range tables {
		rows, err := w.db.QueryContext(ctx, `SELECT * FROM "`+table+`"`)
		require.NoError(t, err)
		cols, err := rows.Columns()
		require.NoError(t, err)
		var printed []string
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			printed = append(printed, fmt.Sprintf("%v", vals))
		}
		require.NoError(t, rows.Err())
		slices.Sort(printed)
		out[table] = printed
	}
	return out
}
