package web

import (
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/task"
)

// FuzzJobsQuery: any query string of the jobs list gives either a job to
// open, or list parameters, or errors each naming a field — never a panic,
// never an invalid state passed on to the store.
func FuzzJobsQuery(f *testing.F) {
	for _, seed := range []string{"", "state=DEAD", "state=dead&queue=mail&type=email", "id=" + uuid.NewString(),
		"id=nope&state=DONE&cursor=abc", "args=args.user.id:42", "args=args.a..b:", "args=user:1", "cursor=AZITy0_GcyOnSZTXLmeqYA", "cursor=AAAAAAAAAAAAAAAAAAAAAA", "state=%00", "id=00000000-0000-0000-0000-000000000000"} {
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
			if !ok || (field != "id" && field != "state" && field != "cursor" && field != "args") {
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
			if (p.Args != nil) != (strings.TrimSpace(q.Get("args")) != "") {
				t.Fatalf("args %q gave %+v", q.Get("args"), p.Args)
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

// FuzzJudgmentFromForm: whatever form a work page is sent, the judgment
// read from it is a JSON object holding only the task's fields, each
// problem names a field of the task and that field is left out, and the
// task's validation (the API's) then accepts or refuses it without a
// panic — a form can give nothing a judgment posted to the API could not.
func FuzzJudgmentFromForm(f *testing.F) {
	tmpl, err := docket.ParseTask([]byte(workTask))
	if err != nil {
		f.Fatal(err)
	}
	ct, err := task.Compile(tmpl)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{"", "f.same=yes", "f.same=yes&f.same=no", "f.count=1e400&f.stars=x&f.boxes=%5B", "f.count=NaN&f.count=2",
		"f.tags=blurry&f.tags=&f.tags=blurry&f.note=a%0D%0Ab", `f.boxes=[{"label":"logo","x":0.1,"y":0.1,"w":0.2,"h":0.2}]&f.same=no`,
		"f.boxes={}&f.stars=3&f.count=-0x1p3", "csrf=x&f.unknown=1&f.=2"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		form, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		data, problems := judgmentFromForm(ct.Fields, form)
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil {
			t.Fatalf("not a JSON object: %s: %v", data, err)
		}
		for name := range obj {
			if _, ok := ct.Field(name); !ok {
				t.Fatalf("judgment holds %q, no field of the task", name)
			}
			if _, bad := problems[name]; bad {
				t.Fatalf("field %q has problems %v but is in the judgment", name, problems[name])
			}
		}
		for name, msgs := range problems {
			if _, ok := ct.Field(name); !ok || len(msgs) == 0 {
				t.Fatalf("problem %q %v names no field", name, msgs)
			}
		}
		if _, err := ct.ParseJudgment(data); err != nil {
			var ve *docket.TaskValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("validation failed without naming a field: %v", err)
			}
		}
	})
}

// FuzzDeadRetryForm: a bulk retry form either names its problems, each by
// field, or is a selection of at most a page of distinct non-nil ids, or a
// filter that is not empty — never everything.
func FuzzDeadRetryForm(f *testing.F) {
	for _, seed := range []string{"", "scope=selected&id=" + uuid.NewString(), "scope=selected&id=x", "scope=filter", "scope=filter&queue=a&confirm=retry",
		"scope=filter&type=t&confirm=+RETRY+", "scope=selected&id=00000000-0000-0000-0000-000000000000", "scope=filter&queue=+&confirm=retry"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		form, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		dr, errs := parseDeadRetry(form)
		if errs != nil {
			if dr != nil {
				t.Fatal("a retry with errors")
			}
			for _, e := range errs {
				field, _, ok := strings.Cut(e, ": ")
				if !ok || (field != "id" && field != "filter" && field != "confirm" && field != "scope") {
					t.Fatalf("error %q names no field", e)
				}
			}
			return
		}
		if dr.Filtered {
			if dr.Queue == "" && dr.Type == "" {
				t.Fatal("an empty filter passed")
			}
			return
		}
		if len(dr.IDs) == 0 || len(dr.IDs) > pageSize {
			t.Fatalf("%d ids", len(dr.IDs))
		}
		seen := map[uuid.UUID]bool{}
		for _, id := range dr.IDs {
			if id == uuid.Nil || seen[id] {
				t.Fatalf("id %s nil or twice", id)
			}
			seen[id] = true
		}
	})
}

// FuzzEventRefs: the ticked event dead letters decode to non-empty
// consumer and event ids that encode back to what was sent, or to one
// problem naming the field.
func FuzzEventRefs(f *testing.F) {
	for _, seed := range []string{"", "event=a/b", "event=a%252Fb/c", "event=/b", "event=a/", "event=%zz/b", "event=a/b&event=c/d"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		form, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		refs, errs := parseEventRefs(form)
		if errs != nil {
			if refs != nil || len(errs) != 1 || !strings.HasPrefix(errs[0], "event: ") {
				t.Fatalf("refs %v errs %v", refs, errs)
			}
			return
		}
		if len(refs) != len(form["event"]) || len(refs) > deadEvents {
			t.Fatalf("%d refs of %d values", len(refs), len(form["event"]))
		}
		for _, r := range refs {
			if r[0] == "" || r[1] == "" {
				t.Fatalf("empty ref %q", r)
			}
			back := eventRef(&docket.DeadLetter{Consumer: r[0], EventID: r[1]})
			again, errs := parseEventRefs(url.Values{"event": {back}})
			if errs != nil || again[0] != r {
				t.Fatalf("%q does not round-trip: %q %v", r, again, errs)
			}
		}
	})
}

// FuzzArgsSearch: any search of the jobs list by payload value gives a
// valid ArgsMatch or an error naming the args field — never a panic, and
// what parses says the same thing written back.
func FuzzArgsSearch(f *testing.F) {
	for _, seed := range []string{"args.user.id:42", `args.user.id:"42"`, "args.a:", "args.a:b:c d", "args.:x", "args.a..b:1",
		"user.id:1", "args.a", `args.a:"x`, `args.a:"\u00e9"`, "args.a-b_C.9:true", "args." + strings.Repeat("k.", 9) + "k:1"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseArgsSearch(s)
		if err != nil {
			if m != nil || !strings.HasPrefix(err.Error(), "args: ") {
				t.Fatalf("%q: %v, %+v", s, err, m)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("%q parsed to an invalid match %+v: %v", s, m, err)
		}
		if m.Within != argsSearchWithin {
			t.Fatalf("within %d", m.Within)
		}
		value := m.Value
		if m.StringOnly {
			b, _ := json.Marshal(m.Value)
			value = string(b)
		}
		again, err := parseArgsSearch(argsPrefix + strings.Join(m.Path, ".") + ":" + value)
		if err != nil || again.Value != m.Value || again.StringOnly != m.StringOnly || strings.Join(again.Path, ".") != strings.Join(m.Path, ".") {
			t.Fatalf("%q: %+v written back parses to %+v, %v", s, m, again, err)
		}
	})
}

// FuzzDeliveryRefs: the ticked deliveries of a form are named problems or
// pairs of ids that write back to the values posted.
func FuzzDeliveryRefs(f *testing.F) {
	a, b := uuid.NewString(), uuid.NewString()
	for _, seed := range []string{"", "delivery=" + a + "/" + b, "delivery=x/y", "delivery=" + a, "delivery=" + a + "/" + b + "/c",
		"delivery=" + strings.ToUpper(a) + "/" + b, "delivery={" + a + "}/" + b} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		form, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		refs, errs := parseDeliveryRefs(form)
		if errs != nil {
			if refs != nil || len(errs) != 1 || !strings.HasPrefix(errs[0], "delivery: ") {
				t.Fatalf("refs %v errs %v", refs, errs)
			}
			return
		}
		if len(refs) != len(form["delivery"]) || len(refs) == 0 || len(refs) > bulkMax {
			t.Fatalf("%d refs of %d values", len(refs), len(form["delivery"]))
		}
		for i, r := range refs {
			back := deliveryRef(deadDelivery{Webhook: &docket.Webhook{ID: r[0]}, WebhookDelivery: &docket.WebhookDelivery{ID: r[1]}})
			if !strings.EqualFold(back, form["delivery"][i]) {
				t.Fatalf("%q read as %v, written back %q", form["delivery"][i], r, back)
			}
		}
	})
}

// FuzzBulkForm: a bulk action's form is refused with problems each
// naming a field, or is a retry or cancel of 1 to bulkMax distinct job
// ids, or of a filter that filters something — never of every job.
func FuzzBulkForm(f *testing.F) {
	a := uuid.NewString()
	for _, seed := range []string{"", "action=retry&scope=filter", "action=retry&scope=filter&state=DEAD", "action=cancel&scope=filter&queue=+",
		"action=retry&scope=filter&args=args.a:1", "action=retry&scope=filter&args=nope&state=x", "action=retry&scope=selected&id=" + a + "&id=" + a,
		"action=delete&scope=all", "action=retry&scope=selected&id=00000000-0000-0000-0000-000000000000", "action=retry&scope=selected"} {
		f.Add(seed)
	}
	fields := []string{"action", "scope", "id", "filter", "state", "args"}
	f.Fuzz(func(t *testing.T, raw string) {
		form, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		d, ids, p := parseBulkForm(form)
		if len(d.Errors) > 0 {
			if ids != nil || p != nil {
				t.Fatalf("errors %v with ids %v, params %+v", d.Errors, ids, p)
			}
			for _, e := range d.Errors {
				field, _, _ := strings.Cut(e, ": ")
				if !slices.Contains(fields, field) {
					t.Fatalf("error %q names no field", e)
				}
			}
			return
		}
		if d.Action != "retry" && d.Action != "cancel" {
			t.Fatalf("action %q accepted", d.Action)
		}
		switch {
		case p != nil:
			if len(ids) != 0 || p.Limit != bulkMax || len(p.States)+len(p.Types)+len(p.Queues) == 0 && p.Args == nil {
				t.Fatalf("filter %+v, ids %v", p, ids)
			}
		default:
			seen := map[uuid.UUID]bool{}
			for _, id := range ids {
				if id == uuid.Nil || seen[id] {
					t.Fatalf("ids %v", ids)
				}
				seen[id] = true
			}
			if len(ids) == 0 || len(ids) > bulkMax {
				t.Fatalf("%d ids", len(ids))
			}
		}
	})
}

// FuzzForgiveForm: the forgive form passes only when confirm is the word
// (any case, spaces around it), and otherwise names the confirm field.
func FuzzForgiveForm(f *testing.F) {
	for _, seed := range []string{"", "confirm=forgive", "confirm=+FORGIVE+", "confirm=forgiv", "confirm=forgive&confirm=no", "confirm=%00forgive", "x=forgive"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		form, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		errs := parseForgive(form)
		confirmed := strings.EqualFold(strings.TrimSpace(form.Get("confirm")), forgiveConfirm)
		if errs == nil {
			if !confirmed {
				t.Fatalf("%q passed unconfirmed", raw)
			}
			return
		}
		if confirmed {
			t.Fatalf("%q refused though confirmed: %v", raw, errs)
		}
		for _, e := range errs {
			if !strings.HasPrefix(e, "confirm: ") {
				t.Fatalf("error %q names no field", e)
			}
		}
	})
}

// FuzzEventCursor: any ?events= cursor either decodes into a dead letter's
// key that encodes back to the same cursor, or is refused — never a panic.
func FuzzEventCursor(f *testing.F) {
	f.Add(docket.DeadLetterCursor(&docket.DeadLetter{CreatedAt: time.UnixMicro(1700000000123456).UTC(), Consumer: "qc", EventID: "10-0"}))
	for _, s := range []string{"", "zz", "WzEsImEiXQ", "WzEsImEiLCJiIl0", "W10", "bnVsbA", "=", "not base64!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, ok := docket.ParseDeadLetterCursor(s)
		if !ok {
			return
		}
		if got := docket.DeadLetterCursor(e); got != s {
			t.Fatalf("cursor %q decodes to %+v, which encodes to %q", s, e, got)
		}
	})
}
