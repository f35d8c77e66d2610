package quality

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/docket-run/docket/internal/task"
)

// Defaults of Settings (see there for what each does).
const (
	QuizSizeDefault           = 5
	TestEveryDefault          = 8
	TestEveryTrustedDefault   = 24
	MinTrustDefault           = 0.6
	MinTestsDefault           = 5
	CertaintyDefault          = 0.95
	TrustSmoothingDefault     = 0.5
	MinSecondsDefault         = 0.0
	TooFastLimitDefault       = 3
	PatternWindowDefault      = 20
	PatternMaxShareDefault    = 0.0
	PatternFirstOptionDefault = false
	TestFeedbackDefault       = FeedbackAnswer
)

// TestFeedback is what a contributor learns once they answered a test
// question (Settings.TestFeedback).
type TestFeedback string

// The levels of TestFeedback.
const (
	// FeedbackAnswer: whether they were right, field by field, the
	// expected answer and the requester's explanation of it.
	FeedbackAnswer TestFeedback = "answer"
	// FeedbackVerdict: whether they were right, field by field; neither
	// the expected answer nor the explanation (the golden answers stay
	// the requester's, e.g. when contributors might pass them on).
	FeedbackVerdict TestFeedback = "verdict"
	// FeedbackNone: nothing; a test question stays invisible after it
	// was answered too.
	FeedbackNone TestFeedback = "none"
)

// Limits of Settings.
const (
	// MaxSettingsBytes is the largest JSON document Decode accepts.
	MaxSettingsBytes = 64 << 10
	MaxQuizSize      = 100
	MaxTestEvery     = 1000
	MaxMinTests      = 1000
	MaxSmoothing     = 100.0
	MaxMinSeconds    = 86400.0
	MaxTooFastLimit  = 1000
	MaxPatternWindow = 1000
)

// Settings are the quality-control settings of one pool. The JSON form
// may give any subset of the keys: Decode starts from Defaults. A zero
// means zero ("off" where said), not "the default".
//
// Dynamic overlap (min, max judgments and the target confidence) is not
// here: it is the task's task.JudgmentsPerUnit.
type Settings struct {
	// QuizSize N: a contributor's first N assignments in the pool are
	// test questions (when golden units are left for them). Default
	// QuizSizeDefault; 0 for no quiz. At most MaxQuizSize.
	QuizSize int `json:"quizSize"`
	// TestEvery K: after the quiz, one assignment in K is a test question
	// (the K-th, 2K-th, … after the quiz). Default TestEveryDefault; 0
	// for none; otherwise 2..MaxTestEvery (1 would leave no regular work).
	TestEvery int `json:"testEvery"`
	// TestEveryTrusted: after the quiz, one assignment in this many is a
	// test question for a contributor whose accuracy is at least MinTrust
	// with probability Certainty (ConfidenceTrusted): they are known to be
	// good, and are checked less often — never more often than TestEvery
	// (a TestEveryTrusted under it counts as TestEvery). Default
	// TestEveryTrustedDefault; 0 for no lower rate (trusted contributors
	// are tested every TestEvery too); otherwise 2..MaxTestEvery. Unused
	// when TestEvery is 0.
	TestEveryTrusted int `json:"testEveryTrusted"`
	// MinTrust: a contributor whose accuracy on test questions is below
	// it with probability Certainty, after at least MinTests test
	// questions, is flagged in the pool and their judgments are tainted.
	// Default MinTrustDefault; 0 never flags; in [0,1].
	MinTrust float64 `json:"minTrust"`
	// MinTests M: no flag on trust before M test questions were answered.
	// Default MinTestsDefault (the quiz); 1..MaxMinTests.
	MinTests int `json:"minTests"`
	// Certainty: how sure the test questions must make the pool that a
	// contributor's accuracy is below MinTrust to flag them, or at least
	// MinTrust to test them less often (TestEveryTrusted): the posterior
	// probability (Settings.ProbBelow). Default CertaintyDefault; in
	// [0.5, 1).
	Certainty float64 `json:"certainty"`
	// TrustSmoothing K of the trust (K + correct) / (2K + answered), and
	// of the Beta(K, K) prior of the posterior. Default
	// TrustSmoothingDefault (Toloka's 0.5); in (0, MaxSmoothing].
	TrustSmoothing float64 `json:"trustSmoothing"`
	// MinSeconds: a judgment submitted less than this many seconds after
	// its assignment started fails the too-fast check. Default 0 (off);
	// in [0, MaxMinSeconds].
	MinSeconds float64 `json:"minSeconds"`
	// TooFastLimit: a contributor with this many too-fast judgments in the
	// pool is flagged. Default TooFastLimitDefault; 1..MaxTooFastLimit.
	TooFastLimit int `json:"tooFastLimit"`
	// PatternWindow N: the pattern checks look at the contributor's last N
	// judgments in the pool, and only once they have N. Default
	// PatternWindowDefault; 2..MaxPatternWindow.
	PatternWindow int `json:"patternWindow"`
	// PatternMaxShare X: a contributor who gives one answer to a choice
	// field in more than X of their last PatternWindow judgments is
	// flagged. Default 0 (off); in [0,1) (0.9 = more than 90%).
	PatternMaxShare float64 `json:"patternMaxShare"`
	// PatternFirstOption: a contributor whose last PatternWindow judgments
	// all answer every choice field with its first option is flagged.
	// Default false.
	PatternFirstOption bool `json:"patternFirstOption"`
	// TestFeedback: what a contributor is told once they answered a test
	// question (the judgment's answer in the API, the work page): answer,
	// verdict or none. Never anything before they answer: a test question
	// looks like any unit. Default TestFeedbackDefault.
	TestFeedback TestFeedback `json:"testFeedback"`
}

// Defaults returns the default settings.
func Defaults() Settings {
	return Settings{
		QuizSize:           QuizSizeDefault,
		TestEvery:          TestEveryDefault,
		TestEveryTrusted:   TestEveryTrustedDefault,
		MinTrust:           MinTrustDefault,
		MinTests:           MinTestsDefault,
		Certainty:          CertaintyDefault,
		TrustSmoothing:     TrustSmoothingDefault,
		MinSeconds:         MinSecondsDefault,
		TooFastLimit:       TooFastLimitDefault,
		PatternWindow:      PatternWindowDefault,
		PatternMaxShare:    PatternMaxShareDefault,
		PatternFirstOption: PatternFirstOptionDefault,
		TestFeedback:       TestFeedbackDefault,
	}
}

const subjectSettings = "quality settings"

// Validate returns nil or a *task.ValidationError naming every invalid
// field by its JSON key.
func (s Settings) Validate() error {
	var p []task.FieldError
	add := func(bad bool, field, msg string) {
		if bad {
			p = append(p, task.FieldError{Field: field, Message: msg})
		}
	}
	in := func(v, lo, hi float64) bool { return v >= lo && v <= hi } // false for NaN
	add(s.QuizSize < 0 || s.QuizSize > MaxQuizSize, "quizSize", fmt.Sprintf("must be between 0 and %d", MaxQuizSize))
	add(s.TestEvery < 0 || s.TestEvery == 1 || s.TestEvery > MaxTestEvery, "testEvery",
		fmt.Sprintf("must be 0 (no test questions after the quiz) or between 2 and %d", MaxTestEvery))
	add(s.TestEveryTrusted < 0 || s.TestEveryTrusted == 1 || s.TestEveryTrusted > MaxTestEvery, "testEveryTrusted",
		fmt.Sprintf("must be 0 (no lower rate for trusted contributors) or between 2 and %d", MaxTestEvery))
	add(!in(s.MinTrust, 0, 1), "minTrust", "must be between 0 and 1")
	add(s.MinTests < 1 || s.MinTests > MaxMinTests, "minTests", fmt.Sprintf("must be between 1 and %d", MaxMinTests))
	add(!(s.Certainty >= 0.5 && s.Certainty < 1), "certainty", "must be at least 0.5 and less than 1")
	add(!(s.TrustSmoothing > 0 && s.TrustSmoothing <= MaxSmoothing), "trustSmoothing",
		fmt.Sprintf("must be greater than 0 and at most %g", MaxSmoothing))
	add(!in(s.MinSeconds, 0, MaxMinSeconds), "minSeconds", fmt.Sprintf("must be between 0 and %g", MaxMinSeconds))
	add(s.TooFastLimit < 1 || s.TooFastLimit > MaxTooFastLimit, "tooFastLimit", fmt.Sprintf("must be between 1 and %d", MaxTooFastLimit))
	add(s.PatternWindow < 2 || s.PatternWindow > MaxPatternWindow, "patternWindow", fmt.Sprintf("must be between 2 and %d", MaxPatternWindow))
	add(!(s.PatternMaxShare >= 0 && s.PatternMaxShare < 1), "patternMaxShare", "must be at least 0 (off) and less than 1")
	add(s.TestFeedback != FeedbackAnswer && s.TestFeedback != FeedbackVerdict && s.TestFeedback != FeedbackNone,
		"testFeedback", `must be "answer", "verdict" or "none"`)
	if len(p) == 0 {
		return nil
	}
	return &task.ValidationError{Subject: subjectSettings, Errors: p}
}

// Decode reads settings from their JSON form, strictly, and validates
// them: the document must be an object (null or empty input: the
// defaults); a key not given keeps its default and null stands for an
// absent key. A syntax error, trailing data, an unknown key, a key twice,
// a value of the wrong type and an invalid value are all refused in one
// *task.ValidationError naming every such key.
func Decode(data []byte) (Settings, error) {
	s := Defaults()
	if len(data) > MaxSettingsBytes {
		return s, settingsError("", fmt.Sprintf("the settings exceed %d bytes", MaxSettingsBytes))
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return s, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return s, settingsError("", "not JSON: "+jsonMessage(err))
	}
	if tok == nil {
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return s, settingsError("", "trailing data after the settings")
		}
		return s, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return s, settingsError("", "the settings must be a JSON object")
	}
	var p []task.FieldError
	// bad names a problem of a key: one entry per key, however many
	// problems it has (a key given three times is "given twice" once).
	bad := func(field, msg string) {
		for i := range p {
			if p[i].Field == field {
				if !strings.Contains(p[i].Message, msg) {
					p[i].Message += "; " + msg
				}
				return
			}
		}
		p = append(p, task.FieldError{Field: field, Message: msg})
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return s, settingsError("", "not JSON: "+jsonMessage(err))
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return s, settingsError("", "not JSON: "+jsonMessage(err))
		}
		if seen[key] {
			bad(key, "given twice")
			continue
		}
		seen[key] = true
		if string(raw) == "null" {
			continue
		}
		var ok bool
		switch key {
		case "quizSize":
			ok = decodeInt(raw, &s.QuizSize)
		case "testEvery":
			ok = decodeInt(raw, &s.TestEvery)
		case "testEveryTrusted":
			ok = decodeInt(raw, &s.TestEveryTrusted)
		case "minTrust":
			ok = decodeFloat(raw, &s.MinTrust)
		case "minTests":
			ok = decodeInt(raw, &s.MinTests)
		case "trustSmoothing":
			ok = decodeFloat(raw, &s.TrustSmoothing)
		case "certainty":
			ok = decodeFloat(raw, &s.Certainty)
		case "minSeconds":
			ok = decodeFloat(raw, &s.MinSeconds)
		case "tooFastLimit":
			ok = decodeInt(raw, &s.TooFastLimit)
		case "patternWindow":
			ok = decodeInt(raw, &s.PatternWindow)
		case "patternMaxShare":
			ok = decodeFloat(raw, &s.PatternMaxShare)
		case "testFeedback":
			if json.Unmarshal(raw, &s.TestFeedback) != nil {
				bad(key, `must be "answer", "verdict" or "none"`)
			}
			continue
		case "patternFirstOption":
			ok = json.Unmarshal(raw, &s.PatternFirstOption) == nil
			if !ok {
				bad(key, "must be true or false")
			}
			continue
		case "agreementWeight":
			// Retired (docs/quality.md, Trust): accepted and ignored, so
			// that pools and tasks stored with it keep decoding.
			var ignored float64
			ok = decodeFloat(raw, &ignored)
		default:
			bad(key, "unknown setting")
			continue
		}
		if !ok && isIntKey(key) {
			bad(key, "must be a whole number")
		} else if !ok {
			bad(key, "must be a number")
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return s, settingsError("", "not JSON: "+jsonMessage(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return s, settingsError("", "trailing data after the settings")
	}
	if verr := s.Validate(); verr != nil {
		var ve *task.ValidationError
		errors.As(verr, &ve)
		for _, fe := range ve.Errors {
			named := false
			for _, q := range p {
				named = named || q.Field == fe.Field
			}
			if !named {
				p = append(p, fe)
			}
		}
	}
	if len(p) > 0 {
		return s, &task.ValidationError{Subject: subjectSettings, Errors: p}
	}
	return s, nil
}

// UnmarshalJSON decodes s with Decode, so Settings can sit inside a
// larger JSON document (a task template, a pool's settings) and keep the
// strict rules and the defaults.
func (s *Settings) UnmarshalJSON(data []byte) error {
	v, err := Decode(data)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

func isIntKey(key string) bool {
	switch key {
	case "quizSize", "testEvery", "testEveryTrusted", "minTests", "tooFastLimit", "patternWindow":
		return true
	}
	return false
}

func decodeInt(raw json.RawMessage, dst *int) bool {
	var f float64
	if json.Unmarshal(raw, &f) != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return false
	}
	*dst = int(f)
	return true
}

func decodeFloat(raw json.RawMessage, dst *float64) bool {
	return json.Unmarshal(raw, dst) == nil
}

func jsonMessage(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return err.Error()
}

func settingsError(field, msg string) error {
	return &task.ValidationError{Subject: subjectSettings, Errors: []task.FieldError{{Field: field, Message: msg}}}
}
