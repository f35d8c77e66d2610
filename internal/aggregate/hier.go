package aggregate

import (
	"math"
)

// hierConfig configures the empirical-Bayes hierarchical Dawid-Skene
// (experimental variants; see docs/aggregation.md).
type hierConfig struct {
	vb         bool    // M-step as variational Bayes: exp E[log π] instead of the posterior mean
	priorCount float64 // pseudo-count per class of the class prior (0 = unsmoothed)
	// init is the Dirichlet row prior the first M-step uses before any
	// estimate: diagonal and off-diagonal pseudo-counts.
	initDiag, initOff float64
	fixedPoint        int // Minka fixed-point steps per EM iteration
	// precisionOnly: the prior's mean row is the pooled counts of all
	// workers; only its strength (precision) is fitted by Minka's fixed point.
	precisionOnly bool
}

var hierDefault = hierConfig{priorCount: 1, initDiag: 2, initOff: 0.5, fixedPoint: 5}

// hierDS runs Dawid-Skene whose workers' confusion rows share a Dirichlet
// prior α_r (one per true class r) estimated from the data at every
// iteration: the maximum-likelihood Dirichlet-multinomial (Pólya) fit to
// all workers' expected counts of that row, by Minka's fixed point. A
// worker with many labels gets their own row; one with few inherits the
// crowd's.
func hierDS(x *index, opts Options, cfg hierConfig) (*Result, []float64) {
	k := x.nClasses()
	kk := k * k
	nW := len(x.workers)
	post := make([]float64, len(x.items)*k)
	ones := make([]float64, nW)
	for w := range ones {
		ones[w] = 1
	}
	voteShares(x, ones, post)
	alpha := make([]float64, kk)
	for r := 0; r < k; r++ {
		for c := 0; c < k; c++ {
			alpha[r*k+c] = cfg.initOff
			if r == c {
				alpha[r*k+c] = cfg.initDiag
			}
		}
	}
	counts := make([]float64, nW*kk)
	logConf := make([]float64, nW*kk)
	logPrior := make([]float64, k)
	prior := make([]float64, k)
	it, converged := 0, false
	for it < opts.MaxIterations {
		it++
		hierMaximise(x, post, cfg, alpha, counts, logConf, prior, logPrior)
		if emExpect(x, logConf, logPrior, post) < opts.Tolerance {
			converged = true
			break
		}
	}
	hierMaximise(x, post, cfg, alpha, counts, logConf, prior, logPrior)
	out := newResult(x, post)
	out.Iterations, out.Converged = it, converged
	model := &Model{Method: MethodDS, Classes: x.classes, Prior: make([]float64, k), Workers: make(map[string]WorkerModel, nW)}
	for c := range prior {
		model.Prior[c] = math.Exp(logPrior[c])
	}
	for w, id := range x.workers {
		conf := make([]float64, kk)
		for c, lc := range logConf[w*kk : (w+1)*kk] {
			conf[c] = math.Exp(lc)
		}
		model.Workers[id] = WorkerModel{Confusion: conf}
		out.Workers[w].Confusion = matrix(conf, k)
	}
	unk := make([]float64, kk)
	for r := 0; r < k; r++ {
		var s float64
		for c := 0; c < k; c++ {
			s += alpha[r*k+c]
		}
		for c := 0; c < k; c++ {
			unk[r*k+c] = alpha[r*k+c] / s
		}
	}
	model.Unknown = WorkerModel{Confusion: unk}
	out.Model = model
	return out, alpha
}

func hierMaximise(x *index, post []float64, cfg hierConfig, alpha, counts, logConf, prior, logPrior []float64) {
	k := x.nClasses()
	kk := k * k
	nW := len(x.workers)
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
	// Minka's fixed point for the Pólya (Dirichlet-multinomial) likelihood
	// of each row: α_c ← α_c Σ_w [ψ(n_wc+α_c)−ψ(α_c)] / Σ_w [ψ(N_w+A)−ψ(A)].
	for r := 0; r < k && cfg.precisionOnly; r++ {
		a := alpha[r*k : (r+1)*k]
		mean := make([]float64, k)
		var tot, A float64
		for w := range nW {
			for c := 0; c < k; c++ {
				mean[c] += counts[w*kk+r*k+c]
			}
		}
		for c := range mean {
			mean[c] += 1e-3
			tot += mean[c]
			A += a[c]
		}
		for c := range mean {
			mean[c] /= tot
		}
		for range cfg.fixedPoint {
			var num, den float64
			dA := digamma(A)
			for w := range nW {
				n := counts[w*kk+r*k : w*kk+(r+1)*k]
				var N float64
				for c, v := range n {
					N += v
					num += mean[c] * (digamma(v+A*mean[c]) - digamma(A*mean[c]))
				}
				den += digamma(N+A) - dA
			}
			if den <= 0 {
				break
			}
			A = min(max(A*num/den, 1e-3), 1e4)
		}
		for c := range a {
			a[c] = A * mean[c]
		}
	}
	for r := 0; r < k && !cfg.precisionOnly; r++ {
		a := alpha[r*k : (r+1)*k]
		for range cfg.fixedPoint {
			var A float64
			for _, v := range a {
				A += v
			}
			var den float64
			dA := digamma(A)
			num := make([]float64, k)
			for w := range nW {
				n := counts[w*kk+r*k : w*kk+(r+1)*k]
				var N float64
				for _, v := range n {
					N += v
				}
				if N < 1e-9 {
					continue
				}
				den += digamma(N+A) - dA
				for c, v := range n {
					num[c] += digamma(v+a[c]) - digamma(a[c])
				}
			}
			if den <= 0 {
				break
			}
			for c := range a {
				a[c] = min(max(a[c]*num[c]/den, 1e-3), 1e4)
			}
		}
	}
	for w := range nW {
		cw := counts[w*kk : (w+1)*kk]
		lw := logConf[w*kk : (w+1)*kk]
		for r := 0; r < k; r++ {
			var total float64
			for c := 0; c < k; c++ {
				total += cw[r*k+c] + alpha[r*k+c]
			}
			if cfg.vb {
				dt := digamma(total)
				for c := 0; c < k; c++ {
					lw[r*k+c] = digamma(cw[r*k+c]+alpha[r*k+c]) - dt
				}
				continue
			}
			lt := math.Log(total)
			for c := 0; c < k; c++ {
				lw[r*k+c] = math.Log(cw[r*k+c]+alpha[r*k+c]) - lt
			}
		}
	}
	clear(prior)
	for i := range x.items {
		for c, p := range post[i*k : (i+1)*k] {
			prior[c] += p
		}
	}
	total := float64(len(x.items)) + cfg.priorCount*float64(k)
	for c := range prior {
		prior[c] = (prior[c] + cfg.priorCount) / total
		logPrior[c] = math.Log(max(prior[c], 1e-300))
	}
}
