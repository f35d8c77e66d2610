package aggregate

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// js builds judgments from "item worker label" triples.
func js(triples ...string) []Judgment {
	out := make([]Judgment, 0, len(triples)/3)
	for n := 0; n+2 < len(triples); n += 3 {
		out = append(out, Judgment{Item: triples[n], Worker: triples[n+1], Label: triples[n+2]})
	}
	return out
}

// find returns the element of list whose key is id.
func find[T any](t *testing.T, list []T, id string, key func(T) string) T {
	t.Helper()
	for _, v := range list {
		if key(v) == id {
			return v
		}
	}
	t.Fatalf("no %q", id)
	var zero T
	return zero
}

func item(t *testing.T, res *Result, id string) ItemResult {
	t.Helper()
	return find(t, res.Items, id, func(it ItemResult) string { return it.Item })
}

func worker(t *testing.T, res *Result, id string) WorkerQuality {
	t.Helper()
	return find(t, res.Workers, id, func(w WorkerQuality) string { return w.Worker })
}

func TestMajorityVote(t *testing.T) {
	t.Parallel()
	in := js("i1", "w1", "b", "i1", "w2", "b", "i1", "w3", "a",
		"i2", "w1", "b", "i2", "w2", "a", // a tie
		"i3", "w3", "10", "i3", "w1", "9") // a tie between numeric labels
	res, err := Categorical(MethodMajority, in, Options{})
	require.NoError(t, err)
	// Numeric-looking labels mixed with others sort as strings.
	require.Equal(t, []string{"10", "9", "a", "b"}, res.Classes)
	i1 := item(t, res, "i1")
	require.Equal(t, "b", i1.Label)
	require.InDelta(t, 2.0/3, i1.Confidence, 1e-12)
	require.Equal(t, []float64{0, 0, 1.0 / 3, 2.0 / 3}, i1.Distribution)
	require.Equal(t, 3, i1.Judgments)
	// Ties go to the first class.
	require.Equal(t, "a", item(t, res, "i2").Label)
	require.Equal(t, 0.5, item(t, res, "i2").Confidence)
	require.Equal(t, "10", item(t, res, "i3").Label)
	// Declared classes set the tie order.
	res, err = Categorical(MethodMajority, in, Options{Classes: []string{"b", "a"}})
	require.NoError(t, err)
	require.Equal(t, []string{"b", "a", "9", "10"}, res.Classes, "undeclared labels follow, sorted")
	require.Equal(t, "b", item(t, res, "i2").Label)
	// Quality: agreement with the answers.
	require.InDelta(t, 1.0, worker(t, res, "w1").Accuracy, 1e-12) // b, b, 9 (9 wins the tie now)
	require.InDelta(t, 0.5, worker(t, res, "w2").Accuracy, 1e-12)
}

func TestWeightedVote(t *testing.T) {
	t.Parallel()
	in := js("i1", "w1", "a", "i1", "w2", "b", "i1", "w3", "b", "i2", "z1", "a", "i2", "z2", "b")
	trust := map[string]float64{"w1": 0.9, "w2": 0.3, "w3": 0.3, "z1": 0, "z2": 0}
	res, err := Categorical(MethodWeighted, in, Options{Trust: trust})
	require.NoError(t, err)
	i1 := item(t, res, "i1")
	require.Equal(t, "a", i1.Label)
	require.InDelta(t, 0.9/1.5, i1.Confidence, 1e-12, "Σ trust agreeing / Σ trust")
	// All trust 0: plain vote shares.
	require.Equal(t, []float64{0.5, 0.5}, item(t, res, "i2").Distribution)
	require.Equal(t, 0.9, worker(t, res, "w1").Weight)
	// A worker missing from Trust has TrustDefault.
	res, err = Categorical(MethodWeighted, in, Options{Trust: map[string]float64{"w1": 3}})
	require.NoError(t, err)
	require.InDelta(t, 0.6, item(t, res, "i1").Confidence, 1e-12)

	// Trust up to the float64 limit is accepted: the shares are the same
	// as for trust scaled down (their sum overflowed to +Inf: NaN).
	huge := map[string]float64{"w1": math.MaxFloat64, "w2": math.MaxFloat64 / 3, "w3": math.MaxFloat64 / 3, "z1": 0, "z2": 0}
	res, err = Categorical(MethodWeighted, in, Options{Trust: huge})
	require.NoError(t, err)
	i1 = item(t, res, "i1")
	require.Equal(t, "a", i1.Label)
	require.InDelta(t, 0.6, i1.Confidence, 1e-12)
	require.InDelta(t, 0.4, i1.Distribution[1], 1e-12)
	post, err := res.Model.Posterior("i1", []Vote{{"w1", "a"}, {"w2", "b"}, {"w3", "b"}})
	require.NoError(t, err)
	require.Equal(t, "a", post.Label)
	require.InDelta(t, 0.6, post.Confidence, 1e-12, "the incremental answer too")
	tiny := map[string]float64{"w1": 3e-324, "w2": 0, "w3": 0}
	res, err = Categorical(MethodWeighted, in, Options{Trust: tiny})
	require.NoError(t, err)
	require.Equal(t, []float64{1, 0}, item(t, res, "i1").Distribution, "the smallest trust still outweighs 0")

	_, err = Categorical(MethodWeighted, in, Options{Trust: map[string]float64{"w1": -1}})
	require.ErrorIs(t, err, ErrInput)
	_, err = Categorical(MethodWeighted, in, Options{Trust: map[string]float64{"w1": math.NaN()}})
	require.ErrorIs(t, err, ErrInput)
}

func TestWawa(t *testing.T) {
	t.Parallel()
	// Majority answers: i1 a, i2 a, i3 b. w1 agrees 3/3, w2 2/3, w3 1/3
	// (w3's i4 vote decides nothing: i4 is a tie w3 a vs w2 b).
	in := js("i1", "w1", "a", "i1", "w2", "a", "i1", "w3", "b",
		"i2", "w1", "a", "i2", "w2", "b", "i2", "w3", "a",
		"i3", "w1", "b", "i3", "w2", "b", "i3", "w3", "a",
		"i4", "w3", "a", "i4", "w2", "b")
	res, err := Categorical(MethodWawa, in, Options{})
	require.NoError(t, err)
	// MV: i4 ties → a. w1: 3/3, w2: i1 a ✓, i2 b ✗, i3 b ✓, i4 b ✗ = 2/4, w3: i1 ✗, i2 ✓, i3 ✗, i4 ✓ = 2/4.
	require.InDelta(t, 1.0, worker(t, res, "w1").Weight, 1e-12)
	require.InDelta(t, 0.5, worker(t, res, "w2").Weight, 1e-12)
	// i2: a has w1 1 + w3 0.5, b has w2 0.5.
	require.InDelta(t, 1.5/2, item(t, res, "i2").Confidence, 1e-12)
	require.Equal(t, "a", item(t, res, "i2").Label)
}

// honest builds n binary items with truth "a" on even items and "b" on
// odd ones, judged by good workers g0…g(k-1) who err on every tenth item
// (staggered), plus extra workers answering by fn(truth, item).
func honest(n, k int, extra map[string]func(truth string, i int) string) ([]Judgment, map[string]string) {
	var out []Judgment
	truth := make(map[string]string)
	other := map[string]string{"a": "b", "b": "a"}
	for i := range n {
		id := fmt.Sprintf("i%d", i)
		tr := "a"
		if i%2 == 1 {
			tr = "b"
		}
		truth[id] = tr
		for g := range k {
			l := tr
			if (i+g*3)%10 == 0 {
				l = other[tr]
			}
			out = append(out, Judgment{Item: id, Worker: fmt.Sprintf("g%d", g), Label: l})
		}
		for _, w := range []string{"adv", "spam"} {
			if fn, ok := extra[w]; ok {
				out = append(out, Judgment{Item: id, Worker: w, Label: fn(tr, i)})
			}
		}
	}
	return out, truth
}

func TestDawidSkeneFlipsAnAdversary(t *testing.T) {
	t.Parallel()
	other := map[string]string{"a": "b", "b": "a"}
	in, truth := honest(200, 3, map[string]func(string, int) string{
		"adv": func(tr string, _ int) string { return other[tr] },
	})
	// An item only the adversary judged: they said a, so it is b.
	in = append(in, Judgment{Item: "solo", Worker: "adv", Label: "a"})
	for _, m := range []Method{MethodDS, MethodZenCrowd, MethodGLAD, MethodEBCC} {
		res, err := Categorical(m, in, Options{})
		require.NoError(t, err)
		require.True(t, res.Converged, m)
		require.Equal(t, "b", item(t, res, "solo").Label, m)
		require.Greater(t, item(t, res, "solo").Confidence, 0.9, m)
		adv := worker(t, res, "adv")
		require.Less(t, adv.Accuracy, 0.05, m)
		require.Greater(t, adv.Confusion[0][1], 0.9, m)
		for id, tr := range truth {
			require.Equal(t, tr, item(t, res, id).Label, "%s %s", m, id)
		}
	}
	// Majority vote cannot flip them.
	res, err := Categorical(MethodMajority, in, Options{})
	require.NoError(t, err)
	require.Equal(t, "a", item(t, res, "solo").Label)
}

func TestDawidSkeneSeesASpammer(t *testing.T) {
	t.Parallel()
	in, _ := honest(200, 3, map[string]func(string, int) string{
		"spam": func(string, int) string { return "a" },
	})
	// The spammer's "a" against one good worker's "b": b wins under DS.
	in = append(in, Judgment{Item: "x", Worker: "spam", Label: "a"}, Judgment{Item: "x", Worker: "g0", Label: "b"})
	res, err := Categorical(MethodDS, in, Options{})
	require.NoError(t, err)
	require.Equal(t, "b", item(t, res, "x").Label)
	spam := worker(t, res, "spam").Confusion
	require.Greater(t, spam[0][0], 0.95) // says a when a …
	require.Greater(t, spam[1][0], 0.95) // … and when b
	// An item only the spammer judged stays at the prior.
	res2, err := res.Model.Posterior("y", []Vote{{Worker: "spam", Label: "a"}})
	require.NoError(t, err)
	require.InDelta(t, res.Model.Prior[0], res2.Distribution[0], 0.03)
}

func TestGold(t *testing.T) {
	t.Parallel()
	// w3 contradicts the gold answers; gold makes DS trust w1 and w2.
	in := js("g1", "w1", "a", "g1", "w2", "a", "g1", "w3", "b",
		"g2", "w1", "b", "g2", "w2", "b", "g2", "w3", "a",
		"i1", "w1", "a", "i1", "w3", "b")
	gold := map[string]string{"g1": "a", "g2": "b", "g3": "c"}
	for _, m := range []Method{MethodMajority, MethodWawa, MethodZenCrowd, MethodDS} {
		res, err := Categorical(m, in, Options{Gold: gold})
		require.NoError(t, err, m)
		require.Equal(t, []string{"a", "b", "c"}, res.Classes, "a gold-only label is a class")
		g1 := item(t, res, "g1")
		require.True(t, g1.Gold)
		require.Equal(t, "a", g1.Label)
		require.Equal(t, 1.0, g1.Confidence)
		g3 := item(t, res, "g3")
		require.Equal(t, "c", g3.Label, "a gold item nobody judged is still answered")
		require.Equal(t, 0, g3.Judgments)
		require.Less(t, worker(t, res, "w3").Accuracy, 0.5, m)
	}
	res, err := Categorical(MethodZenCrowd, in, Options{Gold: gold})
	require.NoError(t, err)
	require.Equal(t, "a", item(t, res, "i1").Label)
}

func TestEdgeCases(t *testing.T) {
	t.Parallel()
	for _, m := range Methods() {
		res, err := Categorical(m, nil, Options{})
		require.NoError(t, err, m)
		require.Empty(t, res.Items)
		require.Empty(t, res.Classes)
		_, err = res.Model.Posterior("x", nil)
		require.NoError(t, err)

		// One worker, one label.
		res, err = Categorical(m, js("i", "w", "x"), Options{})
		require.NoError(t, err, m)
		require.Equal(t, "x", res.Items[0].Label)
		require.InDelta(t, 1.0, res.Items[0].Confidence, 1e-12)

		// A declared class nobody chose.
		res, err = Categorical(m, js("i1", "w1", "a", "i1", "w2", "b", "i2", "w1", "a"), Options{Classes: []string{"a", "b", "c"}})
		require.NoError(t, err, m)
		for _, it := range res.Items {
			require.Len(t, it.Distribution, 3)
			require.NotEqual(t, "c", it.Label)
		}
		post, err := res.Model.Posterior("new", []Vote{{"w1", "c"}, {"stranger", "a"}})
		require.NoError(t, err, m)
		require.InDelta(t, 1, post.Distribution[0]+post.Distribution[1]+post.Distribution[2], 1e-9)
		_, err = res.Model.Posterior("new", []Vote{{"w1", "d"}})
		require.ErrorIs(t, err, ErrInput)
	}
	for _, bad := range [][]Judgment{js("", "w", "a"), js("i", "", "a"), js("i", "w", "")} {
		_, err := Categorical(MethodDS, bad, Options{})
		require.ErrorIs(t, err, ErrInput)
	}
	_, err := Categorical("vote", nil, Options{})
	require.ErrorContains(t, err, `unknown aggregation method "vote"`)
	_, err = Categorical(MethodDS, js("i", "w", "a"), Options{Classes: []string{"a", "a"}})
	require.ErrorIs(t, err, ErrInput)
	res, err := Categorical(MethodAuto, js("i", "w", "a"), Options{})
	require.NoError(t, err)
	require.Equal(t, MethodDefault, res.Method)
}

// randomJudgments is a small random dataset: three classes, workers of
// mixed quality, three to six judgments per item.
func randomJudgments(seed uint64, items int) []Judgment {
	r := rand.New(rand.NewPCG(seed, 1))
	classes := []string{"x", "y", "z"}
	var out []Judgment
	for i := range items {
		tr := r.IntN(3)
		for range 3 + r.IntN(4) {
			w := r.IntN(20)
			l := tr
			if r.Float64() > 0.5+float64(w)/40 {
				l = r.IntN(3)
			}
			out = append(out, Judgment{Item: fmt.Sprintf("item%d", i), Worker: fmt.Sprintf("w%d", w), Label: classes[l]})
		}
	}
	return out
}

// TestRenamingChangesNothing: renaming items and workers (a bijection) and
// shuffling the judgments gives the same answers; every distribution sums
// to 1.
func TestRenamingChangesNothing(t *testing.T) {
	t.Parallel()
	in := randomJudgments(7, 300)
	r := rand.New(rand.NewPCG(3, 4))
	perm := r.Perm(1000)
	renamed := make([]Judgment, len(in))
	for n, j := range in {
		var i, w int
		fmt.Sscanf(j.Item, "item%d", &i)
		fmt.Sscanf(j.Worker, "w%d", &w)
		renamed[n] = Judgment{Item: fmt.Sprintf("it-%d", perm[i]), Worker: fmt.Sprintf("wk-%d", perm[w]), Label: j.Label}
	}
	r.Shuffle(len(renamed), func(a, b int) { renamed[a], renamed[b] = renamed[b], renamed[a] })
	for _, m := range Methods() {
		a, err := Categorical(m, in, Options{})
		require.NoError(t, err)
		b, err := Categorical(m, renamed, Options{})
		require.NoError(t, err)
		byID := make(map[string]ItemResult)
		for _, it := range b.Items {
			byID[it.Item] = it
		}
		for _, it := range a.Items {
			var i int
			fmt.Sscanf(it.Item, "item%d", &i)
			other := byID[fmt.Sprintf("it-%d", perm[i])]
			if it.Confidence < 0.5+1e-6 && m != MethodDS && m != MethodZenCrowd {
				continue // a tie: its winner depends on class order only, checked elsewhere
			}
			require.Equal(t, it.Label, other.Label, "%s %s", m, it.Item)
			require.InDelta(t, it.Confidence, other.Confidence, 1e-4, "%s %s", m, it.Item)
			var sum float64
			for _, p := range it.Distribution {
				require.True(t, p >= 0 && p <= 1)
				sum += p
			}
			require.InDelta(t, 1, sum, 1e-9)
		}
	}
}

// TestPosteriorMatchesFullRun: the incremental posterior of an item under
// a converged model is the full run's answer, and survives a JSON round
// trip of the model.
func TestPosteriorMatchesFullRun(t *testing.T) {
	t.Parallel()
	in := randomJudgments(11, 500)
	for _, m := range Methods() {
		res, err := Categorical(m, in, Options{})
		require.NoError(t, err)
		raw, err := json.Marshal(res.Model)
		require.NoError(t, err)
		var loaded Model
		require.NoError(t, json.Unmarshal(raw, &loaded))
		votes := make(map[string][]Vote)
		for _, j := range in {
			votes[j.Item] = append(votes[j.Item], Vote{Worker: j.Worker, Label: j.Label})
		}
		differ := 0
		for _, it := range res.Items {
			for _, model := range []*Model{res.Model, &loaded} {
				p, err := model.Posterior(it.Item, votes[it.Item])
				require.NoError(t, err)
				if m == MethodEBCC || m == MethodGLAD {
					// Their models average the subtypes (EBCC) or the item
					// easiness (GLAD) out: close, not equal.
					if it.Label != p.Label {
						differ++
					}
					require.InDelta(t, it.Distribution[0], p.Distribution[0], 0.5, "%s %s", m, it.Item)
					continue
				}
				require.Equal(t, it.Label, p.Label, "%s %s", m, it.Item)
				require.InDelta(t, it.Confidence, p.Confidence, 1e-4, "%s %s", m, it.Item)
			}
		}
		require.Less(t, differ, len(res.Items)/20, m)
	}
}

func TestLogSigmoids(t *testing.T) {
	t.Parallel()
	for _, x := range []float64{-300, -30, -2.5, -1e-9, 0, 0.3, 4, 40, 300} {
		pos, neg := logSigmoids(x)
		require.InDelta(t, math.Log(1/(1+math.Exp(-x))), pos, 1e-9, x)
		require.InDelta(t, math.Log(1/(1+math.Exp(x))), neg, 1e-9, x)
	}
}

// TestPosteriorConcurrent: a shared model answers from many goroutines
// (run with -race).
func TestPosteriorConcurrent(t *testing.T) {
	t.Parallel()
	res, err := Categorical(MethodDS, randomJudgments(3, 100), Options{})
	require.NoError(t, err)
	raw, err := json.Marshal(res.Model)
	require.NoError(t, err)
	var m Model
	require.NoError(t, json.Unmarshal(raw, &m))
	type answer struct {
		res ItemResult
		err error
	}
	done := make(chan answer)
	for g := range 8 {
		go func() {
			p, err := m.Posterior("x", []Vote{{Worker: fmt.Sprintf("w%d", g), Label: "y"}, {Worker: "w1", Label: "y"}})
			done <- answer{p, err}
		}()
	}
	for range 8 {
		a := <-done
		require.NoError(t, a.err)
		require.Equal(t, "y", a.res.Label)
	}
}

// TestPosteriorRejectsAMalformedModel: a stored model whose sizes do not
// match its classes gives an error, not a panic.
func TestPosteriorRejectsAMalformedModel(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{"method":"ds","classes":["a","b"],"prior":[0.5],"workers":{},"unknown":{"confusion":[1,0,0,1]}}`,
		`{"method":"ds","classes":["a","b"],"prior":[0.5,0.5],"workers":{"w":{"confusion":[1]}},"unknown":{"confusion":[1,0,0,1]}}`,
	} {
		var m Model
		require.NoError(t, json.Unmarshal([]byte(raw), &m))
		_, err := m.Posterior("x", []Vote{{"w", "a"}})
		require.ErrorIs(t, err, ErrInput)
	}
}

// TestOrderChangesNothing: every method gives the same answer, to 1e-6,
// whatever the order of the judgments, on an input small enough for a
// start to matter (ebcc's subtypes once started from random draws taken
// in order of first appearance, so that reordering moved its answers).
func TestOrderChangesNothing(t *testing.T) {
	t.Parallel()
	in := js("a", "w1", "yes", "a", "w2", "yes", "a", "w3", "no",
		"b", "w1", "no", "b", "w2", "yes", "b", "w4", "no",
		"c", "w2", "no", "c", "w3", "no", "c", "w4", "yes",
		"d", "w1", "yes", "d", "w3", "yes", "d", "w4", "no",
		"e", "w2", "yes", "e", "w4", "yes",
		"f", "w1", "no", "f", "w3", "yes")
	r := rand.New(rand.NewPCG(5, 6))
	for _, m := range Methods() {
		want, err := Categorical(m, in, Options{})
		require.NoError(t, err)
		for range 30 {
			shuffled := append([]Judgment(nil), in...)
			r.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
			got, err := Categorical(m, shuffled, Options{})
			require.NoError(t, err)
			require.Equal(t, want.Classes, got.Classes, m)
			for _, w := range want.Items {
				g := item(t, got, w.Item)
				require.Equal(t, w.Label, g.Label, "%s item %s", m, w.Item)
				for c := range w.Distribution {
					require.InDelta(t, w.Distribution[c], g.Distribution[c], 1e-6, "%s item %s", m, w.Item)
				}
			}
		}
	}
}

// TestIDHashIsFNV1a: ebcc's start hashes ids as hash/fnv's New64a does.
func TestIDHashIsFNV1a(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"", "a", "344", "988_1500_0", "é☃"} {
		h := fnv.New64a()
		h.Write([]byte(id))
		require.Equal(t, h.Sum64(), idHash(id), id)
	}
}
