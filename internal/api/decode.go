package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/docket-run/docket/internal/jsonfield"

	"github.com/docket-run/docket/remote"
)

// Empty is the request type of endpoints without a body.
type Empty struct{}

// optionalBody is implemented by request types whose body may be absent
// (then the zero value is validated).
type optionalBody interface {
	bodyOptional()
}

// preparer is implemented by request types whose validation needs the
// request (a path value) or the server (the CEL environment): prepare runs
// before the body is decoded.
type preparer interface {
	prepare(s *Server, r *http.Request)
}

// ownedThroughout is implemented by request types whose body is the API's
// own JSON at every level (a workflow definition), not only at the top
// (where a job's payload is the user's): a key repeated at any depth is
// refused, named by its path.
type ownedThroughout interface {
	ownedThroughout()
}

// Validator is implemented by request types that check themselves after
// decoding; the error is usually a *Problem naming the field.
type Validator interface {
	Validate() error
}

// endpoint adapts a typed handler: the body (if Req is not Empty) is
// decoded strictly — unknown fields, trailing data and malformed JSON are
// 400s naming what is wrong, a body over the limit is 413 — then validated,
// then fn runs; its error becomes a problem, its response JSON with status.
func endpoint[Req, Resp any](s *Server, fn func(ctx context.Context, r *http.Request, req *Req) (int, *Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req := new(Req)
		if p, ok := any(req).(preparer); ok {
			p.prepare(s, r)
		}
		if _, empty := any(req).(*Empty); !empty {
			_, optional := any(req).(optionalBody)
			if err := decodeBody(w, r, s.cfg.MaxBodyBytes, optional, req); err != nil {
				s.fail(w, r, err)
				return
			}
		}
		status, resp, err := fn(r.Context(), r, req)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, status, resp)
	}
}

// fail writes the problem for err, logging server errors: an unreachable
// database at warning level (an outage the operator sees on /healthz
// too, not a bug; each request logs it once), any other at error level.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	p := problemFor(err)
	switch {
	case p.Type == problemBase+"database-unavailable":
		s.cfg.Logger.Warn("request failed: the database is unavailable", "method", r.Method, "path", remote.RedactLeasePath(r.URL.Path), "error", err)
	case p.Status >= 500:
		s.cfg.Logger.Error("request failed", "method", r.Method, "path", remote.RedactLeasePath(r.URL.Path), "error", err)
	}
	writeProblem(w, p)
}

func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, optional bool, into any) error {
	if err := refuseContentEncoding(w, r); err != nil {
		return err
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return problem(http.StatusUnsupportedMediaType, "media-type", "Unsupported media type", "send application/json")
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return tooLarge(limit)
		}
		return badRequest("could not read the body: " + err.Error())
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			if v, ok := into.(Validator); ok {
				return v.Validate() // the zero value, with what prepare set
			}
			return nil
		}
		return bodyProblem("is empty; send a JSON object")
	}
	return decodeJSON(body, into)
}

// refuseContentEncoding is the 415 for a body in a content coding
// (Content-Encoding: gzip, say), with Accept-Encoding: identity as RFC 9110
// asks: bodies are read as sent, and compressed bytes were taken for
// malformed JSON ("invalid character"), a 400 that said nothing of why.
func refuseContentEncoding(w http.ResponseWriter, r *http.Request) error {
	for _, v := range r.Header.Values("Content-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			if c := strings.TrimSpace(part); c != "" && !strings.EqualFold(c, "identity") {
				w.Header().Set("Accept-Encoding", "identity")
				return problem(http.StatusUnsupportedMediaType, "media-type", "Unsupported media type",
					fmt.Sprintf("Content-Encoding %q is not supported: send the body uncompressed", c))
			}
		}
	}
	return nil
}

// decodeJSON decodes data, one JSON value, into into strictly and reports
// every invalid field at once: malformed JSON or trailing data is a 400 on
// its own; otherwise each repeated key, unknown field and value of the
// wrong type is named, then whatever into's Validate finds about the other
// fields.
func decodeJSON(data []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	// Decode goes on past a wrong type or an unknown field (returning the
	// first), so into holds every other field for Validate.
	derr := dec.Decode(into)
	var typ *json.UnmarshalTypeError
	_, unknown := jsonfield.Unknown(derr)
	if derr != nil && !errors.As(derr, &typ) && !unknown {
		return jsonProblem(derr)
	}
	// Only whitespace may follow the object. dec.More would miss a stray
	// closing delimiter ("{...}}" or "{...} ]").
	if _, err := dec.Token(); err != io.EOF {
		return bodyProblem("has data after the JSON object")
	}
	dups, keys := scanKeys(data)
	if _, deep := into.(ownedThroughout); deep {
		dups = scanAllKeys(data)
	}
	if variants := caseVariants(into, keys); variants != nil {
		return withoutVariants(data, into, addFields(dups, variants...))
	}
	errs := dups
	if derr != nil {
		if len(keys) == 0 {
			errs = addFields(errs, jsonProblem(derr).Errors...)
		}
		// One field at a time, to name each wrong one.
		var raw map[string]json.RawMessage
		_ = json.Unmarshal(data, &raw)
		var perKey []FieldError // added once: addFields per key costs the square of the keys
		for _, k := range keys {
			one, _ := json.Marshal(map[string]json.RawMessage{k: raw[k]})
			d := json.NewDecoder(bytes.NewReader(one))
			d.DisallowUnknownFields()
			if err := d.Decode(reflect.New(reflect.TypeOf(into).Elem()).Interface()); err != nil {
				fe := jsonProblem(err).Errors
				if len(fe) == 0 {
					fe = []FieldError{{Field: k, Message: "is not valid: " + err.Error()}}
				}
				perKey = append(perKey, fe...)
			}
		}
		errs = addFields(errs, perKey...)
	}
	if v, ok := into.(Validator); ok {
		if err := v.Validate(); err != nil {
			p := problemFor(err)
			if len(p.Errors) == 0 && len(errs) == 0 {
				return err
			}
			errs = addFields(errs, p.Errors...)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return invalidFields(errs)
}

// caseVariants names each of keys (a body's top-level keys) that into,
// a struct, has no field of, as spelled: encoding/json takes a key for the
// field whose name it matches in any case ("PROGRESS", "leaseseconds"),
// where docket's fields are spelled one way (docs/api.md) and every other
// key is unknown.
func caseVariants(into any, keys []string) []FieldError {
	var fe []FieldError
	if names := fieldNames(reflect.TypeOf(into)); names != nil {
		for _, k := range keys {
			if !names[k] {
				if k == "" {
					k = `""` // the empty key, named as unknown fields name it
				}
				fe = append(fe, FieldError{Field: k, Message: "is not a known field"})
			}
		}
	}
	return fe
}

// withoutVariants decodes data again without the keys errs names (case
// variants, and repeated keys: the keys a decoder would have taken the
// value of, wrongly) into a zeroed into, so that a field given only as a
// variant is missing (into's other fields are kept), and answers one problem with errs and whatever else
// is wrong. It is the rare path: no client of docket's spells a field
// otherwise.
func withoutVariants(data []byte, into any, errs []FieldError) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return jsonProblem(err)
	}
	for _, fe := range errs {
		delete(obj, fe.Field)
		if fe.Field == `""` {
			delete(obj, "")
		}
	}
	rest, err := json.Marshal(obj)
	if err != nil {
		return jsonProblem(err)
	}
	// Only the JSON fields: an unexported one holds what prepare set.
	v := reflect.ValueOf(into).Elem()
	for _, f := range reflect.VisibleFields(v.Type()) {
		if f.IsExported() && !f.Anonymous {
			v.FieldByIndex(f.Index).SetZero()
		}
	}
	if err := decodeJSON(rest, into); err != nil {
		p := problemFor(err)
		if len(p.Errors) == 0 {
			return err
		}
		errs = addFields(errs, p.Errors...)
	}
	return invalidFields(errs)
}

// fieldNames is the set of JSON names of the fields of t, a struct or a
// pointer to one, as encoding/json names them (tag, else the Go name;
// embedded structs' fields promoted); nil when t is no struct or decodes
// itself.
func fieldNames(t reflect.Type) map[string]bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if m, ok := fieldNameCache.Load(t); ok { // every body's decoding asks
		return m.(map[string]bool)
	}
	var names map[string]bool
	if t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		names = map[string]bool{}
		for _, f := range reflect.VisibleFields(t) {
			if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
				continue // its fields are visible themselves
			}
			if name, ok := jsonName(f); ok {
				names[name] = true
			}
		}
	}
	fieldNameCache.Store(t, names)
	return names
}

// jsonName is the name encoding/json gives the field f (its tag's, else
// its Go name); false for a field it leaves out (unexported, "-").
func jsonName(f reflect.StructField) (string, bool) {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	switch {
	case !f.IsExported() || name == "-":
		return "", false
	case name == "":
		return f.Name, true
	}
	return name, true
}

// fieldNameCache holds fieldNames by type.
var fieldNameCache sync.Map

// addFields appends the errors of fields errs does not name yet: a field
// is named once, by the first thing found wrong with it.
func addFields(errs []FieldError, more ...FieldError) []FieldError {
	if len(errs)+len(more) <= addFieldsLinear {
		for _, e := range more {
			if !slices.ContainsFunc(errs, func(o FieldError) bool { return o.Field == e.Field }) {
				errs = append(errs, e)
			}
		}
		return errs
	}
	named := make(map[string]bool, len(errs)+len(more))
	for _, e := range errs {
		named[e.Field] = true
	}
	for _, e := range more {
		if !named[e.Field] {
			named[e.Field] = true
			errs = append(errs, e)
		}
	}
	return errs
}

// addFieldsLinear is how many fields addFields compares one by one; past
// it, a set (a body of 100,000 unknown keys took minutes comparing each
// with all before it).
const addFieldsLinear = 32

// scanKeys reads the keys of data's top-level object, the API's own level:
// it returns a field error for every key the object repeats and its keys in
// order, each once. Nested values (a job's payload, a result, metadata) are
// the user's JSON and are skipped unread, whatever keys they repeat; a batch
// item is an object of its own, scanned when it is decoded. data is valid
// JSON; anything but an object has no keys.
//
// It is one pass over the bytes that allocates only for the keys, so the
// common body, which repeats nothing, costs little beside its decoding.
func scanKeys(data []byte) (dups []FieldError, top []string) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, nil
	}
	i++
	var seen map[string]bool // once there are scanKeysLinear keys
	for {
		i = skipSpace(data, i)
		if i >= len(data) || data[i] == '}' {
			return dups, top
		}
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
		end := skipString(data, i)
		if end < 0 {
			return dups, top
		}
		key := jsonKey(data[i:end])
		if seen == nil && len(top) == scanKeysLinear {
			// Many keys (unknown fields, say): look them up in a map,
			// so a large body costs linear time.
			seen = make(map[string]bool, 2*len(top))
			for _, k := range top {
				seen[k] = true
			}
		}
		var repeated bool
		if seen != nil {
			repeated = seen[key]
			seen[key] = true
		} else {
			repeated = slices.Contains(top, key)
		}
		if repeated {
			name := key
			if name == "" {
				name = `""` // the empty key, named as unknown fields name it
			}
			if !slices.ContainsFunc(dups, func(e FieldError) bool { return e.Field == name }) {
				dups = append(dups, FieldError{Field: name, Message: "appears more than once"})
			}
		} else {
			top = append(top, key)
		}
		i = skipSpace(data, end)
		if i < len(data) && data[i] == ':' {
			i++
		}
		i = skipValue(data, skipSpace(data, i))
		if i < 0 {
			return dups, top
		}
	}
}

// scanKeysLinear is how many keys scanKeys compares one by one before it
// indexes them.
const scanKeysLinear = 16

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string starting at data[i]
// (a '"'), or -1 when there is none.
func skipString(data []byte, i int) int {
	if i >= len(data) || data[i] != '"' {
		return -1
	}
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipValue returns the index just past the value starting at data[i],
// nested objects and arrays included, or -1 when data ends first.
func skipValue(data []byte, i int) int {
	depth := 0
	for i < len(data) {
		switch c := data[i]; c {
		case '"':
			if i = skipString(data, i); i < 0 {
				return -1
			}
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
			if depth < 0 {
				return i // the end of the enclosing object: no value
			}
		case ',':
			if depth == 0 {
				return i
			}
		default:
			if depth == 0 && (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
				return i // the end of a number, true, false or null
			}
		}
		i++
	}
	return i
}

// jsonKey is the text of a JSON string token, as encoding/json reads it;
// the decoder runs only for escapes or invalid UTF-8 (which it replaces).
func jsonKey(tok []byte) string {
	if !bytes.ContainsRune(tok, '\\') && utf8.Valid(tok) {
		return string(tok[1 : len(tok)-1])
	}
	var k string
	_ = json.Unmarshal(tok, &k)
	return k
}

// scanAllKeys walks a JSON value whose every level is the API's own (see
// ownedThroughout): it returns a field error for every key an object
// repeats, at any depth, named by its path (e.g. steps[2].name). data is
// valid JSON. It tokenizes the whole body, so only the request types that
// ask for it pay for it.
func scanAllKeys(data []byte) (dups []FieldError) {
	type frame struct {
		obj     bool
		wantKey bool
		keys    map[string]bool
		path    string
		cur     string // the path of the current value in an object
		idx     int    // the index of the current value in an array
	}
	var stack []*frame
	valuePath := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.obj {
			return f.cur
		}
		return fmt.Sprintf("%s[%d]", f.path, f.idx)
	}
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		if f := stack[len(stack)-1]; f.obj {
			f.wantKey = true
		} else {
			f.idx++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return dups
		}
		if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			f := stack[n-1]
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				valueDone()
				continue
			}
			key, _ := tok.(string)
			f.cur = key
			if key == "" {
				f.cur = `""` // the empty key, named as unknown fields name it
			}
			if f.path != "" {
				f.cur = f.path + "." + f.cur
			}
			if f.keys[key] {
				if !slices.ContainsFunc(dups, func(e FieldError) bool { return e.Field == f.cur }) {
					dups = append(dups, FieldError{Field: f.cur, Message: "appears more than once"})
				}
			} else {
				f.keys[key] = true
			}
			f.wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, wantKey: true, keys: map[string]bool{}, path: valuePath()})
		case json.Delim('['):
			stack = append(stack, &frame{path: valuePath()})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

// bodyProblem is the 400 of a body that is wrong as a whole (empty, not
// JSON, more than one value), naming the field "(body)" as a body that is
// not an object is: such a problem had no errors at all.
func bodyProblem(message string) *Problem {
	return invalidField("(body)", message)
}

// jsonProblem turns a decoding error into a 400 naming the field.
func jsonProblem(err error) *Problem {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syntax):
		return bodyProblem(fmt.Sprintf("is malformed JSON at byte %d: %v", syntax.Offset, err))
	case errors.As(err, &typ):
		field := withoutEmbedded(typ.Field)
		if field == "" {
			field = "(body)"
		}
		return invalidField(field, fmt.Sprintf("must be %s, not %s", jsonKind(typ.Type.Kind().String()), jsonValue(typ.Value)))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return bodyProblem("is malformed JSON: unexpected end of input")
	}
	if f, ok := jsonfield.Unknown(err); ok {
		if f == "" {
			f = `""` // the empty key
		}
		return invalidField(f, "is not a known field")
	}
	return bodyProblem("is malformed JSON: " + err.Error())
}

// withoutEmbedded is a path of an UnmarshalTypeError as the client wrote
// it: encoding/json puts the Go name of an embedded struct into the path
// ("LeaseRequest.max" for a leaseRequest's max), which no JSON key of the
// API spells (they begin with a lowercase letter); such components are
// dropped but for the last.
func withoutEmbedded(path string) string {
	parts := strings.Split(path, ".")
	out := parts[:0]
	for i, p := range parts {
		if i < len(parts)-1 && p != "" && p[0] >= 'A' && p[0] <= 'Z' {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ".")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "map", "struct", "ptr":
		return "an object"
	}
	return "of another type"
}

// jsonValue says what a wrong value was, from UnmarshalTypeError.Value:
// "number 1.5" is shown as 1.5, a kind with its article.
func jsonValue(v string) string {
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return n
	}
	switch v {
	case "string", "number", "bool", "array", "object":
		return jsonKind(map[string]string{"string": "string", "number": "float64", "bool": "bool", "array": "slice", "object": "map"}[v])
	}
	return v
}
