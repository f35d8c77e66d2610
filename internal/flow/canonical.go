package flow

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/docket-run/docket/internal/jsonappend"
)

// Normalize returns a copy of def in canonical form, the form that is
// hashed and stored. Two definitions with the same canonical form behave
// the same, so storing one when the other is the latest version is a no-op:
//
//   - Steps are sorted by name, and each step's `after` list too: the order
//     of the steps array and of `after` is NOT significant (runs never depend
//     on it: every list is ordered topologically, ties by name).
//   - Defaults are dropped: trigger "all_success", onFailure "fail", a job
//     queue equal to its type, empty `after`, empty or null overrides.
//   - Durations are respelled without zero units ("1440m" → "24h").
//   - Expressions lose surrounding white space (the inside is kept as is).
//   - Overrides are re-encoded with sorted keys and no white space; numbers
//     keep their spelling.
//
// Priority and maxAttempts are kept as given: an explicit default (priority
// 1) is different content from an absent one, though it behaves the same.
func Normalize(def *Definition) *Definition {
	out := &Definition{Name: def.Name, Steps: make([]Step, len(def.Steps))}
	for i, s := range def.Steps {
		n := Step{
			Name:    s.Name,
			After:   slices.Clone(s.After),
			If:      strings.TrimSpace(s.If),
			ForEach: strings.TrimSpace(s.ForEach),
			Input:   strings.TrimSpace(s.Input),
		}
		slices.Sort(n.After)
		if len(n.After) == 0 {
			n.After = nil
		}
		if s.Trigger != TriggerAllSuccess {
			n.Trigger = s.Trigger
		}
		if s.OnFailure != OnFailureFail {
			n.OnFailure = s.OnFailure
		}
		if s.Job != nil {
			j := *s.Job
			if j.Priority != nil {
				p := *j.Priority
				j.Priority = &p
			}
			if j.Queue == j.Type {
				j.Queue = ""
			}
			j.Timeout = normalDuration(j.Timeout)
			n.Job = &j
		}
		if s.Signal != nil {
			n.Signal = &SignalStep{Timeout: normalDuration(s.Signal.Timeout)}
		}
		if s.Human != nil {
			n.Human = &HumanStep{Task: s.Human.Task, Review: s.Human.Review, Overrides: normalObject(s.Human.Overrides)}
		}
		out.Steps[i] = n
	}
	slices.SortStableFunc(out.Steps, func(a, b Step) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func normalDuration(d Duration) Duration {
	v, err := d.Parse()
	if err != nil || v <= 0 {
		return d // invalid: Validate reports it
	}
	return Of(v)
}

// normalObject re-encodes a JSON value with sorted keys; "", null and {}
// become nil. Invalid JSON is returned as is (Validate reports it).
func normalObject(raw json.RawMessage) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	if m, ok := v.(map[string]any); v == nil || ok && len(m) == 0 {
		return nil
	}
	b, err := marshal(v)
	if err != nil {
		return raw
	}
	return b
}

// marshal encodes v without HTML escaping (so `<` in an expression stays
// `<`) and without the trailing newline.
var marshal = jsonappend.Marshal

// Canonical returns the canonical JSON encoding of def: Normalize, then
// fields in declaration order, no white space, no HTML escaping.
func Canonical(def *Definition) ([]byte, error) {
	b, err := marshal(Normalize(def))
	if err != nil {
		return nil, fmt.Errorf("encode workflow %q: %w", def.Name, err)
	}
	return b, nil
}

// Hash returns "sha256:" and the hex SHA-256 of the canonical encoding: the
// content hash that decides whether a definition is a new version.
func Hash(def *Definition) (string, error) {
	b, err := Canonical(def)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
