package web

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
)

// FuzzJobsQuery: any query string of the jobs list gives either a job to
// open, or list parameters, or errors each naming a field — never a panic,
// never an invalid state passed on to the store.
func FuzzJobsQuery(f *testing.F) {
	for _, seed := range []string{"", "state=DEAD", "state=dead&queue=mail&type=email", "id=" + uuid.NewString(),
		"id=nope&state=DONE&cursor=abc", "cursor=AZITy0_GcyOnSZTXLmeqYA", "cursor=AAAAAAAAAAAAAAAAAAAAAA", "state=%00", "id=00000000-0000-0000-0000-000000000000"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		d, p, open := parseJobsQuery(q)
		if open != uuid.Nil {
			if len(d.Errors) != 0 {
				t.Fatalf("opening %s with errors %v", open, d.Errors)
			}
			return
		}
		for _, e := range d.Errors {
			field, _, ok := strings.Cut(e, ": ")
			if !ok || (field != "id" && field != "state" && field != "cursor") {
				t.Fatalf("error %q names no field", e)
			}
		}
		if len(d.Errors) == 0 {
			for _, st := range p.States {
				if !st.Valid() {
					t.Fatalf("invalid state %q passed on without an error", st)
				}
			}
			if p.Limit != pageSize+1 {
				t.Fatalf("limit %d", p.Limit)
			}
		}
	})
}

// FuzzSessionCookie: no cookie value but the one issued names a session.
func FuzzSessionCookie(f *testing.F) {
	s, err := newSessions([]byte("0123456789abcdef0123456789abcdef"), time.Hour, time.Now)
	if err != nil {
		f.Fatal(err)
	}
	ss := s.create(&docket.APIKey{Name: "a", Role: docket.RoleViewer}, "secret")
	good := s.cookieValue(ss.id)
	for _, seed := range []string{"", ".", "abc.def", good + "x", ss.id, ss.id + ".", "." + s.sign(ss.id), strings.ToUpper(good)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := s.lookup(v)
		if (got != nil) != (v == good) {
			t.Fatalf("lookup(%q) = %v", v, got)
		}
	})
}

// FuzzRunsQuery: any query string of the runs list gives list parameters
// or errors each naming a field — never a panic, never an invalid state
// or a nil-id cursor passed on to the store.
func FuzzRunsQuery(f *testing.F) {
	for _, seed := range []string{"", "state=FAILED", "state=failed&workflow=fan", "state=DONE&cursor=x",
		"cursor=AZITy0_GcyOnSZTXLmeqYA", "cursor=AAAAAAAAAAAAAAAAAAAAAA", "state=%00", "workflow=%20%20"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		d, p := parseRunsQuery(q)
		for _, e := range d.Errors {
			field, _, ok := strings.Cut(e, ": ")
			if !ok || (field != "state" && field != "cursor") {
				t.Fatalf("error %q names no field", e)
			}
		}
		if len(d.Errors) == 0 {
			for _, st := range p.States {
				if !st.Valid() {
					t.Fatalf("invalid state %q passed on without an error", st)
				}
			}
			if q.Get("cursor") != "" && p.Before == uuid.Nil {
				t.Fatalf("cursor %q dropped without an error", q.Get("cursor"))
			}
			if p.Limit != pageSize+1 || p.Workflow != strings.TrimSpace(q.Get("workflow")) {
				t.Fatalf("params %+v", p)
			}
		}
	})
}
