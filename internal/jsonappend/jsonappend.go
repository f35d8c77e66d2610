// Package jsonappend holds what the hand-written JSON of docket's hot
// paths (the job events, the API's take and judgment answers) appends, so
// that each piece is written once and both sides of the public boundary
// (docs/dependencies.md) may use it.
package jsonappend

import (
	"bytes"
	"encoding/hex"
	"encoding/json"

	"github.com/google/uuid"
)

// UUID appends id in its canonical form (as uuid.UUID.String).
func UUID(b []byte, id uuid.UUID) []byte {
	var s [36]byte
	hex.Encode(s[0:8], id[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], id[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], id[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], id[8:10])
	s[23] = '-'
	hex.Encode(s[24:], id[10:])
	return append(b, s[:]...)
}

// Marshal is v's JSON as encoding/json writes it, without HTML escaping
// (`<` in an expression or a detail stays `<`) and without the trailing
// newline of an Encoder: the form docket stores (canonical definitions,
// compiled schemas) and answers.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
