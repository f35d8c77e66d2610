package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Empty is the request type of endpoints without a body.
type Empty struct{}

// optionalBody is implemented by request types whose body may be absent
// (then the zero value is validated).
type optionalBody interface {
	bodyOptional()
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
		if _, empty := any(req).(*Empty); !empty {
			_, optional := any(req).(optionalBody)
			if err := decodeBody(w, r, s.cfg.MaxBodyBytes, optional, req); err != nil {
				s.fail(w, r, err)
				return
			}
			if v, ok := any(req).(Validator); ok {
				if err := v.Validate(); err != nil {
					s.fail(w, r, err)
					return
				}
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

// fail writes the problem for err, logging server errors.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	p := problemFor(err)
	if p.Status >= 500 {
		s.cfg.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	writeProblem(w, p)
}

func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, optional bool, into any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return problem(http.StatusUnsupportedMediaType, "media-type", "Unsupported media type", "send application/json")
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
			return nil
		}
		return badRequest("the body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return jsonProblem(err)
	}
	// Only whitespace may follow the object. dec.More would miss a stray
	// closing delimiter ("{...}}" or "{...} ]").
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("the body has data after the JSON object")
	}
	return nil
}

// jsonProblem turns a decoding error into a 400 naming the field.
func jsonProblem(err error) *Problem {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syntax):
		return badRequest(fmt.Sprintf("malformed JSON at byte %d: %v", syntax.Offset, err))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(body)"
		}
		return invalidField(field, fmt.Sprintf("must be %s, not %s", jsonKind(typ.Type.Kind().String()), typ.Value))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed JSON: unexpected end of input")
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		f = strings.Trim(f, `"`)
		return invalidField(f, "is not a known field")
	}
	return badRequest("malformed JSON: " + err.Error())
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
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
