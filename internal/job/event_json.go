package job

import (
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/google/uuid"
)

// MarshalJSON encodes d exactly as encoding/json would encode its fields,
// without reflection: a state_changed row of a large batch is encoded in
// the transaction that makes it, on the hot path of every backend.
func (d StateChangedData) MarshalJSON() ([]byte, error) {
	return d.AppendJSON(nil), nil
}

// AppendJSON appends the JSON encoding of d to b, growing b once, up front,
// to the size the encoding will about have (a batch of 2,000 transitions
// is ~260 kB: growing by doubling copied it several times over).
func (d StateChangedData) AppendJSON(b []byte) []byte {
	b = slices.Grow(b, d.sizeHint())
	b = append(b, `{"transitions":`...)
	if d.Transitions == nil {
		return append(b, "null}"...)
	}
	b = append(b, '[')
	for i := range d.Transitions {
		if i > 0 {
			b = append(b, ',')
		}
		t := &d.Transitions[i]
		b = append(b, `{"jobId":"`...)
		b = appendUUID(b, t.JobID)
		b = append(b, `","jobType":`...)
		b = appendJSONString(b, t.JobType)
		b = append(b, `,"queue":`...)
		b = appendJSONString(b, t.Queue)
		b = append(b, `,"from":`...)
		b = appendJSONString(b, string(t.From))
		b = append(b, `,"to":`...)
		b = appendJSONString(b, string(t.To))
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(t.Attempt), 10)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// sizeHint is about the length of d's encoding: at least it, and at most
// a byte more per transition and one, for strings that need no escaping and
// attempts below 100.
func (d StateChangedData) sizeHint() int {
	if d.Transitions == nil {
		return len(`{"transitions":null}`)
	}
	n := len(`{"transitions":[]}`)
	for i := range d.Transitions {
		t := &d.Transitions[i]
		n += len(`{"jobId":"","jobType":"","queue":"","from":"","to":"","attempt":99},`) +
			36 + len(t.JobType) + len(t.Queue) + len(t.From) + len(t.To)
	}
	return n
}

// appendJSONString appends s as a JSON string the way encoding/json writes
// it: printable ASCII other than the quote, the backslash and the HTML
// characters as it is, anything else through encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendUUID appends id in its canonical form (as uuid.UUID.String).
func appendUUID(b []byte, id uuid.UUID) []byte {
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
