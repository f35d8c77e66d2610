package api

import (
	"context"
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

// checkParams checks a request's parameters against rt's, naming every
// offending one:
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
// handler's to check, and one 400 names both kinds: when rt takes query
// parameters and every path value is text, next runs with the errors
// found here pending in the request (query hands them over with the
// values), to answer them with its own before it reads or writes
// anything. Otherwise the errors are answered here, before next runs: a
// route without query parameters has no values to check, and a path
// value that is not text is refused at once (next would pass it, a name
// or an id, to the store before naming it).
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
		pathBad := len(errs) > 0
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
		switch {
		case len(errs) == 0:
		case len(rt.Query) == 0 || pathBad:
			writeProblem(w, invalidFields(errs))
			return
		default:
			r = r.WithContext(context.WithValue(r.Context(), queryKey{}, &checkedQuery{values: q, errs: errs}))
		}
		next.ServeHTTP(w, r)
	})
}

// queryKey keys the checkedQuery of a request in its context.
type queryKey struct{}

// checkedQuery is the query of a request checkParams found errors in,
// as it parsed it, and the errors.
type checkedQuery struct {
	values url.Values
	errs   []FieldError
}

// query is r's query and the errors checkParams left pending for the
// handler (every parameter it does not take, given twice, not text),
// sorted by parameter. A handler that reads its query reads it here and
// answers a 400 naming these errors with those it finds in the values
// (queryErrors), before reading or writing anything: with any pending,
// a value may be one the handler must not use (not text).
func query(r *http.Request) (url.Values, []FieldError) {
	if c, ok := r.Context().Value(queryKey{}).(*checkedQuery); ok {
		return c.values, slices.Clip(c.errs)
	}
	return r.URL.Query(), nil
}

// queryErrors is the 400 naming errs, each field once (its first error:
// checkParams' before the handler's), in their order; nil for none.
func queryErrors(errs []FieldError) error {
	if len(errs) == 0 {
		return nil
	}
	return invalidFields(addFields(nil, errs...))
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
