package api

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, to read a database whole
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// pathParam matches the {names} of a route's path.
var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// TestRouteQueryParameters: on every route of the table, a query
// parameter the route does not declare is a 400 naming it (with every
// other), before the handler runs; one it declares passes, once, or more
// than once when it is a list. A route added to the table is covered.
func TestRouteQueryParameters(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	require.NotEmpty(t, s.routes)
	for _, rt := range s.routes {
		for _, name := range rt.Lists {
			require.Contains(t, rt.Query, name, "%s %s: a list that is not a parameter", rt.Method, rt.Path)
		}
		require.Len(t, slices.Compact(slices.Sorted(slices.Values(rt.Query))), len(rt.Query), "%s %s: a parameter declared twice", rt.Method, rt.Path)
		ran := false
		mux := http.NewServeMux()
		mux.Handle(rt.Method+" "+rt.Path, checkParams(rt, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			ran = true
			w.WriteHeader(http.StatusNoContent)
		})))
		path := pathParam.ReplaceAllString(rt.Path, "x")
		send := func(query string) *httptest.ResponseRecorder {
			ran = false
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, httptest.NewRequest(rt.Method, path+"?"+query, nil))
			return w
		}
		refused := func(query string, fields ...string) *Problem {
			t.Helper()
			w := send(query)
			require.Equal(t, http.StatusBadRequest, w.Code, "%s %s?%s: %s", rt.Method, rt.Path, query, w.Body)
			require.False(t, ran, "%s %s?%s: the handler ran", rt.Method, rt.Path, query)
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
	}
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
