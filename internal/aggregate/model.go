package aggregate

import (
	"fmt"
	"math"
	"sync"
)

// Model is what a full estimation learned about a pool: the classes, the
// class prior, and each worker's confusion matrix (probabilistic methods)
// or vote weight (votes). It is plain data, so it can be stored as JSON and
// loaded again; [Model.Posterior] uses it to answer one item at a time.
//
// A Model is safe for concurrent use once built; do not change its fields
// after the first call to Posterior.
type Model struct {
	Method  Method   `json:"method"`
	Classes []string `json:"classes"`
	// Prior is the class prior, in the order of Classes (nil for votes).
	Prior []float64 `json:"prior,omitempty"`
	// Workers maps a worker id to what was learned about them.
	Workers map[string]WorkerModel `json:"workers"`
	// Unknown stands in for a worker the model has not seen: the mean
	// confusion matrix of the pool, or the default or mean vote weight.
	Unknown WorkerModel `json:"unknown"`

	once    sync.Once
	classOf map[string]int
	logs    map[string][]float64 // worker → log confusion
	logUnk  []float64
	logPri  []float64
	invalid error // a loaded model whose sizes do not match its classes
}

// WorkerModel is one worker's parameters in a Model.
type WorkerModel struct {
	// Weight is the worker's vote weight (votes only).
	Weight float64 `json:"weight,omitempty"`
	// Confusion is the worker's confusion matrix, row-major: Confusion[k*K+l]
	// is the probability of answering class l when the truth is class k
	// (probabilistic methods only).
	Confusion []float64 `json:"confusion,omitempty"`
}

// Vote is one judgment of the item given to Model.Posterior.
type Vote struct {
	Worker string
	Label  string
}

func (m *Model) prepare() {
	m.once.Do(func() {
		m.classOf = make(map[string]int, len(m.Classes))
		for c, s := range m.Classes {
			m.classOf[s] = c
		}
		if m.Prior == nil {
			return
		}
		k := len(m.Classes)
		if len(m.Prior) != k || len(m.Unknown.Confusion) != k*k {
			m.invalid = fmt.Errorf("%w: the model has %d classes but a prior of %d and an unknown-worker matrix of %d values",
				ErrInput, k, len(m.Prior), len(m.Unknown.Confusion))
			return
		}
		m.logs = make(map[string][]float64, len(m.Workers))
		for id, w := range m.Workers {
			if len(w.Confusion) != k*k {
				m.invalid = fmt.Errorf("%w: worker %q has a confusion matrix of %d values, want %d", ErrInput, id, len(w.Confusion), k*k)
				return
			}
			m.logs[id] = logs(w.Confusion)
		}
		m.logUnk = logs(m.Unknown.Confusion)
		m.logPri = logs(m.Prior)
	})
}

func logs(p []float64) []float64 {
	out := make([]float64, len(p))
	for i, v := range p {
		out[i] = math.Log(v)
	}
	return out
}

// weight is a voter's weight: the model's, or Unknown's for a worker it
// has not seen.
func (m *Model) weight(worker string) float64 {
	if w, ok := m.Workers[worker]; ok {
		return w.Weight
	}
	return m.Unknown.Weight
}

// Posterior gives one item's answer from its votes under the model, with
// no re-estimation: the posterior over the classes for the probabilistic
// methods, the weighted vote shares for the votes. Workers the model has
// not seen count as Model.Unknown. A label that is not one of the model's
// classes is an error (re-estimate to learn a new class). With no votes
// the answer is the prior (votes: uniform).
//
// Cost: one map lookup per vote plus O(votes × classes) arithmetic — about
// a microsecond for ten votes (see BenchmarkPosterior).
func (m *Model) Posterior(item string, votes []Vote) (ItemResult, error) {
	m.prepare()
	k := len(m.Classes)
	d := make([]float64, k)
	res := ItemResult{Item: item, Distribution: d, Judgments: len(votes)}
	if m.invalid != nil {
		return res, m.invalid
	}
	if k == 0 {
		if len(votes) > 0 {
			return res, fmt.Errorf("%w: label %q is not a class of the model", ErrInput, votes[0].Label)
		}
		return res, nil
	}
	if m.Prior != nil {
		copy(d, m.logPri)
		for _, v := range votes {
			l, ok := m.classOf[v.Label]
			if !ok {
				return res, fmt.Errorf("%w: label %q (worker %q) is not a class of the model", ErrInput, v.Label, v.Worker)
			}
			lw, ok := m.logs[v.Worker]
			if !ok {
				lw = m.logUnk
			}
			for c := range d {
				d[c] += lw[c*k+l]
			}
		}
		var lp [16]float64
		buf := lp[:0]
		buf = append(buf, d...)
		normaliseLog(buf, d)
	} else {
		// Weights divided by the largest, as voteShares does: the shares
		// are the same, and a sum near the float64 limit does not overflow.
		var top, total float64
		for _, v := range votes {
			if _, ok := m.classOf[v.Label]; !ok {
				return res, fmt.Errorf("%w: label %q (worker %q) is not a class of the model", ErrInput, v.Label, v.Worker)
			}
			top = max(top, m.weight(v.Worker))
		}
		if top > 0 {
			for _, v := range votes {
				wt := m.weight(v.Worker) / top
				d[m.classOf[v.Label]] += wt
				total += wt
			}
		}
		if total == 0 {
			for _, v := range votes {
				d[m.classOf[v.Label]]++
				total++
			}
		}
		if total == 0 {
			total = float64(k)
			for c := range d {
				d[c] = 1
			}
		}
		for c := range d {
			d[c] /= total
		}
	}
	best := argmax(d)
	res.Label, res.Confidence = m.Classes[best], d[best]
	return res, nil
}
