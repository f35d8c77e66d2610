package flow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Overrides is what a human step's `overrides` may change of its task's
// settings for the step's pool. Any other key is refused by validation
// (and, in a definition stored before this check, fails the step at release).
type Overrides struct {
	// JudgmentsPerUnit: an integer, or {"min": n} as in a task template.
	JudgmentsPerUnit  *OverrideJudgments `json:"judgmentsPerUnit,omitempty"`
	AssignmentSeconds *int               `json:"assignmentSeconds,omitempty"`
	Priority          *int               `json:"priority,omitempty"`
	Skills            []string           `json:"skills,omitempty"`
	Channels          []string           `json:"channels,omitempty"`
}

// The bounds of the overrides are those of a task template (package task
// imports this one, so they are repeated here; a test in package task
// checks they agree). Past them a pool could not be stored (PostgreSQL's
// integer) or a lease would overflow.
const (
	OverrideMaxJudgments         = 100
	OverrideMinAssignmentSeconds = 30
	OverrideMaxAssignmentSeconds = 24 * 3600
	OverrideMaxTags              = 50
	OverrideMaxTagLen            = 64
)

// ParseOverrides decodes a human step's overrides; null or empty is none.
func ParseOverrides(raw json.RawMessage) (*Overrides, error) {
	o := &Overrides{}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return o, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(o); err != nil {
		return nil, fmt.Errorf("overrides: %v (supported: judgmentsPerUnit, assignmentSeconds, priority, skills, channels)", err)
	}
	switch {
	case o.JudgmentsPerUnit != nil && (*o.JudgmentsPerUnit < 1 || *o.JudgmentsPerUnit > OverrideMaxJudgments):
		return nil, fmt.Errorf("overrides: judgmentsPerUnit must be 1 to %d", OverrideMaxJudgments)
	case o.AssignmentSeconds != nil && (*o.AssignmentSeconds < OverrideMinAssignmentSeconds || *o.AssignmentSeconds > OverrideMaxAssignmentSeconds):
		return nil, fmt.Errorf("overrides: assignmentSeconds must be %d to %d", OverrideMinAssignmentSeconds, OverrideMaxAssignmentSeconds)
	case o.Priority != nil && (*o.Priority < 0 || *o.Priority > 9):
		return nil, errors.New("overrides: priority must be 0 to 9")
	}
	// Skills and channels follow a template's rules: a name the pool
	// cannot store failed every run at the step, and one a template could
	// not hold matched no contributor.
	var bad []string
	bad = append(bad, checkOverrideTags("skills", o.Skills)...)
	bad = append(bad, checkOverrideTags("channels", o.Channels)...)
	if len(bad) > 0 {
		return nil, fmt.Errorf("overrides: %s", strings.Join(bad, "; "))
	}
	return o, nil
}

// checkOverrideTags names every bad skill or channel of an override as a
// task template does: at most OverrideMaxTags, each 1–OverrideMaxTagLen
// bytes of letters, digits and . _ - :, none twice.
func checkOverrideTags(field string, tags []string) []string {
	if len(tags) > OverrideMaxTags {
		return []string{fmt.Sprintf("%s: at most %d", field, OverrideMaxTags)}
	}
	var bad []string
	seen := map[string]int{}
	for i, s := range tags {
		msg := ""
		switch first, dup := seen[s]; {
		case s == "":
			msg = "is required"
		case CheckToken(s) != "":
			msg = CheckToken(s)
		case dup:
			msg = fmt.Sprintf("duplicate %q (also %s[%d])", s, field, first)
		default:
			seen[s] = i
		}
		if msg != "" {
			bad = append(bad, fmt.Sprintf("%s[%d]: %s", field, i, msg))
		}
	}
	return bad
}

// OverrideJudgments is the judgments per unit of an override: written as
// an integer or as {"min": n}.
type OverrideJudgments int

// UnmarshalJSON reads n or {"min": n}.
func (j *OverrideJudgments) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var v struct {
			Min *int `json:"min"`
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("judgmentsPerUnit: %v (an integer or {\"min\": n})", err)
		}
		if v.Min == nil {
			return errors.New(`judgmentsPerUnit: {"min": n} needs min`)
		}
		*j = OverrideJudgments(*v.Min)
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("judgmentsPerUnit: must be an integer or {\"min\": n}")
	}
	*j = OverrideJudgments(n)
	return nil
}

// CheckToken checks a skill or a channel — of a task template, a human
// step's overrides, a pool or a contributor: 1–OverrideMaxTagLen bytes of
// letters, digits and . _ - :. It returns the problem, "" when there is
// none. One rule everywhere, so that a name one side takes the other can
// match.
func CheckToken(s string) string {
	if s == "" {
		return "is required"
	}
	if len(s) > OverrideMaxTagLen {
		return fmt.Sprintf("must be at most %d bytes", OverrideMaxTagLen)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:", r)) {
			return fmt.Sprintf("has invalid character %q (allowed: ASCII letters, digits, . _ - :)", r)
		}
	}
	return ""
}
