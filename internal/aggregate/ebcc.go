package aggregate

import (
	"math"
	"math/rand/v2"
)

// ebccConfig are the fixed hyperparameters of MethodEBCC.
type ebccConfig struct {
	groups int     // subtypes per class
	aPi    float64 // Dirichlet mass of the subtype mixture of a class
	alpha  float64 // pseudo-count of each class in the class prior
	aV, bV float64 // confusion-row pseudo-counts: diagonal, off-diagonal
	seed   uint64  // of the symmetry-breaking start of the subtypes
}

// ebccDefault are the published defaults of the method's authors,
// seed included.
var ebccDefault = ebccConfig{groups: 10, aPi: 0.1, alpha: 1, aV: 4, bV: 1, seed: 1234}

// ebcc runs enhanced Bayesian classifier combination (Li, Rubinstein and
// Cohn, ICML 2019) by mean-field variational Bayes: each true class has
// subtypes, each worker a confusion row per (class, subtype), so workers
// whose errors go together on some kind of item are modelled together.
// The subtypes start from a seeded random split, each item's drawn from
// the seed and the item's id: the same judgments in any order give the
// same answer (renaming an item changes its draws, so may move the answer
// a little, as another seed would).
func ebcc(x *index, opts Options, cfg ebccConfig) *Result {
	k := x.nClasses()
	m := cfg.groups
	nI, nW := len(x.items), len(x.workers)
	km := k * m
	// Start: vote shares, split over subtypes at seeded random. The draws
	// of an item come from its own id, not from its position: drawn in
	// order of first appearance, they moved with the order of the input.
	z := make([]float64, nI*k)
	majorityShares(x, z)
	zg := make([]float64, nI*km)
	src := rand.NewPCG(0, 0)
	r := rand.New(src)
	for i := range nI {
		src.Seed(cfg.seed, idHash(x.items[i]))
		for c := 0; c < k; c++ {
			var s float64
			row := zg[i*km+c*m : i*km+(c+1)*m]
			for g := range row {
				row[g] = -math.Log(1 - r.Float64())
				s += row[g]
			}
			for g := range row {
				row[g] *= z[i*k+c] / s
			}
		}
	}
	eta := make([]float64, km)
	nu := make([]float64, k)
	// mu and elogV are indexed [worker][label][class·subtype], so that one
	// judgment touches one contiguous run.
	mu := make([]float64, nW*km*k)
	elogPi := make([]float64, km)
	elogTau := make([]float64, k)
	elogV := make([]float64, nW*km*k)
	buf := make([]float64, km)
	it := 0
	converged := false
	for it < opts.MaxIterations {
		it++
		for c := range eta {
			eta[c] = cfg.aPi / float64(m)
		}
		for c := range nu {
			nu[c] = cfg.alpha
		}
		for i := range nI {
			for c := 0; c < km; c++ {
				eta[c] += zg[i*km+c]
			}
			for c := 0; c < k; c++ {
				nu[c] += z[i*k+c]
			}
		}
		for wl := range nW * k {
			run := mu[wl*km : (wl+1)*km]
			for cg := range run {
				run[cg] = cfg.bV
			}
			l := wl % k
			for g := 0; g < m; g++ {
				run[l*m+g] = cfg.aV
			}
		}
		for i := range nI {
			zi := zg[i*km : (i+1)*km]
			for j := x.start[i]; j < x.start[i+1]; j++ {
				run := mu[(int(x.worker[j])*k+int(x.label[j]))*km:][:km]
				for cg, p := range zi {
					run[cg] += p
				}
			}
		}
		for c := 0; c < k; c++ {
			var s float64
			for g := 0; g < m; g++ {
				s += eta[c*m+g]
			}
			ds := digamma(s)
			for g := 0; g < m; g++ {
				elogPi[c*m+g] = digamma(eta[c*m+g]) - ds
			}
		}
		var sNu float64
		for _, v := range nu {
			sNu += v
		}
		for c := range nu {
			elogTau[c] = digamma(nu[c]) - digamma(sNu)
		}
		for w := range nW {
			for cg := range km {
				var s float64
				for l := 0; l < k; l++ {
					s += mu[(w*k+l)*km+cg]
				}
				ds := digamma(s)
				for l := 0; l < k; l++ {
					at := (w*k+l)*km + cg
					elogV[at] = digamma(mu[at]) - ds
				}
			}
		}
		var delta float64
		for i := range nI {
			zi := z[i*k : (i+1)*k]
			if x.gold[i] >= 0 {
				for c := range zi {
					zi[c] = 0
				}
				zi[x.gold[i]] = 1
				for c := 0; c < km; c++ {
					zg[i*km+c] = 0
				}
				for g := 0; g < m; g++ {
					zg[i*km+int(x.gold[i])*m+g] = 1 / float64(m)
				}
				continue
			}
			for c := 0; c < k; c++ {
				for g := 0; g < m; g++ {
					buf[c*m+g] = elogPi[c*m+g] + elogTau[c]
				}
			}
			for j := x.start[i]; j < x.start[i+1]; j++ {
				run := elogV[(int(x.worker[j])*k+int(x.label[j]))*km:][:km]
				for cg, v := range run {
					buf[cg] += v
				}
			}
			normaliseLog(buf, zg[i*km:(i+1)*km])
			for c := 0; c < k; c++ {
				var s float64
				for g := 0; g < m; g++ {
					s += zg[i*km+c*m+g]
				}
				s = min(s, 1)
				delta = max(delta, math.Abs(s-zi[c]))
				zi[c] = s
			}
		}
		if delta < opts.Tolerance {
			converged = true
			break
		}
	}
	res := newResult(x, z)
	res.Iterations, res.Converged = it, converged
	res.Model = ebccModel(x, res, cfg, eta, nu, mu)
	return res
}

// idHash is the 64-bit FNV-1a hash of id (hash/fnv's New64a, without its
// allocations): a fixed function of the id alone, where maphash is seeded
// per process.
func idHash(id string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return h
}

// ebccModel summarises the fit for Model.Posterior: the expected class
// prior, and per worker the confusion matrix with the subtypes averaged
// out, P(l | k) = Σ_g E[π_kg] E[v_jkgl]. The correlations the subtypes
// model are lost, so an incremental posterior is close to, not equal to,
// a full run's.
func ebccModel(x *index, res *Result, cfg ebccConfig, eta, nu, mu []float64) *Model {
	k, m := x.nClasses(), cfg.groups
	km := k * m
	model := &Model{Method: MethodEBCC, Classes: x.classes, Prior: make([]float64, k), Workers: make(map[string]WorkerModel, len(x.workers))}
	var sNu float64
	for _, v := range nu {
		sNu += v
	}
	for c := range nu {
		model.Prior[c] = nu[c] / sNu
	}
	pi := make([]float64, k*m)
	for c := 0; c < k; c++ {
		var s float64
		for g := 0; g < m; g++ {
			s += eta[c*m+g]
		}
		for g := 0; g < m; g++ {
			pi[c*m+g] = eta[c*m+g] / s
		}
	}
	mean := make([]float64, k*k)
	for w, id := range x.workers {
		conf := make([]float64, k*k)
		for c := 0; c < k; c++ {
			for g := 0; g < m; g++ {
				var s float64
				for l := 0; l < k; l++ {
					s += mu[(w*k+l)*km+c*m+g]
				}
				for l := 0; l < k; l++ {
					conf[c*k+l] += pi[c*m+g] * mu[(w*k+l)*km+c*m+g] / s
				}
			}
		}
		for c := range conf {
			mean[c] += conf[c] / float64(len(x.workers))
		}
		model.Workers[id] = WorkerModel{Confusion: conf}
		res.Workers[w].Confusion = matrix(conf, k)
	}
	if len(x.workers) == 0 {
		for c := range mean {
			mean[c] = 1 / float64(k)
		}
	}
	model.Unknown = WorkerModel{Confusion: mean}
	return model
}

// digamma is ψ(x) for x > 0: the recurrence up to x ≥ 6, then the
// asymptotic series.
func digamma(x float64) float64 {
	var r float64
	for x < 6 {
		r -= 1 / x
		x++
	}
	f := 1 / (x * x)
	return r + math.Log(x) - 0.5/x - f*(1.0/12-f*(1.0/120-f*(1.0/252-f*(1.0/240-f/132))))
}
