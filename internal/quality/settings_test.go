package quality

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/task"
)

// problemFields decodes data and returns the fields its error names.
func problemFields(t *testing.T, data string) []string {
	t.Helper()
	_, err := Decode([]byte(data))
	var ve *task.ValidationError
	require.True(t, errors.As(err, &ve), "want a *task.ValidationError, got %v", err)
	var fields []string
	for _, fe := range ve.Errors {
		fields = append(fields, fe.Field)
	}
	return fields
}

func TestSettingsDefaults(t *testing.T) {
	t.Parallel()
	require.NoError(t, Defaults().Validate())
	for _, in := range []string{"", "  ", "null", "{}", `{"minTrust": null}`} {
		s, err := Decode([]byte(in))
		require.NoError(t, err, in)
		require.Equal(t, Defaults(), s, in)
	}
	require.Equal(t, FeedbackAnswer, Defaults().TestFeedback)
	s, err := Decode([]byte(`{"minTrust": 0.7, "quizSize": 0, "patternFirstOption": true, "minSeconds": 2.5, "testFeedback": "none"}`))
	require.NoError(t, err)
	want := Defaults()
	want.MinTrust, want.QuizSize, want.PatternFirstOption, want.MinSeconds, want.TestFeedback = 0.7, 0, true, 2.5, FeedbackNone
	require.Equal(t, want, s, "a zero given is zero, not the default")
}

func TestSettingsDecodeNamesEveryField(t *testing.T) {
	t.Parallel()
	got := problemFields(t, `{"quizSize": 1.5, "testEvery": 1, "minTrust": 2, "colour": "red",
		"minTests": "four", "patternFirstOption": 1, "trustSmoothing": 0, "minTests": 3,
		"patternMaxShare": 1, "minSeconds": -1, "tooFastLimit": 0, "patternWindow": 1, "agreementWeight": "half",
		"testFeedback": "all", "certainty": 1, "testEveryTrusted": 1.5}`)
	want := []string{"quizSize", "testEvery", "minTrust", "colour", "minTests", "patternFirstOption",
		"trustSmoothing", "patternMaxShare", "minSeconds", "tooFastLimit", "patternWindow", "agreementWeight", "testFeedback",
		"certainty", "testEveryTrusted"}
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(t, want, got)
	retired, err := Decode([]byte(`{"agreementWeight": 0.5}`))
	require.NoError(t, err, "agreementWeight is retired but still decodes: settings stored with it keep working (docs/quality.md, Trust)")
	require.Equal(t, Defaults(), retired)
	// A key refused for its type is not named again by the validation.
	require.Equal(t, []string{"minTests"}, problemFields(t, `{"minTests": "x"}`))
	require.Equal(t, []string{"testFeedback"}, problemFields(t, `{"testFeedback": true}`))
	require.Equal(t, []string{"testFeedback"}, problemFields(t, `{"testFeedback": ""}`))
	require.Equal(t, []string{"minTests"}, problemFields(t, `{"minTests": 3, "minTests": 3}`))
	// One entry per key (docs/quality.md), saying everything wrong with it.
	_, err = Decode([]byte(`{"minTests": "x", "minTests": 3, "minTests": 4}`))
	var ve *task.ValidationError
	require.True(t, errors.As(err, &ve), "%v", err)
	require.Equal(t, []task.FieldError{{Field: "minTests", Message: "must be a whole number; given twice"}}, ve.Errors)
}

func TestSettingsDecodeDocument(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{`, `[]`, `"x"`, `1`, `{} {}`, `{"minTrust": 0.5,}`, `{"minTrust" 1}`, `null null`, "\xff"} {
		require.Equal(t, []string{""}, problemFields(t, in), in)
	}
	big := make([]byte, MaxSettingsBytes+1)
	require.Equal(t, []string{""}, problemFields(t, string(big)))
}

func TestSettingsValidateBounds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		set   func(*Settings)
		field string // "" when valid
	}{
		{"quiz 0", func(s *Settings) { s.QuizSize = 0 }, ""},
		{"quiz max", func(s *Settings) { s.QuizSize = MaxQuizSize }, ""},
		{"quiz over", func(s *Settings) { s.QuizSize = MaxQuizSize + 1 }, "quizSize"},
		{"quiz negative", func(s *Settings) { s.QuizSize = -1 }, "quizSize"},
		{"every 0", func(s *Settings) { s.TestEvery = 0 }, ""},
		{"every 1", func(s *Settings) { s.TestEvery = 1 }, "testEvery"},
		{"every 2", func(s *Settings) { s.TestEvery = 2 }, ""},
		{"every over", func(s *Settings) { s.TestEvery = MaxTestEvery + 1 }, "testEvery"},
		{"trust 0", func(s *Settings) { s.MinTrust = 0 }, ""},
		{"trust 1", func(s *Settings) { s.MinTrust = 1 }, ""},
		{"trust over", func(s *Settings) { s.MinTrust = 1.0001 }, "minTrust"},
		{"tests 0", func(s *Settings) { s.MinTests = 0 }, "minTests"},
		{"tests 1", func(s *Settings) { s.MinTests = 1 }, ""},
		{"smoothing tiny", func(s *Settings) { s.TrustSmoothing = 1e-9 }, ""},
		{"smoothing max", func(s *Settings) { s.TrustSmoothing = MaxSmoothing }, ""},
		{"smoothing over", func(s *Settings) { s.TrustSmoothing = MaxSmoothing + 1 }, "trustSmoothing"},
		{"trusted 0", func(s *Settings) { s.TestEveryTrusted = 0 }, ""},
		{"trusted 1", func(s *Settings) { s.TestEveryTrusted = 1 }, "testEveryTrusted"},
		{"trusted under testEvery: counts as testEvery", func(s *Settings) { s.TestEveryTrusted = s.TestEvery - 1 }, ""},
		{"trusted = testEvery", func(s *Settings) { s.TestEveryTrusted = s.TestEvery }, ""},
		{"trusted with no testEvery", func(s *Settings) { s.TestEvery, s.TestEveryTrusted = 0, 5 }, ""},
		{"trusted over", func(s *Settings) { s.TestEveryTrusted = MaxTestEvery + 1 }, "testEveryTrusted"},
		{"certainty 0.5", func(s *Settings) { s.Certainty = 0.5 }, ""},
		{"certainty under 0.5", func(s *Settings) { s.Certainty = 0.4999 }, "certainty"},
		{"certainty 1", func(s *Settings) { s.Certainty = 1 }, "certainty"},
		{"certainty NaN", func(s *Settings) { s.Certainty = math.NaN() }, "certainty"},
		{"seconds max", func(s *Settings) { s.MinSeconds = MaxMinSeconds }, ""},
		{"seconds over", func(s *Settings) { s.MinSeconds = MaxMinSeconds + 1 }, "minSeconds"},
		{"fast limit 1", func(s *Settings) { s.TooFastLimit = 1 }, ""},
		{"window 2", func(s *Settings) { s.PatternWindow = 2 }, ""},
		{"window over", func(s *Settings) { s.PatternWindow = MaxPatternWindow + 1 }, "patternWindow"},
		{"share almost 1", func(s *Settings) { s.PatternMaxShare = 0.999 }, ""},
		{"share 1", func(s *Settings) { s.PatternMaxShare = 1 }, "patternMaxShare"},
		{"share negative", func(s *Settings) { s.PatternMaxShare = -0.5 }, "patternMaxShare"},
		{"feedback verdict", func(s *Settings) { s.TestFeedback = FeedbackVerdict }, ""},
		{"feedback none", func(s *Settings) { s.TestFeedback = FeedbackNone }, ""},
		{"feedback unknown", func(s *Settings) { s.TestFeedback = "everything" }, "testFeedback"},
	}
	for _, c := range cases {
		s := Defaults()
		c.set(&s)
		err := s.Validate()
		if c.field == "" {
			require.NoError(t, err, c.name)
			continue
		}
		var ve *task.ValidationError
		require.True(t, errors.As(err, &ve), c.name)
		require.Len(t, ve.Errors, 1, c.name)
		require.Equal(t, c.field, ve.Errors[0].Field, c.name)
	}
}

func TestSettingsInsideADocument(t *testing.T) {
	t.Parallel()
	var doc struct {
		Quality Settings `json:"quality"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"quality": {"minTrust": 0.8}}`), &doc))
	want := Defaults()
	want.MinTrust = 0.8
	require.Equal(t, want, doc.Quality)
	err := json.Unmarshal([]byte(`{"quality": {"minTrust": 8, "x": 1}}`), &doc)
	var ve *task.ValidationError
	require.True(t, errors.As(err, &ve), "%v", err)
	require.Len(t, ve.Errors, 2)
}
