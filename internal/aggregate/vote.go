package aggregate

// vote runs the vote methods: majority, trust-weighted and Wawa. Each
// judgment adds its worker's weight to its class; an item's distribution is
// the weight shares. An item whose workers all weigh 0 falls back to the
// plain vote shares.
func vote(method Method, x *index, opts Options) *Result {
	weights := make([]float64, len(x.workers))
	for w := range weights {
		weights[w] = 1
	}
	if method == MethodWeighted {
		for w, id := range x.workers {
			if t, ok := opts.Trust[id]; ok {
				weights[w] = t
			} else {
				weights[w] = TrustDefault
			}
		}
	}
	post := make([]float64, len(x.items)*x.nClasses())
	voteShares(x, weights, post)
	unknown := TrustDefault
	if method == MethodWawa {
		// Each worker's weight is their agreement with the majority.
		agree := agreement(x, argmaxes(x, post))
		var sum float64
		for w := range weights {
			weights[w] = agree[w]
			sum += weights[w]
		}
		if len(weights) > 0 {
			unknown = sum / float64(len(weights))
		}
		voteShares(x, weights, post)
	}
	res := newResult(x, post)
	// A voter's accuracy is their agreement with the answers.
	for w, a := range agreement(x, argmaxes(x, post)) {
		res.Workers[w].Accuracy = a
	}
	model := &Model{Method: method, Classes: x.classes, Workers: make(map[string]WorkerModel, len(x.workers)), Unknown: WorkerModel{Weight: unknown}}
	for w, id := range x.workers {
		res.Workers[w].Weight = weights[w]
		model.Workers[id] = WorkerModel{Weight: weights[w]}
	}
	res.Model = model
	return res
}

// majorityShares writes into post each item's majority-vote shares (every
// worker counts 1; gold items get their known answer): the fixed start of
// the iterative methods.
func majorityShares(x *index, post []float64) {
	ones := make([]float64, len(x.workers))
	for w := range ones {
		ones[w] = 1
	}
	voteShares(x, ones, post)
}

// voteShares writes into post each item's weighted vote shares; gold items
// get their known answer. The weights are divided by the item's largest,
// which leaves the shares as they are: a sum of weights near the float64
// limit would overflow to +Inf and the shares be NaN.
func voteShares(x *index, weights, post []float64) {
	k := x.nClasses()
	clear(post)
	for i := range x.items {
		d := post[i*k : (i+1)*k]
		if g := x.gold[i]; g >= 0 {
			d[g] = 1
			continue
		}
		var top, total float64
		for j := x.start[i]; j < x.start[i+1]; j++ {
			top = max(top, weights[x.worker[j]])
		}
		if top > 0 {
			for j := x.start[i]; j < x.start[i+1]; j++ {
				wt := weights[x.worker[j]] / top
				d[x.label[j]] += wt
				total += wt
			}
		}
		if total == 0 {
			for j := x.start[i]; j < x.start[i+1]; j++ {
				d[x.label[j]]++
				total++
			}
		}
		for c := range d {
			d[c] /= total
		}
	}
}

// agreement is the share of each worker's judgments that equal answer.
func agreement(x *index, answer []int32) []float64 {
	agree := make([]float64, len(x.workers))
	for i := range x.items {
		for j := x.start[i]; j < x.start[i+1]; j++ {
			if x.label[j] == answer[i] {
				agree[x.worker[j]]++
			}
		}
	}
	for w := range agree {
		agree[w] /= float64(x.count[w])
	}
	return agree
}

// argmaxes is each item's most probable class; ties go to the first.
func argmaxes(x *index, post []float64) []int32 {
	k := x.nClasses()
	out := make([]int32, len(x.items))
	for i := range out {
		out[i] = int32(argmax(post[i*k : (i+1)*k]))
	}
	return out
}

// argmax is the index of the largest value, the first of equal ones.
func argmax(d []float64) int {
	best := 0
	for c := 1; c < len(d); c++ {
		if d[c] > d[best] {
			best = c
		}
	}
	return best
}

// newResult builds the items of a Result from the posteriors (len(items) ×
// classes, row-major; the Result keeps the slice) and each worker's count
// and accuracy: the expected share of their judgments that are right.
func newResult(x *index, post []float64) *Result {
	k := x.nClasses()
	res := &Result{Classes: x.classes, Items: make([]ItemResult, len(x.items)), Workers: make([]WorkerQuality, len(x.workers))}
	for i, id := range x.items {
		d := post[i*k : (i+1)*k : (i+1)*k]
		best := argmax(d)
		res.Items[i] = ItemResult{Item: id, Label: x.classes[best], Confidence: d[best], Distribution: d,
			Judgments: int(x.start[i+1] - x.start[i]), Gold: x.gold[i] >= 0}
	}
	right := make([]float64, len(x.workers))
	for i := range x.items {
		for j := x.start[i]; j < x.start[i+1]; j++ {
			right[x.worker[j]] += post[i*k+int(x.label[j])]
		}
	}
	for w, id := range x.workers {
		res.Workers[w] = WorkerQuality{Worker: id, Judgments: int(x.count[w]), Accuracy: right[w] / float64(x.count[w])}
	}
	return res
}
