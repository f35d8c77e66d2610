package aggregate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNumericHandComputed(t *testing.T) {
	t.Parallel()
	in := []NumericJudgment{{"i1", "w1", 1}, {"i1", "w2", 2}, {"i1", "w3", 10}, {"i2", "w1", 4}}
	res, err := Numeric(NumericMean, in, Options{})
	require.NoError(t, err)
	require.InDelta(t, 13.0/3, res.Items[0].Value, 1e-12)
	require.Equal(t, 4.0, res.Items[1].Value)
	require.Equal(t, 0.0, res.Items[1].StdErr, "one answer")
	res, err = Numeric(NumericMedian, in, Options{})
	require.NoError(t, err)
	require.Equal(t, 2.0, res.Items[0].Value)
	res, err = Numeric(NumericMedian, append(in, NumericJudgment{"i1", "w4", 3}), Options{})
	require.NoError(t, err)
	require.Equal(t, 2.5, res.Items[0].Value, "even count: mean of the middle two")
	res, err = Numeric(NumericWeighted, in, Options{})
	require.NoError(t, err)
	require.Len(t, res.Items, 2)

	for _, m := range NumericMethods() {
		res, err := Numeric(m, nil, Options{})
		require.NoError(t, err)
		require.Empty(t, res.Items)
	}
	_, err = Numeric(NumericMean, []NumericJudgment{{"i", "w", math.NaN()}}, Options{})
	require.ErrorIs(t, err, ErrInput)
	_, err = Numeric("mode", in, Options{})
	require.ErrorContains(t, err, `unknown numeric method "mode"`)
}

// TestNumericHugeValues: finite values near the float64 limit are
// aggregated to finite results. Unscaled, the mean and the median of
// three 1e308 were +Inf (their sum overflowed), and the weighted method
// answered NaN for every item, the ordinary item i1 too (a worker's
// variance overflowed).
func TestNumericHugeValues(t *testing.T) {
	t.Parallel()
	in := []NumericJudgment{{"i1", "w1", 1}, {"i1", "w2", 2},
		{"i2", "w1", 1e308}, {"i2", "w2", 1e308}, {"i2", "w3", 1e308},
		{"i3", "w1", -1.5e308}, {"i3", "w2", -1.7e308}}
	for _, m := range NumericMethods() {
		res, err := Numeric(m, in, Options{})
		require.NoError(t, err)
		for _, it := range res.Items {
			require.False(t, math.IsNaN(it.Value) || math.IsInf(it.Value, 0), "%s: item %s is %v", m, it.Item, it.Value)
			require.False(t, math.IsNaN(it.StdErr), "%s: item %s", m, it.Item)
		}
		require.InEpsilon(t, 1e308, res.Items[1].Value, 1e-9, m)
		require.InEpsilon(t, -1.6e308, res.Items[2].Value, 0.07, m)
		if m != NumericWeighted {
			require.Equal(t, 1.5, res.Items[0].Value, m)
			require.Equal(t, 1e308, res.Items[1].Value, m)
		}
		for _, w := range res.Workers {
			require.False(t, math.IsNaN(w.Bias) || math.IsNaN(w.StdDev), "%s: worker %s", m, w.Worker)
		}
	}
}

// TestNumericBiasVariance: on a seeded crowd whose workers have biases and
// very different noise, the weighted estimate beats mean and median, and
// finds the biases.
func TestNumericBiasVariance(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	const workers = 60
	bias := make([]float64, workers)
	sd := make([]float64, workers)
	for w := range workers {
		bias[w] = r.NormFloat64() * 3
		sd[w] = []float64{0.5, 2, 15}[w%3]
	}
	var in []NumericJudgment
	truth := make(map[string]float64)
	for i := range 2000 {
		id := fmt.Sprintf("n%d", i)
		truth[id] = r.Float64() * 100
		for _, w := range r.Perm(workers)[:5] {
			in = append(in, NumericJudgment{Item: id, Worker: fmt.Sprintf("w%d", w), Value: truth[id] + bias[w] + r.NormFloat64()*sd[w]})
		}
	}
	rmse := map[NumericMethod]float64{}
	for _, m := range NumericMethods() {
		res, err := Numeric(m, in, Options{})
		require.NoError(t, err)
		var s float64
		for _, it := range res.Items {
			d := it.Value - truth[it.Item]
			s += d * d
		}
		rmse[m] = math.Sqrt(s / float64(len(res.Items)))
		t.Logf("%s: RMSE %.3f (%d iterations)", m, rmse[m], res.Iterations)
		if m == NumericWeighted {
			// Biases are found up to the crowd's mean bias.
			var mean float64
			for _, b := range bias {
				mean += b / workers
			}
			for _, w := range res.Workers {
				var n int
				fmt.Sscanf(w.Worker, "w%d", &n)
				if sd[n] < 5 {
					require.InDelta(t, bias[n]-mean, w.Bias, 1, w.Worker)
				}
			}
		}
	}
	require.Less(t, rmse[NumericWeighted], rmse[NumericMedian]/2)
	require.Less(t, rmse[NumericWeighted], rmse[NumericMean]/2)
}

func TestMultiChoiceAndText(t *testing.T) {
	t.Parallel()
	in := []MultiJudgment{
		{"i1", "w1", []string{"cat", "dog"}}, {"i1", "w2", []string{"cat"}}, {"i1", "w3", []string{"cat", "dog"}},
		{"i2", "w1", nil}, {"i2", "w2", []string{"bird"}}, {"i2", "w3", nil},
	}
	res, err := MultiChoice(MethodMajority, in, Options{Classes: []string{"dog"}})
	require.NoError(t, err)
	require.Equal(t, []string{"dog", "bird", "cat"}, res.Options)
	require.Equal(t, "i1", res.Items[0].Item)
	require.Equal(t, []string{"dog", "cat"}, res.Items[0].Selected)
	require.InDelta(t, 2.0/3, res.Items[0].Probability[0], 1e-12)
	require.Empty(t, res.Items[1].Selected)
	require.InDelta(t, 1.0/3, res.Items[1].Probability[1], 1e-12)
	res, err = MultiChoice(MethodDS, in, Options{})
	require.NoError(t, err)
	require.Equal(t, MethodDS, res.Method)
	_, err = MultiChoice("nope", in, Options{})
	require.ErrorIs(t, err, ErrInput)

	text := Text([]TextJudgment{{"a", "w1", "hello"}, {"b", "w1", "x"}, {"a", "w2", "hi"}})
	require.Len(t, text, 2)
	require.Equal(t, "a", text[0].Item)
	require.Equal(t, []TextJudgment{{"a", "w1", "hello"}, {"a", "w2", "hi"}}, text[0].Answers)
}

// TestNumericHuge: answers near float64's limit are aggregated as any
// others, every result finite (their sums and squares overflowed to ±Inf,
// and NaN for the weighted method); answers of usual size are aggregated
// unscaled.
func TestNumericHuge(t *testing.T) {
	t.Parallel()
	js := []NumericJudgment{
		{"a", "w1", 1.7e308}, {"a", "w2", 1.7e308}, {"a", "w3", 1.6e308},
		{"b", "w1", -1.7e308}, {"b", "w2", 1.7e308},
		{"c", "w1", 1}, {"c", "w2", 3},
	}
	for _, m := range NumericMethods() {
		res, err := Numeric(m, js, Options{})
		require.NoError(t, err, m)
		for _, it := range res.Items {
			for _, v := range []float64{it.Value, it.StdErr} {
				require.False(t, math.IsInf(v, 0) || math.IsNaN(v), "%s: item %+v", m, it)
			}
		}
		for _, w := range res.Workers {
			require.False(t, math.IsNaN(w.Bias) || math.IsNaN(w.StdDev), "%s: worker %+v", m, w)
		}
		require.InEpsilon(t, 1.7e308, res.Items[0].Value, 0.1, m)
	}
	res, err := Numeric(NumericMean, js, Options{})
	require.NoError(t, err)
	require.Equal(t, 1.6666666666666667e308, res.Items[0].Value)
	require.Equal(t, 0.0, res.Items[1].Value)
	res, err = Numeric(NumericMedian, []NumericJudgment{{"a", "w1", 1e100}, {"a", "w2", 3e100}}, Options{})
	require.NoError(t, err)
	require.Equal(t, 2e100, res.Items[0].Value, "not scaled at 1e100")
	// w3's residual against the median -1.7e308 is 3.4e308: past the
	// limit, clamped.
	res, err = Numeric(NumericMedian, []NumericJudgment{{"a", "w1", -1.7e308}, {"a", "w2", -1.7e308}, {"a", "w3", 1.7e308}}, Options{})
	require.NoError(t, err)
	require.Equal(t, -1.7e308, res.Items[0].Value)
	require.Equal(t, []float64{0, 0, math.MaxFloat64}, []float64{res.Workers[0].StdDev, res.Workers[1].StdDev, res.Workers[2].StdDev})
}

// TestNumericHugeMixed: one item answered near 1e308 does not distort the
// others. All values were scaled by one power of two taken from the largest
// magnitude of the whole input, which pushed a's and c's answers into the
// subnormal range: mean and median gave a's standard error 0 (alone 0.88),
// every worker's deviation 0, c's value 2.0000000000131e-05; mean and
// median now scale each item on its own, and each worker's residuals
// only when they are huge. The weighted method keeps one scale.
func TestNumericHugeMixed(t *testing.T) {
	t.Parallel()
	// ordinary: b answered 7 by all, its residuals 0 as with 1e308.
	var ordinary, mixed []NumericJudgment
	for k, w := range []string{"w1", "w2", "w3"} {
		a := NumericJudgment{"a", w, []float64{1, 2, 4}[k]}
		c := NumericJudgment{"c", w, []float64{1e-5, 3e-5, 2e-5}[k]}
		ordinary = append(ordinary, a, NumericJudgment{"b", w, 7}, c)
		mixed = append(mixed, a, NumericJudgment{"b", w, 1e308}, c)
	}
	for _, m := range NumericMethods() {
		res, err := Numeric(m, mixed, Options{})
		require.NoError(t, err, m)
		require.Equal(t, []string{"a", "b", "c"}, []string{res.Items[0].Item, res.Items[1].Item, res.Items[2].Item})
		for _, it := range res.Items {
			for _, v := range []float64{it.Value, it.StdErr} {
				require.False(t, math.IsInf(v, 0) || math.IsNaN(v), "%s: item %+v", m, it)
			}
		}
		for _, w := range res.Workers {
			for _, v := range []float64{w.Bias, w.StdDev} {
				require.False(t, math.IsInf(v, 0) || math.IsNaN(v), "%s: worker %+v", m, w)
			}
		}
		if m == NumericWeighted {
			// One scale for the whole input (documented): a and c keep
			// their values, not their spread.
			require.InEpsilon(t, 1e308, res.Items[1].Value, 1e-12, m)
			require.InDelta(t, 7.0/3, res.Items[0].Value, 0.5, m)
			require.InDelta(t, 2e-5, res.Items[2].Value, 1e-5, m)
			continue
		}
		require.Equal(t, 1e308, res.Items[1].Value, m)
		alone, err := Numeric(m, ordinary, Options{})
		require.NoError(t, err, m)
		require.Equal(t, alone.Items[0], res.Items[0], m)
		require.Equal(t, alone.Items[2], res.Items[2], m)
		require.Equal(t, 2e-5, res.Items[2].Value, m)
		require.Equal(t, alone.Workers, res.Workers, m)
		require.Greater(t, res.Workers[0].StdDev, 0.5, m)
	}
}
