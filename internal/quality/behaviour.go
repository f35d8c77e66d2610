package quality

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/task"
)

// Check is the outcome of a behaviour check of one judgment.
type Check struct {
	Failed bool
	// Reason says why, with the numbers (also when it passed).
	Reason string
	// Events to write: judgment.check_failed when it failed.
	Events []Event
}

// JudgmentRef names one judgment for the events.
type JudgmentRef struct {
	JudgmentID    uuid.UUID
	ContributorID uuid.UUID
	PoolID        uuid.UUID
}

// CheckSpeed is the too-fast check of one judgment: it fails when it was
// submitted less than MinSeconds after its assignment started (exactly
// MinSeconds passes). A MinSeconds of 0 turns it off. A failed check does
// not taint the judgment by itself; CheckTooFast counts them.
func (s Settings) CheckSpeed(j JudgmentRef, started, submitted time.Time) Check {
	took := submitted.Sub(started).Seconds()
	if s.MinSeconds <= 0 {
		return Check{Reason: "the too-fast check is off"}
	}
	if took >= s.MinSeconds {
		return Check{Reason: fmt.Sprintf("submitted %.3fs after the assignment started, the minimum is %gs", took, s.MinSeconds)}
	}
	reason := fmt.Sprintf("too fast: submitted %.3fs after the assignment started, under the minimum %gs", took, s.MinSeconds)
	return Check{Failed: true, Reason: reason, Events: []Event{{Type: EventJudgmentCheckFailed, Data: JudgmentCheckFailedData{
		JudgmentID: j.JudgmentID, ContributorID: j.ContributorID, PoolID: j.PoolID, Check: CheckTooFast, Reason: reason}}}}
}

// CheckTooFast decides on a contributor's count of too-fast judgments in
// the pool (failed CheckSpeed, this one included): flag at TooFastLimit.
func (s Settings) CheckTooFast(poolID, contributorID uuid.UUID, tooFast int, st Standing) Decision {
	switch {
	case st.Flagged:
		return Decision{Reason: "already flagged (" + string(st.Check) + ")"}
	case s.MinSeconds > 0 && tooFast >= s.TooFastLimit:
		return flag(poolID, contributorID, CheckTooFast, fmt.Sprintf("%d judgments submitted under the minimum %gs (the limit is %d)",
			tooFast, s.MinSeconds, s.TooFastLimit))
	}
	return Decision{Reason: fmt.Sprintf("%d too-fast judgments, the limit is %d", tooFast, s.TooFastLimit)}
}

// ChoiceField is a choice field of the task, with its options in display
// order: what the pattern checks look at.
type ChoiceField struct {
	Name    string
	Options []string
}

// ChoiceFields lists the choice fields of a compiled task.
func ChoiceFields(ct *task.Compiled) []ChoiceField {
	var out []ChoiceField
	for _, f := range ct.Fields {
		if f.Kind != task.KindChoice {
			continue
		}
		cf := ChoiceField{Name: f.Name}
		for _, o := range f.Options {
			cf.Options = append(cf.Options, o.Value)
		}
		out = append(out, cf)
	}
	return out
}

// Answer is one judgment's answers to the choice fields, by field name
// (a field the judgment leaves out is absent).
type Answer map[string]string

// AnswerOf keeps the choice answers of a parsed judgment.
func AnswerOf(fields []ChoiceField, j task.Judgment) Answer {
	a := Answer{}
	for _, f := range fields {
		if v, ok := j[f.Name].(string); ok {
			a[f.Name] = v
		}
	}
	return a
}

// CheckPattern decides on a contributor's recent answers in the pool,
// oldest first (test questions and regular units alike; only the last
// PatternWindow count, and nothing is decided before there are that many):
//
//   - same answer: one value of one choice field in more than
//     PatternMaxShare of the window (strictly: 18 of 20 is not more than
//     90%, 19 is), when PatternMaxShare > 0;
//   - first option: every judgment of the window answers every choice
//     field it answers with the field's first option (and answers one),
//     when PatternFirstOption is set.
//
// Either flags the contributor for review: flagged in the pool, their
// judgments tainted until an admin forgives them.
func (s Settings) CheckPattern(poolID, contributorID uuid.UUID, fields []ChoiceField, recent []Answer, st Standing) Decision {
	n := s.PatternWindow
	switch {
	case st.Flagged:
		return Decision{Reason: "already flagged (" + string(st.Check) + ")"}
	case s.PatternMaxShare <= 0 && !s.PatternFirstOption:
		return Decision{Reason: "the pattern checks are off"}
	case len(fields) == 0:
		return Decision{Reason: "the task has no choice field"}
	case len(recent) < n:
		return Decision{Reason: fmt.Sprintf("%d of the %d judgments the pattern checks need", len(recent), n)}
	}
	window := recent[len(recent)-n:]
	if s.PatternMaxShare > 0 {
		for _, f := range fields {
			count := map[string]int{}
			top, topN := "", 0
			for _, a := range window {
				v, ok := a[f.Name]
				if !ok {
					continue
				}
				count[v]++
				if count[v] > topN || (count[v] == topN && v < top) {
					top, topN = v, count[v]
				}
			}
			if share := float64(topN) / float64(n); share > s.PatternMaxShare {
				return flag(poolID, contributorID, CheckSameAnswer, fmt.Sprintf(
					"answered %q to %s in %d of their last %d judgments (%.0f%%, more than %.0f%%)",
					top, f.Name, topN, n, 100*share, 100*s.PatternMaxShare))
			}
		}
	}
	if s.PatternFirstOption && allFirst(fields, window) {
		return flag(poolID, contributorID, CheckFirstOption, fmt.Sprintf(
			"answered every choice field with its first option in each of their last %d judgments", n))
	}
	return Decision{Reason: fmt.Sprintf("no pattern in the last %d judgments", n)}
}

func allFirst(fields []ChoiceField, window []Answer) bool {
	for _, a := range window {
		answered := false
		for _, f := range fields {
			v, ok := a[f.Name]
			if !ok {
				continue
			}
			if len(f.Options) == 0 || v != f.Options[0] {
				return false
			}
			answered = true
		}
		if !answered {
			return false
		}
	}
	return true
}
