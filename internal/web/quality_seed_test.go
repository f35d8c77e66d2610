package web

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// The quality panels' data, made as a deployment makes it: a task whose
// quality settings mix test questions in, golden units, and contributors
// who take units and judge them through the public Client. Quality
// control scores, flags, taints and repairs by itself; the seed only
// moves the clock between a take and its judgment (the too-fast check).

// qualityTask: two to three judgments a unit, one more while the
// confidence is under 0.99 (dynamic overlap); one assignment in two a
// test question; flagged under trust 0.6 after 3 test questions, or at 2
// judgments sent less than 2 s after their take.
const qualityTask = `{"title": "Same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
 "judgmentsPerUnit": {"min": 2, "max": 3, "targetConfidence": 0.99},
 "quality": {"quizSize": 0, "testEvery": 2, "minTests": 3, "minTrust": 0.6, "minSeconds": 2, "tooFastLimit": 2}}`

// The answers: every test question's is yes.
const (
	answerYes = `{"same":"yes"}`
	answerNo  = `{"same":"no"}`
)

// qualitySeed is a pool whose first unit three contributors judged:
//   - Spam Bot says no to everything, once too fast: wrong on all three
//     test questions (one after the other: suspect after the first),
//     flagged on trust at the third; their judgments are
//     tainted and the finalized first unit recomputed from the two clean
//     ones (an audit of the change);
//   - Bob answered twice too fast and was flagged on the too-fast check,
//     then forgiven by an admin (his judgment counts again);
//   - Ada (the bundle's contributor) is right on her three test
//     questions.
type qualitySeed struct {
	b             *bundle
	pool          *docket.Pool
	unit          *docket.Unit // the first unit, finalized, its result audited
	ada, bob, spm *docket.Contributor
	spamJudgment  *docket.Judgment // the spammer's judgment of unit
}

// setupQuality is a dashboard whose client takes the oldest unit and
// runs on the bundle's clock.
func setupQuality(t *testing.T, backend testdb.Backend) *bundle {
	t.Helper()
	return setupConfig(t, backend, func(cfg *docket.Config, clk *clock) {
		cfg.TakeStrategy = docket.TakeOrdered
		cfg.Now = clk.Now
	})
}

// seedQuality makes the pool and has Spam Bot flagged.
func seedQuality(t *testing.T, b *bundle) *qualitySeed {
	t.Helper()
	ctx := context.Background()
	tmpl, err := docket.ParseTask([]byte(qualityTask))
	require.NoError(t, err)
	_, _, err = b.client.TaskPut(ctx, "same", tmpl)
	require.NoError(t, err)
	putWorkflow(t, b.client, `{"name": "review", "steps": [{"name": "label", "human": {"task": "same"}}]}`)
	pool, _, err := b.client.PoolEnsure(ctx, "review", 1, "label", "same")
	require.NoError(t, err)
	units, err := b.client.UnitsAdd(ctx, pool.ID, []json.RawMessage{json.RawMessage(`{"photo":"p1.png"}`), json.RawMessage(`{"photo":"p2.png"}`), json.RawMessage(`{"photo":"p3.png"}`)})
	require.NoError(t, err)
	var golden []docket.GoldenUnit
	for i := range 3 {
		golden = append(golden, docket.GoldenUnit{Input: json.RawMessage(fmt.Sprintf(`{"photo":"g%d.png"}`, i)), Answer: json.RawMessage(answerYes)})
	}
	_, err = b.client.GoldenAdd(ctx, pool.ID, golden)
	require.NoError(t, err)
	s := &qualitySeed{b: b, pool: pool, ada: b.contributor}
	s.bob, err = b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "bob", Name: "Bob"})
	require.NoError(t, err)
	s.spm, err = b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: "spam", Name: "Spam Bot"})
	require.NoError(t, err)
	fast, slow := time.Second, 10*time.Second

	// The first unit: the spammer's no (too fast), Bob's yes (too fast).
	u1 := units[0].ID
	first := s.work(t, s.spm, answerNo, fast)
	require.Equal(t, u1, first.Unit.ID)
	s.spamJudgment = first.Judgment
	require.Equal(t, u1, s.work(t, s.bob, answerYes, fast).Unit.ID)
	// Bob's second too-fast judgment (a test question) flags him.
	require.True(t, s.work(t, s.bob, answerYes, fast).Unit.Golden)
	st, err := b.client.ContributorQualityGet(ctx, pool.ID, s.bob.ID)
	require.NoError(t, err)
	require.True(t, st.Standing.Flagged, "two too-fast judgments flag Bob")
	require.EqualValues(t, "too_fast", st.Standing.Check)
	_, err = b.client.ContributorForgive(ctx, pool.ID, s.bob.ID, "key test-admin")
	require.NoError(t, err)

	// Ada's yes finalizes the first unit: no, yes, yes.
	fin := s.work(t, s.ada, answerYes, slow)
	require.Equal(t, u1, fin.Unit.ID)
	require.NotNil(t, fin.Finalized, "the third judgment finalizes the unit")

	// The spammer: a test question (no: wrong, and suspect from then on,
	// so every assignment is a test question), two more — flagged at the
	// third, the first unit recomputed without them.
	for i := range 3 {
		got := s.work(t, s.spm, answerNo, slow)
		require.True(t, got.Unit.Golden, "the spammer's assignment %d", i+2)
	}
	st, err = b.client.ContributorQualityGet(ctx, pool.ID, s.spm.ID)
	require.NoError(t, err)
	require.True(t, st.Standing.Flagged, "three wrong test questions flag the spammer")
	require.EqualValues(t, "trust", st.Standing.Check)

	// Ada: test, unit 2, test, unit 3, test — all yes, all right.
	for i := range 5 {
		got := s.work(t, s.ada, answerYes, slow)
		require.Equal(t, i%2 == 0, got.Unit.Golden, "Ada's assignment %d", i+2)
	}
	s.unit, err = b.client.UnitGet(ctx, u1)
	require.NoError(t, err)
	require.Equal(t, docket.UnitFinalized, s.unit.State)
	return s
}

// worked is one assignment taken and judged.
type worked struct {
	Unit      *docket.Unit
	Judgment  *docket.Judgment
	Finalized *docket.Unit
}

// work has who take the pool's next unit and, took later on the clock,
// judge it: answer for a regular unit, and for a test question too (the
// test's answer is yes).
func (s *qualitySeed) work(t *testing.T, who *docket.Contributor, answer string, took time.Duration) worked {
	t.Helper()
	ctx := context.Background()
	taken, err := s.b.client.AssignmentTake(ctx, s.pool.ID, who.ID)
	require.NoError(t, err)
	s.b.clock.Add(took)
	sub, err := s.b.client.JudgmentSubmit(ctx, taken.Assignment.ID, who.ID, json.RawMessage(answer))
	require.NoError(t, err)
	return worked{Unit: taken.Unit, Judgment: sub.Judgment, Finalized: sub.Finalized}
}

// more adds n contributors the pool keeps a state of (at the prior
// trust): each takes a unit of n new ones, and the take counts it.
func (s *qualitySeed) more(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	inputs := make([]json.RawMessage, n)
	for i := range inputs {
		inputs[i] = json.RawMessage(fmt.Sprintf(`{"photo":"extra-%d.png"}`, i))
	}
	_, err := s.b.client.UnitsAdd(ctx, s.pool.ID, inputs)
	require.NoError(t, err)
	for i := range n {
		c, err := s.b.client.ContributorCreate(ctx, docket.ContributorCreateParams{ExternalID: fmt.Sprintf("extra-%d", i), Name: fmt.Sprintf("Extra %02d", i)})
		require.NoError(t, err)
		_, err = s.b.client.AssignmentTake(ctx, s.pool.ID, c.ID)
		require.NoError(t, err)
	}
}
