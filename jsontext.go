package docket

import (
	"bytes"
	"encoding/json"
	"strings"
)

// jsonHasNUL reports whether a valid JSON text has a string or key holding
// U+0000. PostgreSQL's jsonb cannot store it, so docket refuses it on every
// backend alike — at the edge, never in the middle of a batch.
func jsonHasNUL(data []byte) bool {
	if !bytes.Contains(data, []byte(`\u0000`)) {
		return false // the only way to write NUL in JSON
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && strings.ContainsRune(s, 0) {
			return true
		}
	}
}

const nulMessage = `must not contain the NUL character (\u0000) in a string`
