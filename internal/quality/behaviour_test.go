package quality

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestCheckSpeed(t *testing.T) {
	t.Parallel()
	s := Defaults()
	j := JudgmentRef{JudgmentID: uuid.MustParse("00000000-0000-7000-8000-000000000009"), ContributorID: worker, PoolID: pool}
	require.False(t, s.CheckSpeed(j, t0, t0).Failed, "off by default")
	s.MinSeconds = 5
	c := s.CheckSpeed(j, t0, t0.Add(4999*time.Millisecond))
	require.True(t, c.Failed)
	require.Equal(t, "too fast: submitted 4.999s after the assignment started, under the minimum 5s", c.Reason)
	require.Equal(t, []Event{{Type: EventJudgmentCheckFailed, Data: JudgmentCheckFailedData{JudgmentID: j.JudgmentID,
		ContributorID: worker, PoolID: pool, Check: CheckTooFast, Reason: c.Reason}}}, c.Events)
	require.False(t, s.CheckSpeed(j, t0, t0.Add(5*time.Second)).Failed, "exactly the minimum passes")
	require.Empty(t, s.CheckSpeed(j, t0, t0.Add(time.Minute)).Events)
}

func TestCheckTooFast(t *testing.T) {
	t.Parallel()
	s := Defaults()
	require.False(t, s.CheckTooFast(pool, worker, 50, Standing{}).Flag, "the check is off without minSeconds")
	s.MinSeconds = 2
	require.False(t, s.CheckTooFast(pool, worker, 2, Standing{}).Flag, "under the limit 3")
	d := s.CheckTooFast(pool, worker, 3, Standing{})
	require.True(t, d.Flag)
	require.Equal(t, CheckTooFast, d.Check)
	require.Equal(t, "3 judgments submitted under the minimum 2s (the limit is 3)", d.Reason)
	require.Equal(t, EventContributorFlagged, d.Events[0].Type)
	require.False(t, s.CheckTooFast(pool, worker, 4, Standing{Flagged: true, Check: CheckTrust}).Flag)
}

var sameField = []ChoiceField{{Name: "same", Options: []string{"yes", "no"}}}

// answers makes a window of n answers to "same": the first k are first,
// the others other.
func answers(n, k int, first, other string) []Answer {
	out := make([]Answer, n)
	for i := range out {
		v := other
		if i < k {
			v = first
		}
		out[i] = Answer{"same": v}
	}
	return out
}

func TestCheckPatternSameAnswer(t *testing.T) {
	t.Parallel()
	s := Defaults() // window 20
	require.Contains(t, s.CheckPattern(pool, worker, sameField, answers(20, 20, "no", "no"), Standing{}).Reason, "off")
	s.PatternMaxShare = 0.9
	d := s.CheckPattern(pool, worker, sameField, answers(20, 18, "no", "yes"), Standing{})
	require.False(t, d.Flag, "18 of 20 is 90%, not more")
	d = s.CheckPattern(pool, worker, sameField, answers(20, 19, "no", "yes"), Standing{})
	require.True(t, d.Flag, "19 of 20")
	require.Equal(t, CheckSameAnswer, d.Check)
	require.Equal(t, `answered "no" to same in 19 of their last 20 judgments (95%, more than 90%)`, d.Reason)
	d = s.CheckPattern(pool, worker, sameField, answers(19, 19, "no", "no"), Standing{})
	require.False(t, d.Flag, "the window is not full")
	require.Contains(t, d.Reason, "19 of the 20")
	// Only the last 20 count: 10 mixed ones before 20 "no" flag.
	recent := append(answers(10, 5, "yes", "no"), answers(20, 20, "no", "no")...)
	require.True(t, s.CheckPattern(pool, worker, sameField, recent, Standing{}).Flag)
	recent = append(answers(20, 20, "no", "no"), answers(10, 0, "", "yes")...)
	require.False(t, s.CheckPattern(pool, worker, sameField, recent, Standing{}).Flag, "10 no, 10 yes in the window")
	require.False(t, s.CheckPattern(pool, worker, nil, answers(20, 20, "no", "no"), Standing{}).Flag, "no choice field")
	require.False(t, s.CheckPattern(pool, worker, sameField, answers(20, 20, "no", "no"), Standing{Flagged: true}).Flag)
}

func TestCheckPatternFirstOption(t *testing.T) {
	t.Parallel()
	s := Defaults()
	s.PatternFirstOption, s.PatternWindow = true, 5
	d := s.CheckPattern(pool, worker, sameField, answers(5, 5, "yes", "no"), Standing{})
	require.True(t, d.Flag)
	require.Equal(t, CheckFirstOption, d.Check)
	require.False(t, s.CheckPattern(pool, worker, sameField, answers(5, 4, "yes", "no"), Standing{}).Flag, "one second option")
	require.False(t, s.CheckPattern(pool, worker, sameField, answers(5, 5, "no", "no"), Standing{}).Flag,
		"always the second option is not the first-option check (the share check is off)")

	two := []ChoiceField{{Name: "same", Options: []string{"yes", "no"}}, {Name: "colour", Options: []string{"red", "blue"}}}
	window := make([]Answer, 5)
	for i := range window {
		window[i] = Answer{"same": "yes", "colour": "red"}
	}
	require.True(t, s.CheckPattern(pool, worker, two, window, Standing{}).Flag, "first option of both fields")
	window[2] = Answer{"same": "yes", "colour": "blue"}
	require.False(t, s.CheckPattern(pool, worker, two, window, Standing{}).Flag, "one field varies")
	window[2] = Answer{"same": "yes"}
	require.True(t, s.CheckPattern(pool, worker, two, window, Standing{}).Flag, "an absent field does not count")
	window[2] = Answer{}
	require.False(t, s.CheckPattern(pool, worker, two, window, Standing{}).Flag, "a judgment with no choice answer")
}

// Property: the same-answer check depends on the counts of the window,
// not on their order, and flags exactly when the top count is more than
// the share.
func TestCheckPatternProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 10))
	options := []string{"a", "b", "c"}
	field := []ChoiceField{{Name: "x", Options: options}}
	for range 1000 {
		s := Defaults()
		s.PatternWindow = 2 + rng.IntN(30)
		s.PatternMaxShare = float64(rng.IntN(100)) / 100
		if s.PatternMaxShare == 0 {
			s.PatternMaxShare = 0.5
		}
		skew := rng.Float64()
		window := make([]Answer, s.PatternWindow)
		top := map[string]int{}
		for i := range window {
			v := options[rng.IntN(3)]
			if rng.Float64() < skew {
				v = "a"
			}
			window[i] = Answer{"x": v}
			top[v]++
		}
		most := max(top["a"], top["b"], top["c"])
		d := s.CheckPattern(pool, worker, field, window, Standing{})
		require.Equal(t, float64(most)/float64(s.PatternWindow) > s.PatternMaxShare, d.Flag, "%d of %d, share %v", most, s.PatternWindow, s.PatternMaxShare)
		rng.Shuffle(len(window), func(i, j int) { window[i], window[j] = window[j], window[i] })
		require.Equal(t, d.Flag, s.CheckPattern(pool, worker, field, window, Standing{}).Flag)
	}
}

func TestChoiceAnswers(t *testing.T) {
	t.Parallel()
	ct := compile(t, `{"title": "t", "fields": [
		{"name": "same", "kind": "choice", "options": [{"value": "yes"}, {"value": "no"}]},
		{"name": "stars", "kind": "rating"},
		{"name": "colour", "kind": "choice", "options": [{"value": "red"}, {"value": "blue"}]}]}`)
	fields := ChoiceFields(ct)
	require.Equal(t, []ChoiceField{{Name: "same", Options: []string{"yes", "no"}}, {Name: "colour", Options: []string{"red", "blue"}}}, fields)
	j, err := ct.ParseJudgment([]byte(`{"same": "no", "stars": 4}`))
	require.NoError(t, err)
	require.Equal(t, Answer{"same": "no"}, AnswerOf(fields, j))
}
