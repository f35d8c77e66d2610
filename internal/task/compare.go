package task

import (
	"math"
	"slices"
	"strings"
)

// FieldScore is whether one field of a judgment matches the golden answer.
type FieldScore struct {
	Field   string `json:"field"`
	Correct bool   `json:"correct"`
}

// Score is a judgment scored against a golden unit's answer.
type Score struct {
	// Correct: every scored field is correct.
	Correct bool `json:"correct"`
	// Fields has one entry per field the answer gives, in template order.
	Fields []FieldScore `json:"fields"`
}

// Score compares a judgment with a golden answer (both from ParseJudgment
// / ParseAnswer of this template), field by field with Compare. Only the
// fields the answer gives are scored; a field the answer gives but the
// judgment does not is wrong.
func (c *Compiled) Score(answer, judgment Judgment) Score {
	s := Score{Correct: true}
	for i := range c.Fields {
		f := &c.Fields[i]
		want, ok := answer[f.Name]
		if !ok {
			continue
		}
		got, ok := judgment[f.Name]
		correct := ok && Compare(f, want, got)
		s.Fields = append(s.Fields, FieldScore{Field: f.Name, Correct: correct})
		s.Correct = s.Correct && correct
	}
	return s
}

// Compare reports whether a judgment's value of field f is correct against
// the golden answer's, both values of a Judgment:
//
//   - choice, rating: the same value.
//   - multi_choice: the same set of options (order does not matter).
//   - number: |judgment − answer| ≤ f.Tolerance (default 0: exact).
//   - text: equal after trimming, collapsing runs of white space to one
//     space and Unicode case folding ("  New  York " matches "new york").
//   - bbox: the same number of boxes, and a one-to-one matching of the
//     judgment's boxes to the answer's, label by label, where every matched
//     pair has an intersection over union of at least f.IoU (default 0.5).
//     The matching is exact (augmenting paths, as in Hungarian matching),
//     not greedy: the order the boxes are listed in never matters, and a
//     box that overlaps two golden boxes cannot steal the only match of
//     another.
//
// Values of the wrong Go type are never correct.
func Compare(f *Field, answer, judgment any) bool {
	switch f.Kind {
	case KindChoice:
		a, ok1 := answer.(string)
		j, ok2 := judgment.(string)
		return ok1 && ok2 && a == j
	case KindRating:
		a, ok1 := answer.(int)
		j, ok2 := judgment.(int)
		return ok1 && ok2 && a == j
	case KindMultiChoice:
		a, ok1 := answer.([]string)
		j, ok2 := judgment.([]string)
		return ok1 && ok2 && sameSet(a, j)
	case KindNumber:
		a, ok1 := answer.(float64)
		j, ok2 := judgment.(float64)
		return ok1 && ok2 && math.Abs(a-j) <= f.Tolerance
	case KindText:
		a, ok1 := answer.(string)
		j, ok2 := judgment.(string)
		return ok1 && ok2 && strings.EqualFold(normalText(a), normalText(j))
	case KindBBox:
		a, ok1 := answer.([]Box)
		j, ok2 := judgment.([]Box)
		threshold := IoUDefault
		if f.IoU != nil {
			threshold = *f.IoU
		}
		return ok1 && ok2 && boxesMatch(a, j, threshold)
	}
	return false
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func normalText(s string) string { return strings.Join(strings.Fields(s), " ") }

// boxesMatch reports whether the boxes pair up one to one, same label and
// IoU ≥ threshold: a perfect bipartite matching, found with augmenting
// paths (Kuhn's algorithm; at most MaxBoxes per side).
func boxesMatch(answer, judgment []Box, threshold float64) bool {
	if len(answer) != len(judgment) {
		return false
	}
	n := len(answer)
	edges := make([][]int, n)
	for i, a := range answer {
		for k, j := range judgment {
			if a.Label == j.Label && IoU(a, j) >= threshold {
				edges[i] = append(edges[i], k)
			}
		}
		if len(edges[i]) == 0 {
			return false
		}
	}
	owner := make([]int, n) // judgment box → answer box, -1 free
	for k := range owner {
		owner[k] = -1
	}
	var seen []bool
	var augment func(i int) bool
	augment = func(i int) bool {
		for _, k := range edges[i] {
			if seen[k] {
				continue
			}
			seen[k] = true
			if owner[k] < 0 || augment(owner[k]) {
				owner[k] = i
				return true
			}
		}
		return false
	}
	for i := range n {
		seen = make([]bool, n)
		if !augment(i) {
			return false
		}
	}
	return true
}

// IoU is the intersection over union of two boxes (their labels aside): 1
// for the same box, 0 for boxes that do not overlap.
func IoU(a, b Box) float64 {
	iw := math.Min(a.X+a.W, b.X+b.W) - math.Max(a.X, b.X)
	ih := math.Min(a.Y+a.H, b.Y+b.H) - math.Max(a.Y, b.Y)
	if iw <= 0 || ih <= 0 {
		return 0
	}
	inter := iw * ih
	union := a.W*a.H + b.W*b.H - inter
	if union <= 0 {
		return 0
	}
	return inter / union
}
