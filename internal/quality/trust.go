package quality

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/task"
)

// TrustPrior is the trust of a contributor with no evidence: (K + 0) /
// (2K + 0) = 0.5 whatever the smoothing K.
const TrustPrior = 0.5

// MaxTrustHistory is the most entries Trust.History keeps; the oldest go
// first.
const MaxTrustHistory = 100

// Trust is what a pool knows of one contributor's reliability: the counts
// behind the value, the value, and how it got there.
type Trust struct {
	// TestsCorrect of TestsAnswered test questions were answered right.
	TestsCorrect  int `json:"testsCorrect"`
	TestsAnswered int `json:"testsAnswered"`
	// Value is the trust after the last change (TrustPrior at first).
	Value float64 `json:"value"`
	// History lists the changes, oldest first, at most MaxTrustHistory.
	History []TrustEntry `json:"history,omitempty"`
}

// TrustEntry is one change of a Trust.
type TrustEntry struct {
	At            time.Time `json:"at"`
	TestsCorrect  int       `json:"testsCorrect"`
	TestsAnswered int       `json:"testsAnswered"`
	Value         float64   `json:"value"`
	Reason        string    `json:"reason"`
}

// NewTrust is the trust of a contributor the pool has not met.
func NewTrust() Trust { return Trust{Value: TrustPrior} }

// TrustValue is the smoothed accuracy of t's test questions, Toloka's
//
//	(K + correct) / (2K + answered)
//
// with K = TrustSmoothing: 0.5 before any test question, 0.75 after one
// right answer and 0.25 after one wrong one with K = 0.5. It is the mean
// of the posterior ProbBelow reads. Agreement with finalized results is
// not in it: a consensus is weaker evidence than a known answer (it may be
// wrong, and a crowd of bots agrees with itself), and the model-based
// aggregation methods learn each contributor's agreement already, pool
// wide (docs/quality.md, "Trust").
func (s Settings) TrustValue(t Trust) float64 {
	k := s.TrustSmoothing
	return (k + float64(t.TestsCorrect)) / (2*k + float64(t.TestsAnswered))
}

// Snapshot is the trust a judgment records when it comes in: the value
// then, or nil when the contributor has answered no test question yet
// (aggregation should then weigh them as TrustPrior). A snapshot is never
// updated: it says what was known at submission.
func (t Trust) Snapshot() *float64 {
	if t.TestsAnswered == 0 {
		return nil
	}
	v := t.Value
	return &v
}

func (s Settings) change(t Trust, at time.Time, reason string) Trust {
	t.Value = s.TrustValue(t)
	h := make([]TrustEntry, 0, min(len(t.History)+1, MaxTrustHistory))
	if drop := len(t.History) + 1 - MaxTrustHistory; drop > 0 {
		h = append(h, t.History[drop:]...)
	} else {
		h = append(h, t.History...)
	}
	t.History = append(h, TrustEntry{At: at, TestsCorrect: t.TestsCorrect, TestsAnswered: t.TestsAnswered, Value: t.Value, Reason: reason})
	return t
}

// ScoreTest returns t after one more test question, answered right or
// not; reason goes to the history (e.g. "test question <unit>: wrong").
// t is not changed.
func (s Settings) ScoreTest(t Trust, correct bool, at time.Time, reason string) Trust {
	t.TestsAnswered++
	if correct {
		t.TestsCorrect++
	}
	return s.change(t, at, reason)
}

// EvaluateTest scores a judgment of a golden unit against the unit's
// known answer (both parsed by ct: ParseAnswer, ParseJudgment), field by
// field with task.Compiled.Score, and returns the score, the trust after
// it (ScoreTest) and the test_judgment.evaluated event to write.
func (s Settings) EvaluateTest(j JudgmentRef, ct *task.Compiled, answer, judgment task.Judgment, t Trust, at time.Time) (task.Score, Trust, Event) {
	score := ct.Score(answer, judgment)
	verdict := "wrong"
	if score.Correct {
		verdict = "right"
	}
	t = s.ScoreTest(t, score.Correct, at, fmt.Sprintf("test judgment %s: %s", j.JudgmentID, verdict))
	return score, t, Event{Type: EventTestJudgmentEvaluated, Data: TestJudgmentEvaluatedData{
		JudgmentID: j.JudgmentID, ContributorID: j.ContributorID, PoolID: j.PoolID, Correct: score.Correct, Trust: t.Value}}
}

// Recount returns t with its test counts replaced (a golden answer was
// corrected and the contributor's test judgments re-scored).
func (s Settings) Recount(t Trust, correct, answered int, at time.Time, reason string) Trust {
	t.TestsCorrect, t.TestsAnswered = correct, answered
	return s.change(t, at, reason)
}

// FlagCheck names what flagged (or un-flagged) a contributor.
type FlagCheck string

// The checks.
const (
	CheckTrust       FlagCheck = "trust"        // trust below MinTrust after MinTests
	CheckTooFast     FlagCheck = "too_fast"     // TooFastLimit judgments under MinSeconds
	CheckSameAnswer  FlagCheck = "same_answer"  // one answer in more than PatternMaxShare
	CheckFirstOption FlagCheck = "first_option" // always the first option
	CheckForgiven    FlagCheck = "forgiven"     // an admin lifted the flag
)

// Standing is a contributor's flag in a pool, as stored.
type Standing struct {
	Flagged bool
	// Check is what flagged them (when Flagged).
	Check FlagCheck
}

// Decision is the outcome of a check of a contributor: nothing, a flag
// (no more assignments in the pool, every judgment of theirs there
// tainted: the slots of units not final reopen and finalized units are
// repaired, see PlanRepair) or an un-flag (the reverse).
type Decision struct {
	Flag   bool
	Unflag bool
	Check  FlagCheck
	// Reason says why (also when nothing is decided), with the numbers.
	Reason string
	// Events to write with the change (none when nothing is decided).
	Events []Event
}

func flag(poolID, contributorID uuid.UUID, check FlagCheck, reason string) Decision {
	return Decision{Flag: true, Check: check, Reason: reason, Events: []Event{{Type: EventContributorFlagged,
		Data: ContributorFlaggedData{ContributorID: contributorID, PoolID: poolID, Check: check, Reason: reason, Taint: true}}}}
}

func unflag(poolID, contributorID uuid.UUID, check FlagCheck, reason string) Decision {
	return Decision{Unflag: true, Check: check, Reason: reason, Events: []Event{{Type: EventContributorUnflagged,
		Data: ContributorFlaggedData{ContributorID: contributorID, PoolID: poolID, Check: check, Reason: reason, Taint: true}}}}
}

// CheckTrust decides on a contributor's trust, after each change of it:
// flag when, after at least MinTests test questions, their accuracy is
// below MinTrust with probability Certainty or more (ProbBelow: the
// posterior of their answers, not only its mean — the stored trust — so
// that a few unlucky answers of an honest contributor do not flag them,
// while a random clicker's many wrong ones do); un-flag a contributor
// flagged on trust for whom that no longer holds (a golden answer was
// corrected and their test judgments re-scored). A MinTrust of 0 never
// flags. Flags of other checks are left alone.
func (s Settings) CheckTrust(poolID, contributorID uuid.UUID, t Trust, st Standing) Decision {
	below := s.flagsOnTrust(t)
	p := s.ProbBelow(t, s.MinTrust)
	numbers := fmt.Sprintf("after %d test questions (%d right, trust %.3f)", t.TestsAnswered, t.TestsCorrect, s.TrustValue(t))
	switch {
	case st.Flagged && st.Check == CheckTrust && !below:
		return unflag(poolID, contributorID, CheckTrust, fmt.Sprintf("accuracy below the minimum %.3f with probability %.3f, under %.3f, %s",
			s.MinTrust, p, s.Certainty, numbers))
	case st.Flagged:
		return Decision{Reason: "already flagged (" + string(st.Check) + ")"}
	case below:
		return flag(poolID, contributorID, CheckTrust, fmt.Sprintf("accuracy below the minimum %.3f with probability %.3f (at least %.3f) %s",
			s.MinTrust, p, s.Certainty, numbers))
	case t.TestsAnswered < s.MinTests:
		return Decision{Reason: fmt.Sprintf("%d of the %d test questions needed before a flag", t.TestsAnswered, s.MinTests)}
	}
	return Decision{Reason: fmt.Sprintf("accuracy below the minimum %.3f with probability %.3f, under %.3f, %s", s.MinTrust, p, s.Certainty, numbers)}
}

// flagsOnTrust is CheckTrust's rule: MinTrust > 0, at least MinTests
// test questions, and ProbBelow(MinTrust) ≥ Certainty.
func (s Settings) flagsOnTrust(t Trust) bool {
	return s.MinTrust > 0 && t.TestsAnswered >= s.MinTests && s.ProbBelow(t, s.MinTrust) >= s.Certainty
}

// Confidence is what a contributor's test questions say of them against
// MinTrust, for the schedule of their test questions (NextAssignment).
type Confidence string

// The confidences.
const (
	// ConfidenceUnknown: no test question answered yet.
	ConfidenceUnknown Confidence = "unknown"
	// ConfidenceSuspect: their accuracy is more likely below MinTrust than
	// at or above it (ProbBelow ≥ 1/2).
	ConfidenceSuspect Confidence = "suspect"
	// ConfidenceUncertain: neither suspect nor trusted.
	ConfidenceUncertain Confidence = "uncertain"
	// ConfidenceTrusted: their accuracy is at least MinTrust with
	// probability Certainty (ProbBelow ≤ 1 − Certainty).
	ConfidenceTrusted Confidence = "trusted"
)

// ConfidenceOf says what t's test questions show against MinTrust. With
// MinTrust 0 every contributor who answered one is trusted.
func (s Settings) ConfidenceOf(t Trust) Confidence {
	if t.TestsAnswered == 0 {
		return ConfidenceUnknown
	}
	p := s.ProbBelow(t, s.MinTrust)
	switch {
	case p <= 1-s.Certainty:
		return ConfidenceTrusted
	case p >= 0.5:
		return ConfidenceSuspect
	}
	return ConfidenceUncertain
}

// Forgive is an admin lifting a contributor's flag in a pool: the flag
// goes (contributor.unflagged; their judgments are un-tainted and the
// units they touched repaired again, see PlanRepair) and their counts
// restart from zero, so that the trust check cannot flag them again at
// once: it needs MinTests new test questions. The history keeps the old
// counts. by names who forgave (an API key's name). A contributor who is
// not flagged is left as they are (no decision).
func (s Settings) Forgive(poolID, contributorID uuid.UUID, t Trust, st Standing, at time.Time, by string) (Trust, Decision) {
	if !st.Flagged {
		return t, Decision{Reason: "not flagged: nothing to forgive"}
	}
	reason := fmt.Sprintf("forgiven by %s (flagged on %s): test counts restart from %d of %d right",
		by, st.Check, t.TestsCorrect, t.TestsAnswered)
	t = s.Recount(t, 0, 0, at, reason)
	return t, unflag(poolID, contributorID, CheckForgiven, reason)
}
