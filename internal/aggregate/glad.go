package aggregate

import "math"

// GLAD's priors (Whitehill et al. 2009 use the same): ability α ~ N(1, 1),
// log easiness b ~ N(1, 1).
const (
	gladAbilityMean  = 1.0
	gladEasinessMean = 1.0
	// gladMaxStep bounds one step: where σ saturates the curvature
	// vanishes and an unbounded Newton step would overshoot.
	gladMaxStep = 0.5
)

// glad runs GLAD: a worker with ability α answers an item of easiness
// β = e^b correctly with probability σ(αβ), and otherwise picks one of the
// other classes at random. EM: the E-step is exact, the M-step takes one bounded
// Fisher-scoring step on α and b under their Gaussian priors. Negative
// abilities model adversaries.
func glad(x *index, opts Options) *Result {
	k := x.nClasses()
	nI, nW := len(x.items), len(x.workers)
	post := make([]float64, nI*k)
	majorityShares(x, post)
	alpha := make([]float64, nW)
	for w := range alpha {
		alpha[w] = gladAbilityMean
	}
	b := make([]float64, nI)
	for i := range b {
		b[i] = gladEasinessMean
	}
	prior := make([]float64, k)
	logPrior := make([]float64, k)
	gradA := make([]float64, nW)
	curvA := make([]float64, nW)
	logWrong := 0.0
	if k > 1 {
		logWrong = math.Log(float64(k - 1))
	}
	var lp [16]float64
	buf := lp[:]
	if k > len(lp) {
		buf = make([]float64, k)
	}
	buf = buf[:k]

	mStep := func() {
		clear(gradA)
		clear(curvA)
		for i := range nI {
			beta := math.Exp(b[i])
			var g, c float64
			for j := x.start[i]; j < x.start[i+1]; j++ {
				w := x.worker[j]
				p := post[i*k+int(x.label[j])] // probability the judgment is right
				s := sigmoid(alpha[w] * beta)
				d := p - s
				v := s * (1 - s)
				gradA[w] += d * beta
				curvA[w] += v * beta * beta
				ab := alpha[w] * beta
				g += d * ab
				c += v * ab * ab
			}
			b[i] += clamp((g-(b[i]-gladEasinessMean))/(c+1), gladMaxStep)
		}
		for w := range alpha {
			alpha[w] += clamp((gradA[w]-(alpha[w]-gladAbilityMean))/(curvA[w]+1), gladMaxStep)
		}
	}
	// A uniform class prior, as in the original: learning it lets the
	// prior and the easiness feed each other (hard items fall to the
	// prior, which grows), and on skewed data it runs away.
	for c := range prior {
		prior[c] = 1 / float64(k)
		logPrior[c] = math.Log(prior[c])
	}

	res := &Result{}
	for res.Iterations < opts.MaxIterations {
		res.Iterations++
		mStep()
		var delta float64
		for i := range nI {
			if x.gold[i] >= 0 {
				continue
			}
			beta := math.Exp(b[i])
			copy(buf, logPrior)
			for j := x.start[i]; j < x.start[i+1]; j++ {
				right, wrong := logSigmoids(alpha[x.worker[j]] * beta)
				wrong -= logWrong
				l := int(x.label[j])
				for c := range buf {
					if c == l {
						buf[c] += right
					} else {
						buf[c] += wrong
					}
				}
			}
			delta = max(delta, normaliseLog(buf, post[i*k:(i+1)*k]))
		}
		if delta < opts.Tolerance {
			res.Converged = true
			break
		}
	}

	out := newResult(x, post)
	out.Iterations, out.Converged = res.Iterations, res.Converged
	// The model: a one-coin worker at the mean easiness.
	var meanB float64
	for _, v := range b {
		meanB += v / float64(max(nI, 1))
	}
	beta := math.Exp(meanB)
	model := &Model{Method: MethodGLAD, Classes: x.classes, Prior: prior, Workers: make(map[string]WorkerModel, nW)}
	oneCoin := func(a float64) []float64 {
		conf := make([]float64, k*k)
		s := sigmoid(a * beta)
		for r := 0; r < k; r++ {
			for c := 0; c < k; c++ {
				if r == c {
					conf[r*k+c] = s
				} else {
					conf[r*k+c] = (1 - s) / float64(k-1)
				}
			}
		}
		return conf
	}
	var meanA float64
	for w, id := range x.workers {
		conf := oneCoin(alpha[w])
		model.Workers[id] = WorkerModel{Weight: alpha[w], Confusion: conf}
		out.Workers[w].Weight = alpha[w]
		out.Workers[w].Confusion = matrix(conf, k)
		meanA += alpha[w] / float64(nW)
	}
	if nW == 0 {
		meanA = gladAbilityMean
	}
	model.Unknown = WorkerModel{Weight: meanA, Confusion: oneCoin(meanA)}
	out.Model = model
	return out
}

func clamp(v, limit float64) float64 { return max(-limit, min(limit, v)) }

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// logSigmoids is log σ(x) and log σ(−x), with one exp and one log1p,
// stable for large |x|.
func logSigmoids(x float64) (pos, neg float64) {
	l := math.Log1p(math.Exp(-math.Abs(x)))
	if x >= 0 {
		return -l, -x - l
	}
	return x - l, -l
}
