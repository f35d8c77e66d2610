package api

import (
	"testing"

	"github.com/google/uuid"
)

// FuzzCursor: any cursor string either decodes into an id that encodes back
// to the same cursor, or is refused as a problem naming the cursor — never
// a panic.
func FuzzCursor(f *testing.F) {
	f.Add(encodeCursor(uuid.Must(uuid.NewV7())))
	for _, s := range []string{"", "x", "AAAA", "____", "=", "AZaz09-_AZaz09-_AZaz09", "not base64!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := decodeCursor(s)
		if err != nil {
			return
		}
		if got := encodeCursor(id); got != s {
			t.Fatalf("cursor %q decodes to %s, which encodes to %q", s, id, got)
		}
	})
}

// FuzzQueueCursor: any cursor string either decodes into a queue name
// that encodes back to the same cursor, or is refused as a problem naming
// the cursor — never a panic.
func FuzzQueueCursor(f *testing.F) {
	f.Add(encodeNameCursor("team/reports"))
	for _, s := range []string{"", "x", "bm90IGEgcXVldWU", "____", "=", "not base64!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, err := decodeQueueCursor(s)
		if err != nil {
			if p := problemFor(err); len(p.Errors) != 1 || p.Errors[0].Field != "cursor" {
				t.Fatalf("cursor %q refused without naming cursor: %v", s, err)
			}
			return
		}
		if got := encodeNameCursor(name); got != s {
			t.Fatalf("cursor %q decodes to %q, which encodes to %q", s, name, got)
		}
	})
}
