package task

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/docket-run/docket/internal/jsonappend"
)

// Normalize returns a copy of t in canonical form, the form that is hashed
// and stored. Two templates with the same canonical form behave the same,
// so storing one when the other is the latest version is a no-op:
//
//   - Defaults are filled in (WithDefaults): an absent setting and its
//     default spelled out are the same content. A stored version is thus
//     self-describing: what it meant does not depend on the defaults of the
//     code that reads it.
//   - Skills and channels are sets: sorted, empty ones dropped.
//   - The order of display blocks, fields, options and box labels IS
//     significant (it is the order of the page), and text is kept as given.
//
// Numbers are re-encoded by encoding/json (1e2 and 100 are the same).
func Normalize(t *Template) *Template {
	out := t.WithDefaults()
	slices.Sort(out.Skills)
	slices.Sort(out.Channels)
	if len(out.Skills) == 0 {
		out.Skills = nil
	}
	if len(out.Channels) == 0 {
		out.Channels = nil
	}
	if len(out.Display) == 0 {
		out.Display = nil
	}
	for i := range out.Fields {
		f := &out.Fields[i]
		if len(f.Options) == 0 {
			f.Options = nil
		}
		if len(f.Labels) == 0 {
			f.Labels = nil
		}
	}
	return out
}

// Canonical returns the canonical JSON encoding of t: Normalize, then the
// fields in declaration order, no white space, no HTML escaping. It decodes
// (Decode) to a template with the same hash.
func Canonical(t *Template) ([]byte, error) {
	b, err := jsonappend.Marshal(Normalize(t))
	if err != nil {
		return nil, fmt.Errorf("encode task template: %w", err)
	}
	return b, nil
}

// Hash returns "sha256:" and the hex SHA-256 of the canonical encoding: the
// content hash that decides whether a template is a new version.
func Hash(t *Template) (string, error) {
	b, err := Canonical(t)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
