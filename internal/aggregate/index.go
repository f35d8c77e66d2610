package aggregate

import (
	"fmt"
	"slices"
)

// index is the judgments with string ids mapped to dense integers once, and
// grouped by item (compressed rows), so the methods loop over int32 slices.
type index struct {
	items   []string
	workers []string
	classes []string
	// The judgments of item i are start[i] ≤ j < start[i+1].
	start  []int32
	worker []int32
	label  []int32
	// gold[i] is the class of item i's known answer, or -1.
	gold []int32
	// count[w] is how many judgments worker w gave.
	count []int32
}

func (x *index) nClasses() int { return len(x.classes) }

// newIndex validates and indexes the judgments. Items and workers keep the
// order of their first appearance, so renaming ids changes nothing.
func newIndex(judgments []Judgment, opts Options) (*index, error) {
	itemOf := make(map[string]int32)
	workerOf := make(map[string]int32)
	labelOf := make(map[string]int32) // label → provisional id
	var labels []string
	x := &index{}
	jItem := make([]int32, len(judgments))
	jLabel := make([]int32, len(judgments))
	x.worker = make([]int32, len(judgments))
	for n, j := range judgments {
		switch {
		case j.Item == "":
			return nil, fmt.Errorf("%w: judgment %d has no item", ErrInput, n)
		case j.Worker == "":
			return nil, fmt.Errorf("%w: judgment %d (item %q) has no worker", ErrInput, n, j.Item)
		case j.Label == "":
			return nil, fmt.Errorf("%w: judgment %d (item %q, worker %q) has no label", ErrInput, n, j.Item, j.Worker)
		}
		i, ok := itemOf[j.Item]
		if !ok {
			i = int32(len(x.items))
			itemOf[j.Item] = i
			x.items = append(x.items, j.Item)
		}
		w, ok := workerOf[j.Worker]
		if !ok {
			w = int32(len(x.workers))
			workerOf[j.Worker] = w
			x.workers = append(x.workers, j.Worker)
		}
		l, ok := labelOf[j.Label]
		if !ok {
			l = int32(len(labels))
			labelOf[j.Label] = l
			labels = append(labels, j.Label)
		}
		jItem[n], x.worker[n], jLabel[n] = i, w, l
	}
	nJudged := len(x.items)
	// Gold-only items, in a deterministic order.
	goldItems := make([]string, 0, len(opts.Gold))
	for item, label := range opts.Gold {
		if item == "" || label == "" {
			return nil, fmt.Errorf("%w: gold item %q has label %q; want both non-empty", ErrInput, item, label)
		}
		if _, ok := itemOf[item]; !ok {
			goldItems = append(goldItems, item)
		}
		if _, ok := labelOf[label]; !ok {
			labelOf[label] = int32(len(labels))
			labels = append(labels, label)
		}
	}
	slices.Sort(goldItems)
	for _, item := range goldItems {
		itemOf[item] = int32(len(x.items))
		x.items = append(x.items, item)
	}

	// Classes: the declared ones in their order, then the others sorted.
	remap := make([]int32, len(labels))
	classOf := make(map[string]int32, len(labels)+len(opts.Classes))
	for _, c := range opts.Classes {
		if c == "" {
			return nil, fmt.Errorf("%w: Options.Classes has an empty class", ErrInput)
		}
		if _, dup := classOf[c]; dup {
			return nil, fmt.Errorf("%w: Options.Classes has %q twice", ErrInput, c)
		}
		classOf[c] = int32(len(x.classes))
		x.classes = append(x.classes, c)
	}
	var extra []string
	for _, l := range labels {
		if _, ok := classOf[l]; !ok {
			extra = append(extra, l)
		}
	}
	sortLabels(extra)
	for _, l := range extra {
		classOf[l] = int32(len(x.classes))
		x.classes = append(x.classes, l)
	}
	for l, s := range labels {
		remap[l] = classOf[s]
	}

	x.gold = make([]int32, len(x.items))
	for i := range x.gold {
		x.gold[i] = -1
	}
	for item, label := range opts.Gold {
		x.gold[itemOf[item]] = classOf[label]
	}

	// Group by item: a counting sort that keeps the input order within an
	// item.
	x.start = make([]int32, len(x.items)+1)
	for _, i := range jItem {
		x.start[i+1]++
	}
	for i := 0; i < nJudged; i++ {
		x.start[i+1] += x.start[i]
	}
	for i := nJudged; i < len(x.items); i++ {
		x.start[i+1] = x.start[i]
	}
	next := slices.Clone(x.start[:len(x.items)])
	workers := make([]int32, len(judgments))
	x.label = make([]int32, len(judgments))
	x.count = make([]int32, len(x.workers))
	for n, i := range jItem {
		p := next[i]
		next[i]++
		workers[p] = x.worker[n]
		x.label[p] = remap[jLabel[n]]
		x.count[x.worker[n]]++
	}
	x.worker = workers
	return x, nil
}
