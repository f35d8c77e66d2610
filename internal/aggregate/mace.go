package aggregate

import "math"

// maceConfig: the priors of MACE (Hovy, Berg-Kirkpatrick, Vaswani, Hovy,
// NAACL 2013), as MAP pseudo-counts.
type maceConfig struct {
	spamA, spamB float64 // Beta pseudo-counts on (spamming, answering honestly)
	xi           float64 // Dirichlet pseudo-count on each label of the spam distribution
	prior        float64 // class-prior pseudo-count; < 0: uniform prior
}

var maceDefault = maceConfig{spamA: 0.5, spamB: 0.5, xi: 10, prior: 1}

// mace: each worker answers the truth, or with probability θ_w "spams" a
// label drawn from their own distribution ξ_w. The worker's confusion
// matrix is (1−θ_w)·I + θ_w·1ξ_wᵀ: k parameters per worker, between
// one-coin and a full matrix, and never adversarial.
func mace(x *index, opts Options, cfg maceConfig) *Result {
	k := x.nClasses()
	kk := k * k
	nW := len(x.workers)
	post := make([]float64, len(x.items)*k)
	ones := make([]float64, nW)
	for w := range ones {
		ones[w] = 1
	}
	voteShares(x, ones, post)
	theta := make([]float64, nW)
	xi := make([]float64, nW*k)
	spam := make([]float64, nW)
	xiN := make([]float64, nW*k)
	logConf := make([]float64, nW*kk)
	logPrior := make([]float64, k)
	prior := make([]float64, k)
	for w := range theta {
		theta[w] = 0.5
		for l := 0; l < k; l++ {
			xi[w*k+l] = 1 / float64(k)
		}
	}
	it, converged := 0, false
	maximise := func() {
		clear(spam)
		clear(xiN)
		for i := range x.items {
			d := post[i*k : (i+1)*k]
			for j := x.start[i]; j < x.start[i+1]; j++ {
				w, l := int(x.worker[j]), int(x.label[j])
				s := theta[w] * xi[w*k+l]
				for t, p := range d {
					h := 0.0
					if t == l {
						h = 1 - theta[w]
					}
					e := p * s / (h + s)
					spam[w] += e
					xiN[w*k+l] += e
				}
			}
		}
		for w := range nW {
			n := float64(x.count[w])
			theta[w] = (spam[w] + cfg.spamA) / (n + cfg.spamA + cfg.spamB)
			var tot float64
			for l := 0; l < k; l++ {
				tot += xiN[w*k+l] + cfg.xi
			}
			for l := 0; l < k; l++ {
				xi[w*k+l] = (xiN[w*k+l] + cfg.xi) / tot
			}
			for t := 0; t < k; t++ {
				for l := 0; l < k; l++ {
					p := theta[w] * xi[w*k+l]
					if t == l {
						p += 1 - theta[w]
					}
					logConf[w*kk+t*k+l] = math.Log(p)
				}
			}
		}
		clear(prior)
		for i := range x.items {
			for c, p := range post[i*k : (i+1)*k] {
				prior[c] += p
			}
		}
		for c := range prior {
			if cfg.prior < 0 {
				prior[c] = 1 / float64(k)
			} else {
				prior[c] = (prior[c] + cfg.prior) / (float64(len(x.items)) + cfg.prior*float64(k))
			}
			logPrior[c] = math.Log(prior[c])
		}
	}
	for it < opts.MaxIterations {
		it++
		maximise()
		if emExpect(x, logConf, logPrior, post) < opts.Tolerance {
			converged = true
			break
		}
	}
	out := newResult(x, post)
	out.Iterations, out.Converged = it, converged
	return out
}
