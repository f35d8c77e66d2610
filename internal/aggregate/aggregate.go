// Package aggregate infers the true answer of crowd-labelled items (truth
// inference): given several people's judgments of each item it decides the
// answer, says how sure it is, and estimates how good each worker is.
//
// It is pure computation: no I/O, no database, no clock, and no randomness
// but the fixed-seed start of MethodEBCC. The same judgments, in any
// order, always give the same output.
//
// Categorical answers (one label out of a few) go through [Categorical] with
// one of the Method constants; [MethodDefault] is the documented default.
// Numeric answers go through [Numeric], multi-choice answers through
// [MultiChoice], and free text through [Text] (which keeps every answer).
//
// For online use, a [Result] carries a [Model] (the class prior and every
// worker's estimated confusion matrix). [Model.Posterior] gives one item's
// answer from its judgments in under a microsecond, without re-estimating
// anything; re-running [Categorical] on a pool's judgments (periodically)
// refreshes the model.
package aggregate

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Judgment is one worker's categorical answer to one item.
type Judgment struct {
	Item   string
	Worker string
	Label  string
}

// Method names a categorical aggregation method.
type Method string

// The categorical methods. See docs/aggregation.md for what each assumes.
const (
	// MethodMajority is majority vote: each judgment is one vote. Ties go to
	// the class that comes first in Result.Classes.
	MethodMajority Method = "majority"
	// MethodWeighted is a trust-weighted vote (Appen's definition): the
	// confidence of the answer is Σ trust of the workers who gave it over Σ
	// trust of all the item's workers. Trust comes from Options.Trust.
	MethodWeighted Method = "weighted"
	// MethodWawa is "worker agreement with aggregate": majority vote, then a
	// vote weighted by each worker's agreement with that majority.
	MethodWawa Method = "wawa"
	// MethodZenCrowd is one-coin Dawid-Skene (ZenCrowd): each worker has one
	// accuracy; wrong answers are spread evenly over the other classes.
	MethodZenCrowd Method = "zencrowd"
	// MethodDS is full-confusion Dawid-Skene with Dirichlet smoothing (the
	// IBCC-style MAP variant): each worker has a confusion matrix.
	MethodDS Method = "ds"
	// MethodEBCC is enhanced Bayesian classifier combination (Li,
	// Rubinstein and Cohn, ICML 2019): Dawid-Skene whose true classes have
	// subtypes, so correlated workers are modelled, fitted by variational
	// Bayes from a seeded start.
	MethodEBCC Method = "ebcc"
	// MethodGLAD models worker ability and item difficulty (Whitehill et
	// al., NIPS 2009): a worker answers right with probability σ(ability ×
	// easiness), otherwise at random among the other classes.
	MethodGLAD Method = "glad"
	// MethodAuto is the default method, MethodDefault.
	MethodAuto Method = "auto"
)

// MethodDefault is what MethodAuto (and an empty Method) runs. It was chosen
// once, on the two shared datasets and the synthetic ones of the tests, and
// is not tuned per dataset: see docs/aggregation.md.
const MethodDefault = MethodDS

// Methods lists every categorical method, MethodAuto excluded, in the order
// docket aggregate --method all prints them.
func Methods() []Method {
	return []Method{MethodMajority, MethodWeighted, MethodWawa, MethodZenCrowd, MethodDS, MethodGLAD, MethodEBCC}
}

// ParseMethod checks that s names a categorical method.
func ParseMethod(s string) (Method, error) {
	m := Method(s)
	if m == MethodAuto || slices.Contains(Methods(), m) {
		return m, nil
	}
	return "", fmt.Errorf("unknown aggregation method %q (want one of majority, weighted, wawa, zencrowd, ds, glad, ebcc, auto)", s)
}

// Defaults of Options.
const (
	// ToleranceDefault ends an iterative method when no item's posterior
	// moved by more than this in one iteration.
	ToleranceDefault = 1e-6
	// MaxIterationsDefault caps the iterations of an iterative method.
	MaxIterationsDefault = 500
	// TrustDefault is the trust of a worker missing from Options.Trust.
	TrustDefault = 1.0
)

// Options are the optional inputs of [Categorical]. The zero value is valid.
type Options struct {
	// Classes declares the label set and its order (the order of
	// Result.Classes and of every distribution, and the tie order of the
	// votes). Labels seen in the judgments or in Gold but not declared are
	// added after the declared ones. Default: the labels seen, sorted
	// (numerically if every label is a number).
	Classes []string
	// Trust is each worker's weight for MethodWeighted, ≥ 0. Default:
	// TrustDefault for every worker missing from the map. The other methods
	// estimate worker quality themselves and ignore it.
	Trust map[string]float64
	// Gold maps an item to its known answer. A gold item's answer is
	// clamped to it (confidence 1) and informs the quality of its workers.
	Gold map[string]string
	// Tolerance, default ToleranceDefault: see there.
	Tolerance float64
	// MaxIterations, default MaxIterationsDefault: see there.
	MaxIterations int
}

// WithDefaults returns o with the zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.Tolerance <= 0 {
		o.Tolerance = ToleranceDefault
	}
	if o.MaxIterations <= 0 {
		o.MaxIterations = MaxIterationsDefault
	}
	return o
}

// ErrInput is wrapped by every error about bad input.
var ErrInput = errors.New("invalid aggregation input")

// Result is the outcome of [Categorical].
type Result struct {
	// Method is the method that ran (MethodAuto resolved).
	Method Method
	// Classes is the label set; every Distribution is in this order.
	Classes []string
	// Items has one entry per judged or gold item, in order of first
	// appearance in the judgments (gold-only items last).
	Items []ItemResult
	// Workers has one entry per worker, in order of first appearance.
	Workers []WorkerQuality
	// Model holds the estimated parameters for Model.Posterior.
	Model *Model
	// Iterations is how many iterations an iterative method ran (0 for a
	// vote); Converged says whether it met the tolerance before the cap.
	Iterations int
	Converged  bool
}

// ItemResult is the inferred answer of one item.
type ItemResult struct {
	Item string
	// Label is the answer: the most probable class (ties: the first in
	// Result.Classes).
	Label string
	// Confidence is in [0,1]: the posterior probability of Label for the
	// probabilistic methods, the (weighted) vote share of Label for votes.
	Confidence float64
	// Distribution is the probability (or vote share) of each class in the
	// order of Result.Classes; it sums to 1.
	Distribution []float64
	// Judgments is how many judgments the item had.
	Judgments int
	// Gold is true when the answer was given in Options.Gold.
	Gold bool
}

// WorkerQuality is the estimated quality of one worker.
type WorkerQuality struct {
	Worker string
	// Judgments is how many judgments the worker gave.
	Judgments int
	// Accuracy is the expected share of the worker's judgments that are
	// right, under the inferred answers (for the votes: the share that
	// agrees with the answer).
	Accuracy float64
	// Confusion[k][l] is the estimated probability that the worker answers
	// class l when the truth is class k (rows sum to 1). Nil for the votes.
	Confusion [][]float64
	// Weight is the vote weight the method gave the worker (trust for
	// MethodWeighted, agreement for MethodWawa, 1 for MethodMajority, the
	// ability for MethodGLAD); 0 for the Dawid-Skene methods.
	Weight float64
}

// Categorical aggregates categorical judgments with method. Empty input
// gives an empty Result. Errors wrap ErrInput.
func Categorical(method Method, judgments []Judgment, opts Options) (*Result, error) {
	if method == "" || method == MethodAuto {
		method = MethodDefault
	}
	if _, err := ParseMethod(string(method)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	opts = opts.WithDefaults()
	for w, t := range opts.Trust {
		if !(t >= 0) || math.IsInf(t, 1) {
			return nil, fmt.Errorf("%w: trust of worker %q is %v, want a finite number ≥ 0", ErrInput, w, t)
		}
	}
	x, err := newIndex(judgments, opts)
	if err != nil {
		return nil, err
	}
	var res *Result
	switch method {
	case MethodMajority, MethodWeighted, MethodWawa:
		res = vote(method, x, opts)
	case MethodZenCrowd, MethodDS:
		res = dawidSkene(method, x, opts)
	case MethodGLAD:
		res = glad(x, opts)
	case MethodEBCC:
		res = ebcc(x, opts, ebccDefault)
	}
	res.Method = method
	return res, nil
}

// sortLabels sorts labels numerically when every one is a number, else as
// strings.
func sortLabels(labels []string) {
	nums := make(map[string]float64, len(labels))
	for _, l := range labels {
		f, err := strconv.ParseFloat(l, 64)
		if err != nil || math.IsNaN(f) {
			slices.Sort(labels)
			return
		}
		nums[l] = f
	}
	slices.SortFunc(labels, func(a, b string) int {
		if c := cmp.Compare(nums[a], nums[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
}
