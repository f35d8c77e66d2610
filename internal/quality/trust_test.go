package quality

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

var (
	pool   = uuid.MustParse("00000000-0000-7000-8000-000000000001")
	worker = uuid.MustParse("00000000-0000-7000-8000-000000000002")
	t0     = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

func counts(correct, answered int) Trust {
	return Trust{TestsCorrect: correct, TestsAnswered: answered}
}

func TestTrustValue(t *testing.T) {
	t.Parallel()
	s := Defaults() // K = 0.5
	for _, c := range []struct {
		correct, answered int
		want              float64
	}{
		{0, 0, 0.5},         // 0.5 / 1
		{1, 1, 0.75},        // 1.5 / 2
		{0, 1, 0.25},        // 0.5 / 2
		{3, 4, 0.7},         // 3.5 / 5
		{2, 4, 0.5},         // 2.5 / 5
		{1, 4, 0.3},         // 1.5 / 5
		{10, 10, 10.5 / 11}, // 0.9545…
	} {
		require.InDelta(t, c.want, s.TrustValue(counts(c.correct, c.answered)), 1e-12, "%d/%d", c.correct, c.answered)
	}
	s.TrustSmoothing = 1
	require.InDelta(t, 1.0/3, s.TrustValue(counts(0, 1)), 1e-12) // 1 / 3
	require.InDelta(t, 0.5, s.TrustValue(counts(0, 0)), 1e-12)
}

func TestTrustHistoryAndSnapshot(t *testing.T) {
	t.Parallel()
	s := Defaults()
	tr := NewTrust()
	require.Equal(t, TrustPrior, tr.Value)
	require.Nil(t, tr.Snapshot(), "no test question yet: no snapshot")
	tr = s.ScoreTest(tr, true, t0, "test question u1: right")
	tr = s.ScoreTest(tr, false, t0.Add(time.Minute), "test question u2: wrong")
	require.Equal(t, 2, tr.TestsAnswered)
	require.Equal(t, 1, tr.TestsCorrect)
	require.InDelta(t, 0.5, tr.Value, 1e-12) // 1.5 / 3
	require.Equal(t, []TrustEntry{
		{At: t0, TestsCorrect: 1, TestsAnswered: 1, Value: 0.75, Reason: "test question u1: right"},
		{At: t0.Add(time.Minute), TestsCorrect: 1, TestsAnswered: 2, Value: 0.5, Reason: "test question u2: wrong"},
	}, tr.History)
	snap := tr.Snapshot()
	require.NotNil(t, snap)
	require.Equal(t, 0.5, *snap)
	later := s.ScoreTest(tr, true, t0, "")
	require.Equal(t, 0.5, *snap, "a snapshot does not move")
	require.Len(t, tr.History, 2, "ScoreTest does not change its input")
	require.Len(t, later.History, 3)

	// The history keeps the last MaxTrustHistory changes.
	tr = NewTrust()
	for i := range 150 {
		tr = s.ScoreTest(tr, i%2 == 0, t0, "")
	}
	require.Len(t, tr.History, MaxTrustHistory)
	require.Equal(t, 51, tr.History[0].TestsAnswered)
	require.Equal(t, 150, tr.History[MaxTrustHistory-1].TestsAnswered)

}

func TestCheckTrust(t *testing.T) {
	t.Parallel()
	s := Defaults() // certainty 0.95
	s.MinTrust, s.MinTests = 0.5, 4
	none := Standing{}

	d := s.CheckTrust(pool, worker, counts(0, 3), none)
	require.False(t, d.Flag, "M not reached: 0 of 3 is not flagged")
	require.Contains(t, d.Reason, "3 of the 4 test questions")

	d = s.CheckTrust(pool, worker, counts(2, 4), none)
	require.False(t, d.Flag, "2 of 4: as likely under 0.5 as over")
	require.Empty(t, d.Events)
	d = s.CheckTrust(pool, worker, counts(1, 4), none)
	require.False(t, d.Flag, "1 of 4 (trust 0.3): under 0.5 with probability 0.84 only")
	require.Contains(t, d.Reason, "probability 0.84")

	d = s.CheckTrust(pool, worker, counts(0, 4), none)
	require.True(t, d.Flag, "0 of 4: under 0.5 with probability 0.985")
	require.Equal(t, CheckTrust, d.Check)
	require.Equal(t, []Event{{Type: EventContributorFlagged, Data: ContributorFlaggedData{ContributorID: worker, PoolID: pool,
		Check: CheckTrust, Reason: "accuracy below the minimum 0.500 with probability 0.985 (at least 0.950) after 4 test questions (0 right, trust 0.100)",
		Taint: true}}}, d.Events)
	require.True(t, s.CheckTrust(pool, worker, counts(2, 12), none).Flag, "2 of 12")

	flagged := Standing{Flagged: true, Check: CheckTrust}
	require.False(t, s.CheckTrust(pool, worker, counts(0, 4), flagged).Flag, "flagged once")
	require.False(t, s.CheckTrust(pool, worker, counts(0, 4), flagged).Unflag)
	d = s.CheckTrust(pool, worker, counts(3, 4), flagged)
	require.True(t, d.Unflag, "a re-scoring put them back at 3 of 4")
	require.Equal(t, EventContributorUnflagged, d.Events[0].Type)
	require.False(t, s.CheckTrust(pool, worker, counts(3, 4), Standing{Flagged: true, Check: CheckFirstOption}).Unflag,
		"another check's flag stays")

	s.MinTrust = 0
	require.False(t, s.CheckTrust(pool, worker, counts(0, 50), none).Flag, "minimum 0 never flags")
	s.MinTrust, s.MinTests = 0.6, 1
	require.False(t, s.CheckTrust(pool, worker, counts(0, 1), none).Flag, "one wrong answer (trust 0.25) is not enough evidence")
	require.True(t, s.CheckTrust(pool, worker, counts(0, 2), none).Flag, "two are: under 0.6 with probability 0.96")
	s.Certainty = 0.99
	require.False(t, s.CheckTrust(pool, worker, counts(0, 2), none).Flag, "not at 0.99")
	require.True(t, s.CheckTrust(pool, worker, counts(0, 4), none).Flag)
}

func TestProbBelow(t *testing.T) {
	t.Parallel()
	s := Defaults()
	// Beta(1, 1) with K = 1 and no answer: uniform, P(p < x) = x.
	s.TrustSmoothing = 1
	for _, x := range []float64{0, 0.1, 0.5, 0.6, 0.99, 1} {
		require.InDelta(t, x, s.ProbBelow(counts(0, 0), x), 1e-12)
	}
	// Beta(1 + c, 1): P(p < x) = x^(1+c); Beta(1, 1 + w): 1 − (1 − x)^(1+w).
	require.InDelta(t, math.Pow(0.6, 5), s.ProbBelow(counts(4, 4), 0.6), 1e-12)
	require.InDelta(t, 1-math.Pow(0.4, 8), s.ProbBelow(counts(0, 7), 0.6), 1e-12)
	// Jeffreys' prior (K = 0.5) with no answer: (2/π) asin √x.
	s.TrustSmoothing = 0.5
	require.InDelta(t, 2/math.Pi*math.Asin(math.Sqrt(0.6)), s.ProbBelow(counts(0, 0), 0.6), 1e-12)
	// Symmetry: P(p < x | c of n) = 1 − P(p < 1 − x | n − c of n).
	for _, c := range [][2]int{{3, 10}, {40, 50}, {0, 200}, {999, 1000}} {
		require.InDelta(t, 1-s.ProbBelow(counts(c[1]-c[0], c[1]), 0.3), s.ProbBelow(counts(c[0], c[1]), 0.7), 1e-12, "%v", c)
	}
	// Monotone in x and in the evidence.
	prev := 0.0
	for x := 0.0; x <= 1; x += 0.01 {
		p := s.ProbBelow(counts(7, 10), x)
		require.GreaterOrEqual(t, p, prev)
		prev = p
	}
	require.Greater(t, s.ProbBelow(counts(2, 10), 0.6), s.ProbBelow(counts(3, 10), 0.6))
	require.Greater(t, s.ProbBelow(counts(10, 50), 0.6), s.ProbBelow(counts(2, 10), 0.6), "more evidence, more certain")
}

func TestConfidenceOf(t *testing.T) {
	t.Parallel()
	s := Defaults() // minimum 0.6, certainty 0.95
	for _, c := range []struct {
		correct, answered int
		want              Confidence
	}{
		{0, 0, ConfidenceUnknown},
		{1, 1, ConfidenceUncertain},
		{0, 1, ConfidenceSuspect},
		{4, 4, ConfidenceTrusted}, // under 0.6 with probability 0.04
		{3, 4, ConfidenceUncertain},
		{2, 5, ConfidenceSuspect},
		{3, 5, ConfidenceSuspect},   // 0.513: trust 0.583
		{4, 5, ConfidenceUncertain}, // 0.18
		{10, 12, ConfidenceTrusted},
		{12, 20, ConfidenceSuspect}, // trust 0.595
	} {
		require.Equal(t, c.want, s.ConfidenceOf(counts(c.correct, c.answered)), "%d of %d: %.3f", c.correct, c.answered,
			s.ProbBelow(counts(c.correct, c.answered), s.MinTrust))
	}
	s.MinTrust = 0
	require.Equal(t, ConfidenceTrusted, s.ConfidenceOf(counts(0, 3)), "no minimum: nobody is suspect")
}

func TestForgive(t *testing.T) {
	t.Parallel()
	s := Defaults()
	tr := s.Recount(NewTrust(), 1, 6, t0, "six tests")
	same, d := s.Forgive(pool, worker, tr, Standing{}, t0, "admin")
	require.Equal(t, tr, same)
	require.False(t, d.Unflag)

	tr, d = s.Forgive(pool, worker, tr, Standing{Flagged: true, Check: CheckTrust}, t0.Add(time.Hour), "admin")
	require.True(t, d.Unflag)
	require.Equal(t, CheckForgiven, d.Check)
	require.Equal(t, counts(0, 0).TestsAnswered, tr.TestsAnswered)
	require.Equal(t, TrustPrior, tr.Value)
	require.Len(t, tr.History, 2)
	require.Equal(t, "forgiven by admin (flagged on trust): test counts restart from 1 of 6 right", tr.History[1].Reason)
	require.False(t, s.CheckTrust(pool, worker, tr, Standing{}).Flag, "not flagged again at once")
}

func TestEvaluateTest(t *testing.T) {
	t.Parallel()
	ct := compile(t, `{"title": "t", "fields": [
		{"name": "same", "kind": "choice", "options": [{"value": "yes"}, {"value": "no"}]},
		{"name": "price", "kind": "number", "tolerance": 0.5}]}`)
	answer, err := ct.ParseAnswer([]byte(`{"same": "no", "price": 10}`))
	require.NoError(t, err)
	s := Defaults()
	j := JudgmentRef{JudgmentID: uuid.MustParse("00000000-0000-7000-8000-00000000000a"), ContributorID: worker, PoolID: pool}

	right, err := ct.ParseJudgment([]byte(`{"same": "no", "price": 10.5}`))
	require.NoError(t, err)
	score, tr, ev := s.EvaluateTest(j, ct, answer, right, NewTrust(), t0)
	require.True(t, score.Correct)
	require.Equal(t, 0.75, tr.Value)
	require.Equal(t, "test judgment "+j.JudgmentID.String()+": right", tr.History[0].Reason)
	require.Equal(t, Event{Type: EventTestJudgmentEvaluated, Data: TestJudgmentEvaluatedData{
		JudgmentID: j.JudgmentID, ContributorID: worker, PoolID: pool, Correct: true, Trust: 0.75}}, ev)

	wrong, err := ct.ParseJudgment([]byte(`{"same": "no", "price": 10.6}`))
	require.NoError(t, err)
	score, tr, ev = s.EvaluateTest(j, ct, answer, wrong, tr, t0)
	require.False(t, score.Correct, "price outside the tolerance")
	require.Equal(t, 0.5, tr.Value) // 1.5 / 3
	require.False(t, ev.Data.(TestJudgmentEvaluatedData).Correct)
}

// Property: trust stays in (0, 1), rises with a right answer and falls
// with a wrong one.
func TestTrustProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		s := Defaults()
		s.TrustSmoothing = 0.01 + rng.Float64()*10
		a := rng.IntN(100)
		tr := Trust{TestsAnswered: a, TestsCorrect: rng.IntN(a + 1)}
		v := s.TrustValue(tr)
		require.Greater(t, v, 0.0)
		require.Less(t, v, 1.0)
		require.Greater(t, s.ScoreTest(tr, true, t0, "").Value, v)
		require.Less(t, s.ScoreTest(tr, false, t0, "").Value, v)
	}
}
