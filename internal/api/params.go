package api

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
)

// textMessage is the problem of a path or query value that is not text,
// in the words of store.TextMessage (the API stays behind the public
// boundary: TestPublicBoundary).
const textMessage = "must be UTF-8 text without the NUL character"

// checkParams refuses, before next runs (so nothing is read or written
// for it), a request whose parameters are not those of rt, naming every
// offending one in one problem:
//   - a query string that does not parse (a bad escape, a semicolon, more
//     parameters than Go reads: r.URL.Query would drop them, and a filter
//     or an idempotency column be silently ignored) is refused whole;
//   - a query parameter rt.Query does not name: a misspelt filter
//     (?stat=DEAD) would list every job, a misspelt option of a write
//     would act without it. No parameter is taken by every route
//     (lastEventId is the SSE streams' own);
//   - a parameter given more than once that rt.Lists does not name;
//   - a path value (the {names} of rt.Path) or a query value that is not
//     UTF-8 or holds NUL: no name, id or filter can, and PostgreSQL
//     refuses such a parameter (a 500 where SQLite found nothing).
//
// A value's meaning (a limit's range, a status's spelling) is the
// handler's to check.
func checkParams(rt route, next http.Handler) http.Handler {
	var names []string
	for rest := rt.Path; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			break
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			break
		}
		names = append(names, strings.TrimSuffix(rest[i+1:i+j], "..."))
		rest = rest[i+j+1:]
	}
	unknown := "is not a known query parameter (this endpoint takes none)"
	if len(rt.Query) > 0 {
		unknown = "is not a known query parameter (known: " + strings.Join(rt.Query, ", ") + ")"
	}
	once := oneValue(rt.Lists)
	bad := func(v string) bool { return !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var errs []FieldError
		for _, n := range names {
			if bad(r.PathValue(n)) {
				errs = append(errs, FieldError{Field: n, Message: textMessage})
			}
		}
		var q url.Values
		if r.URL.RawQuery != "" { // most requests, the lease calls among them, have none
			var err error
			if q, err = url.ParseQuery(r.URL.RawQuery); err != nil {
				writeProblem(w, badRequest("the query string is malformed: "+err.Error()))
				return
			}
		}
		for _, k := range slices.Sorted(maps.Keys(q)) {
			switch {
			case bad(k):
				errs = append(errs, FieldError{Field: strings.ToValidUTF8(strings.ReplaceAll(k, "\x00", "\uFFFD"), "\uFFFD"), Message: "(a query parameter's name) " + textMessage})
			case !slices.Contains(rt.Query, k):
				errs = append(errs, FieldError{Field: k, Message: unknown})
			case slices.ContainsFunc(q[k], bad):
				errs = append(errs, FieldError{Field: k, Message: textMessage})
			case len(q[k]) > 1 && !slices.Contains(rt.Lists, k):
				errs = append(errs, FieldError{Field: k, Message: once})
			}
		}
		if len(errs) > 0 {
			writeProblem(w, invalidFields(errs))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// oneValue is the problem of a parameter given more than one value, a
// route's lists being lists: "takes one value (only status and queue take
// lists)".
func oneValue(lists []string) string {
	switch len(lists) {
	case 0:
		return "takes one value"
	case 1:
		return "takes one value (only " + lists[0] + " takes a list)"
	}
	return "takes one value (only " + strings.Join(lists[:len(lists)-1], ", ") + " and " + lists[len(lists)-1] + " take lists)"
}
