// Package jsonappend holds what the hand-written JSON of docket's hot
// paths (the job events, the API's take and judgment answers) appends, so
// that each piece is written once and both sides of the public boundary
// (docs/dependencies.md) may use it.
package jsonappend

import (
	"encoding/hex"

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
