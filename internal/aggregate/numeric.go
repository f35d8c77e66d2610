package aggregate

import (
	"fmt"
	"math"
	"slices"
)

// NumericJudgment is one worker's numeric answer to one item.
type NumericJudgment struct {
	Item   string
	Worker string
	Value  float64
}

// NumericMethod names a numeric aggregation method.
type NumericMethod string

// The numeric methods.
const (
	// NumericMean is the plain mean of the item's answers.
	NumericMean NumericMethod = "mean"
	// NumericMedian is the median (the mean of the two middle answers for
	// an even count): robust to a few wild answers.
	NumericMedian NumericMethod = "median"
	// NumericWeighted models each answer as truth + the worker's bias +
	// noise of the worker's variance, estimates all three by alternating
	// updates, and answers with the bias-corrected, inverse-variance
	// weighted mean.
	NumericWeighted NumericMethod = "weighted"
)

// NumericMethods lists the numeric methods.
func NumericMethods() []NumericMethod {
	return []NumericMethod{NumericMean, NumericMedian, NumericWeighted}
}

// NumericItem is the inferred value of one item.
type NumericItem struct {
	Item  string
	Value float64
	// StdErr is the estimated standard error of Value (0 with one answer
	// for mean and median).
	StdErr    float64
	Judgments int
}

// NumericWorker is the estimated bias and noise of one worker (weighted
// method; zero bias and the pooled deviation for the others).
type NumericWorker struct {
	Worker    string
	Judgments int
	Bias      float64
	StdDev    float64
}

// NumericResult is the outcome of [Numeric].
type NumericResult struct {
	Method     NumericMethod
	Items      []NumericItem
	Workers    []NumericWorker
	Iterations int
}

// Numeric aggregates numeric judgments. Items and workers keep the order of
// their first appearance. Values must be finite; results are clamped to
// ±MaxFloat64. Mean and median scale an item's values (and a worker's
// residuals) by a power of two only when they reach 2^500, leaving every
// other item and worker exact. The weighted method scales the whole input
// by one power of two when any value reaches 2^500: items 2^500 times
// smaller than the largest keep their values but not their spread (their
// standard errors and their workers' deviations are of the largest scale).
func Numeric(method NumericMethod, judgments []NumericJudgment, opts Options) (*NumericResult, error) {
	if !slices.Contains(NumericMethods(), method) {
		return nil, fmt.Errorf("%w: unknown numeric method %q (want mean, median or weighted)", ErrInput, method)
	}
	opts = opts.WithDefaults()
	cat := make([]Judgment, len(judgments))
	for n, j := range judgments {
		if math.IsNaN(j.Value) || math.IsInf(j.Value, 0) {
			return nil, fmt.Errorf("%w: judgment %d (item %q, worker %q) has value %v; want a finite number", ErrInput, n, j.Item, j.Worker, j.Value)
		}
		cat[n] = Judgment{Item: j.Item, Worker: j.Worker, Label: "v"}
	}
	x, err := newIndex(cat, Options{})
	if err != nil {
		return nil, err
	}
	// Values in the index's item-grouped order.
	vals := make([]float64, len(judgments))
	next := slices.Clone(x.start[:len(x.items)])
	itemOf := make(map[string]int32, len(x.items))
	for i, id := range x.items {
		itemOf[id] = int32(i)
	}
	for _, j := range judgments {
		i := itemOf[j.Item]
		vals[next[i]] = j.Value
		next[i]++
	}

	res := &NumericResult{Method: method, Items: make([]NumericItem, len(x.items)), Workers: make([]NumericWorker, len(x.workers))}
	for i, id := range x.items {
		res.Items[i] = NumericItem{Item: id, Judgments: int(x.start[i+1] - x.start[i])}
	}
	for w, id := range x.workers {
		res.Workers[w] = NumericWorker{Worker: id, Judgments: int(x.count[w])}
	}
	switch method {
	case NumericMean, NumericMedian:
		// Items are independent: each is scaled on its own, only when its
		// own answers reach 2^scaleExpMax, so one item near 1e308 does
		// not push the others' answers into the subnormal range.
		var sorted, scaled []float64
		for i := range x.items {
			v := vals[x.start[i]:x.start[i+1]]
			exp := scaleExp(v)
			if exp != 0 {
				scaled = scaleBy(append(scaled[:0], v...), exp)
				v = scaled
			}
			mean, sd := meanStd(v)
			it := &res.Items[i]
			it.Value = mean
			if method == NumericMedian {
				sorted = append(sorted[:0], v...)
				slices.Sort(sorted)
				n := len(sorted)
				it.Value = (sorted[(n-1)/2] + sorted[n/2]) / 2
			}
			if len(v) > 1 {
				it.StdErr = sd / math.Sqrt(float64(len(v)))
			}
			if exp != 0 {
				it.Value, it.StdErr = unscale(it.Value, exp), unscale(it.StdErr, exp)
			}
		}
		numericResiduals(x, vals, res, nil)
	case NumericWeighted:
		// Biases and variances are shared by all the items a worker
		// answered, so the whole input is fitted in one scale: answers
		// 2^500 and more times smaller than the largest lose their
		// spread (their squares underflow), and their items' standard
		// errors and the workers' deviations are those of the largest
		// answers' scale. Unscaled, the squared residuals of an item
		// near 1e308 overflow.
		exp := scaleExp(vals)
		scaleBy(vals, exp)
		res.Iterations = biasVariance(x, vals, res, opts)
		if exp != 0 {
			for i := range res.Items {
				it := &res.Items[i]
				it.Value, it.StdErr = unscale(it.Value, exp), unscale(it.StdErr, exp)
			}
			for w := range res.Workers {
				wk := &res.Workers[w]
				wk.Bias, wk.StdDev = unscale(wk.Bias, exp), unscale(wk.StdDev, exp)
			}
		}
	}
	return res, nil
}

// scaleExpMax is the binary exponent of the largest magnitude Numeric
// works on unscaled: sums and squares of values below 2^500 stay far from
// the float64 limit (about 2^1024).
const scaleExpMax = 500

// scaleExp is the power of two vals are divided by before they are
// aggregated (scaleBy), so that their largest magnitude falls in
// [0.5, 1): 0 (vals as they are) unless it is 2^scaleExpMax or more.
// Finite values near the float64 limit (1e200, 1e308) made the sums of
// the mean and the median's middle pair +Inf, and the weighted method's
// variances +Inf, so that every item of the input, theirs or not, came
// out NaN. The results are multiplied back by unscale.
func scaleExp(vals []float64) int {
	var top float64
	for _, v := range vals {
		top = max(top, math.Abs(v))
	}
	if _, exp := math.Frexp(top); exp > scaleExpMax {
		return exp
	}
	return 0
}

// scaleBy divides vals by 2^exp in place (exact) and returns them.
func scaleBy(vals []float64, exp int) []float64 {
	if exp != 0 {
		for j := range vals {
			vals[j] = math.Ldexp(vals[j], -exp)
		}
	}
	return vals
}

// unscale multiplies a result back by 2^exp, to the largest finite
// float64 of its sign when it is past it (a standard error of answers
// spanning -1e308 to 1e308): no JSON holds an infinity, and a unit whose
// aggregate cannot be written could never be finalized.
func unscale(v float64, exp int) float64 {
	v = math.Ldexp(v, exp)
	if math.IsInf(v, 0) {
		return math.Copysign(math.MaxFloat64, v)
	}
	return v
}

func meanStd(v []float64) (mean, sd float64) {
	for _, f := range v {
		mean += f
	}
	mean /= float64(len(v))
	if len(v) < 2 {
		return mean, 0
	}
	for _, f := range v {
		sd += (f - mean) * (f - mean)
	}
	return mean, math.Sqrt(sd / float64(len(v)-1))
}

// numericResiduals fills each worker's StdDev (and, with bias, their bias)
// from the residuals against the items' values. A worker whose largest
// residual reaches 2^scaleExpMax (or overflows: answers of -1e308 and 1e308)
// has its residuals computed in quarters and scaled by a power of two, its
// deviation clamped to the largest float64; the others' are computed as
// they are, so an item near 1e308 whose answers agree (residuals 0) leaves
// its workers' deviations on the other items intact.
func numericResiduals(x *index, vals []float64, res *NumericResult, bias []float64) {
	residual := func(j int32, i int, quarter bool) float64 {
		v, c := vals[j], res.Items[i].Value
		var b float64
		if bias != nil {
			b = bias[x.worker[j]]
		}
		if quarter {
			// Each term at most MaxFloat64/4: the sum cannot overflow.
			return math.Ldexp(v, -2) - math.Ldexp(c, -2) - math.Ldexp(b, -2)
		}
		return v - c - b
	}
	sq := make([]float64, len(x.workers))
	top := make([]float64, len(x.workers))
	for i := range x.items {
		for j := x.start[i]; j < x.start[i+1]; j++ {
			w := x.worker[j]
			r := residual(j, i, false)
			top[w] = max(top[w], math.Abs(r))
			sq[w] += r * r
		}
	}
	huge := make([]int, len(x.workers)) // the scale's exponent; 0: unscaled
	var anyHuge bool
	for w := range top {
		if _, e := math.Frexp(top[w]); e > scaleExpMax || math.IsInf(top[w], 0) {
			anyHuge = true
			huge[w] = -1
			sq[w], top[w] = 0, 0
		}
	}
	if anyHuge {
		for i := range x.items {
			for j := x.start[i]; j < x.start[i+1]; j++ {
				if w := x.worker[j]; huge[w] != 0 {
					top[w] = max(top[w], math.Abs(residual(j, i, true)))
				}
			}
		}
		for w := range huge {
			if huge[w] != 0 {
				_, huge[w] = math.Frexp(top[w])
			}
		}
		for i := range x.items {
			for j := x.start[i]; j < x.start[i+1]; j++ {
				if w := x.worker[j]; huge[w] != 0 {
					r := math.Ldexp(residual(j, i, true), -huge[w])
					sq[w] += r * r
				}
			}
		}
	}
	for w := range res.Workers {
		res.Workers[w].StdDev = math.Sqrt(sq[w] / float64(x.count[w]))
		if huge[w] != 0 {
			// The quarters: 2 more.
			res.Workers[w].StdDev = unscale(res.Workers[w].StdDev, huge[w]+2)
		}
		if bias != nil {
			res.Workers[w].Bias = bias[w]
		}
	}
}

// biasVariance fits value = truth + bias[w] + noise(σ²[w]). A worker's bias
// and variance are shrunk toward 0 and the pooled variance by a prior worth
// two answers, so a worker with one answer is neither trusted fully nor
// ignored; the biases are centred on their answer-weighted mean so the
// scale stays the crowd's. It returns the iterations run.
func biasVariance(x *index, vals []float64, res *NumericResult, opts Options) int {
	const priorN = 2.0
	nW := len(x.workers)
	bias := make([]float64, nW)
	variance := make([]float64, nW)
	value := make([]float64, len(x.items))
	// Start from the medians and the pooled variance.
	var sorted []float64
	for i := range x.items {
		sorted = append(sorted[:0], vals[x.start[i]:x.start[i+1]]...)
		slices.Sort(sorted)
		n := len(sorted)
		value[i] = (sorted[(n-1)/2] + sorted[n/2]) / 2
	}
	sum := make([]float64, nW)
	sq := make([]float64, nW)
	it := 0
	for it < opts.MaxIterations {
		it++
		// Worker bias and variance from the residuals.
		clear(sum)
		clear(sq)
		var pooled float64
		for i := range x.items {
			for j := x.start[i]; j < x.start[i+1]; j++ {
				r := vals[j] - value[i]
				sum[x.worker[j]] += r
				pooled += r * r
			}
		}
		pooled = pooled/float64(max(len(vals), 1)) + 1e-12
		var centre float64
		for w := range bias {
			bias[w] = sum[w] / (float64(x.count[w]) + priorN)
			centre += bias[w] * float64(x.count[w])
		}
		centre /= float64(max(len(vals), 1))
		for w := range bias {
			bias[w] -= centre
		}
		for i := range x.items {
			for j := x.start[i]; j < x.start[i+1]; j++ {
				r := vals[j] - value[i] - bias[x.worker[j]]
				sq[x.worker[j]] += r * r
			}
		}
		for w := range variance {
			variance[w] = (sq[w] + priorN*pooled) / (float64(x.count[w]) + priorN)
		}
		// Item values: the inverse-variance weighted, bias-corrected mean.
		var delta float64
		for i := range x.items {
			var num, den float64
			for j := x.start[i]; j < x.start[i+1]; j++ {
				w := x.worker[j]
				num += (vals[j] - bias[w]) / variance[w]
				den += 1 / variance[w]
			}
			v := num / den
			delta = max(delta, math.Abs(v-value[i])/math.Sqrt(pooled))
			value[i] = v
			res.Items[i].StdErr = math.Sqrt(1 / den)
		}
		if delta < opts.Tolerance {
			break
		}
	}
	for i := range x.items {
		res.Items[i].Value = value[i]
	}
	numericResiduals(x, vals, res, bias)
	return it
}
