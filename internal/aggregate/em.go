package aggregate

import (
	"math"
)

// Smoothing of the Dawid-Skene methods: Dirichlet pseudo-counts added to
// the counts of every re-estimation (a MAP estimate), the same for every
// dataset. They keep every probability above 0 — a class nobody chose, a
// confusion row a worker never met — so that no single judgment can veto a
// class and a row with no data stays uniform.
type smoothing struct {
	diag  float64 // pseudo-count on each confusion row's diagonal
	off   float64 // pseudo-count on each off-diagonal cell
	prior float64 // pseudo-count on each class of the class prior
}

// cell is the pseudo-count of confusion cell (true r, label c).
func (s smoothing) cell(r, c int) float64 {
	if r == c {
		return s.diag
	}
	return s.off
}

// smoothingDefault is used by MethodDS and MethodZenCrowd: each confusion
// row starts as if the worker had been right twice and wrong half a time
// per other class, and each class as if seen once. Almost no smoothing
// scores 0.1 point more on D_Product but loses 10 points or more on crowds
// with many workers who give a few labels (TestSyntheticCrowds), where
// unsmoothed Dawid-Skene trusts a worker with one label completely: see
// docs/aggregation.md.
var smoothingDefault = smoothing{diag: 2, off: 0.5, prior: 1}

// dawidSkene runs expectation-maximisation for MethodDS (a confusion
// matrix per worker, a class prior) or MethodZenCrowd (one accuracy per
// worker, a uniform prior), started from the majority-vote shares.
func dawidSkene(method Method, x *index, opts Options) *Result {
	return runEM(method, x, opts, smoothingDefault)
}

func runEM(method Method, x *index, opts Options, s smoothing) *Result {
	post := make([]float64, len(x.items)*x.nClasses())
	majorityShares(x, post)
	return runEMFrom(method, x, opts, s, post)
}

// runEMFrom runs the EM of runEM from the given posteriors (overwritten).
func runEMFrom(method Method, x *index, opts Options, s smoothing, post []float64) *Result {
	k := x.nClasses()
	nW := len(x.workers)
	logConf := make([]float64, nW*k*k)
	counts := make([]float64, nW*k*k)
	logPrior := make([]float64, k)
	prior := make([]float64, k)
	res := &Result{}
	for res.Iterations < opts.MaxIterations {
		res.Iterations++
		emMaximise(method, x, post, s, counts, logConf, prior, logPrior)
		if emExpect(x, logConf, logPrior, post) < opts.Tolerance {
			res.Converged = true
			break
		}
	}
	// The parameters that match the final posteriors.
	emMaximise(method, x, post, s, counts, logConf, prior, logPrior)

	out := newResult(x, post)
	out.Iterations, out.Converged = res.Iterations, res.Converged
	model := &Model{Method: method, Classes: x.classes, Prior: make([]float64, k), Workers: make(map[string]WorkerModel, nW)}
	for c := range prior {
		model.Prior[c] = math.Exp(logPrior[c])
	}
	mean := make([]float64, k*k)
	for w, id := range x.workers {
		conf := make([]float64, k*k)
		for c, lc := range logConf[w*k*k : (w+1)*k*k] {
			conf[c] = math.Exp(lc)
			mean[c] += conf[c] / float64(nW)
		}
		model.Workers[id] = WorkerModel{Confusion: conf}
		out.Workers[w].Confusion = matrix(conf, k)
	}
	if nW == 0 {
		for c := range mean {
			mean[c] = 1 / float64(k)
		}
	}
	model.Unknown = WorkerModel{Confusion: mean}
	out.Model = model
	return out
}

// matrix views a row-major k×k slice as rows.
func matrix(flat []float64, k int) [][]float64 {
	m := make([][]float64, k)
	for r := range m {
		m[r] = flat[r*k : (r+1)*k : (r+1)*k]
	}
	return m
}

// emMaximise re-estimates the log confusion matrices and the log class
// prior from the posteriors (MAP estimates under the smoothing).
func emMaximise(method Method, x *index, post []float64, s smoothing, counts, logConf, prior, logPrior []float64) {
	k := x.nClasses()
	kk := k * k
	clear(counts)
	for i := range x.items {
		d := post[i*k : (i+1)*k]
		for j := x.start[i]; j < x.start[i+1]; j++ {
			row := counts[int(x.worker[j])*kk+int(x.label[j]):]
			for c, p := range d {
				row[c*k] += p
			}
		}
	}
	for w := range x.workers {
		cw := counts[w*kk : (w+1)*kk]
		lw := logConf[w*kk : (w+1)*kk]
		if method == MethodZenCrowd {
			var right float64
			for c := 0; c < k; c++ {
				right += cw[c*k+c]
			}
			n := float64(x.count[w])
			// k−1 off-diagonal cells per row, k rows, share the off pseudo-counts.
			acc := (right + s.diag) / (n + s.diag + s.off)
			var lRight, lWrong float64
			if k > 1 {
				lRight, lWrong = math.Log(acc), math.Log((1-acc)/float64(k-1))
			}
			for c := range lw {
				lw[c] = lWrong
			}
			for c := 0; c < k; c++ {
				lw[c*k+c] = lRight
			}
			continue
		}
		for r := 0; r < k; r++ {
			var total float64
			for c := 0; c < k; c++ {
				total += cw[r*k+c] + s.cell(r, c)
			}
			lt := math.Log(total)
			for c := 0; c < k; c++ {
				lw[r*k+c] = math.Log(cw[r*k+c]+s.cell(r, c)) - lt
			}
		}
	}
	if method == MethodZenCrowd {
		for c := range prior {
			prior[c] = 1 / float64(k)
			logPrior[c] = math.Log(prior[c])
		}
		return
	}
	clear(prior)
	for i := range x.items {
		for c, p := range post[i*k : (i+1)*k] {
			prior[c] += p
		}
	}
	total := float64(len(x.items)) + s.prior*float64(k)
	for c := range prior {
		prior[c] = (prior[c] + s.prior) / total
		logPrior[c] = math.Log(prior[c])
	}
}

// emExpect recomputes every item's posterior from the parameters and
// returns the largest change of any probability. Gold items stay clamped.
func emExpect(x *index, logConf, logPrior, post []float64) float64 {
	k := x.nClasses()
	kk := k * k
	var lp [16]float64
	buf := lp[:]
	if k > len(lp) {
		buf = make([]float64, k)
	}
	buf = buf[:k]
	var delta float64
	for i := range x.items {
		if x.gold[i] >= 0 {
			continue
		}
		copy(buf, logPrior)
		for j := x.start[i]; j < x.start[i+1]; j++ {
			lw := logConf[int(x.worker[j])*kk+int(x.label[j]):]
			for c := range buf {
				buf[c] += lw[c*k]
			}
		}
		delta = max(delta, normaliseLog(buf, post[i*k:(i+1)*k]))
	}
	return delta
}

// normaliseLog writes softmax(logp) into dst and returns the largest
// change of a value of dst.
func normaliseLog(logp, dst []float64) float64 {
	m := math.Inf(-1)
	for _, v := range logp {
		m = max(m, v)
	}
	var sum float64
	for c, v := range logp {
		logp[c] = math.Exp(v - m)
		sum += logp[c]
	}
	var delta float64
	for c, v := range logp {
		v /= sum
		delta = max(delta, math.Abs(v-dst[c]))
		dst[c] = v
	}
	return delta
}
