package aggregate

import (
	"fmt"
	"slices"
)

// MultiJudgment is one worker's answer to a multi-choice item: the options
// they selected (possibly none).
type MultiJudgment struct {
	Item     string
	Worker   string
	Selected []string
}

// MultiItem is the inferred answer of one multi-choice item.
type MultiItem struct {
	Item string
	// Selected lists the options judged relevant (probability of "selected"
	// above one half), in the order of MultiResult.Options.
	Selected []string
	// Probability is, per option in the order of MultiResult.Options, the
	// probability that it is relevant.
	Probability []float64
	Judgments   int
}

// MultiResult is the outcome of [MultiChoice].
type MultiResult struct {
	Method  Method
	Options []string
	Items   []MultiItem
}

// MultiChoice aggregates multi-choice judgments by binary relevance: each
// option becomes its own yes/no question ("did the worker select it?"),
// answered with the categorical method. Options are opts.Classes followed by
// the other options seen, sorted. Gold is not used. Cost: one categorical
// run per option.
func MultiChoice(method Method, judgments []MultiJudgment, opts Options) (*MultiResult, error) {
	if _, err := ParseMethod(string(method)); err != nil && method != "" {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	seen := make(map[string]bool)
	for _, c := range opts.Classes {
		seen[c] = true
	}
	var extra []string
	for n, j := range judgments {
		for _, s := range j.Selected {
			if s == "" {
				return nil, fmt.Errorf("%w: judgment %d (item %q, worker %q) selects an empty option", ErrInput, n, j.Item, j.Worker)
			}
			if !seen[s] {
				seen[s] = true
				extra = append(extra, s)
			}
		}
	}
	sortLabels(extra)
	options := append(slices.Clone(opts.Classes), extra...)
	res := &MultiResult{Method: method, Options: options}
	at := make(map[string]int)
	for _, j := range judgments {
		i, ok := at[j.Item]
		if !ok {
			i = len(res.Items)
			at[j.Item] = i
			res.Items = append(res.Items, MultiItem{Item: j.Item, Probability: make([]float64, len(options))})
		}
		res.Items[i].Judgments++
	}
	binary := make([]Judgment, len(judgments))
	sub := opts
	sub.Classes, sub.Gold = []string{"0", "1"}, nil
	for o, option := range options {
		for n, j := range judgments {
			l := "0"
			if slices.Contains(j.Selected, option) {
				l = "1"
			}
			binary[n] = Judgment{Item: j.Item, Worker: j.Worker, Label: l}
		}
		r, err := Categorical(method, binary, sub)
		if err != nil {
			return nil, fmt.Errorf("option %q: %w", option, err)
		}
		res.Method = r.Method
		// Categorical keeps the items' order of first appearance too.
		for i, it := range r.Items {
			p := it.Distribution[1]
			res.Items[i].Probability[o] = p
			if p > 0.5 {
				res.Items[i].Selected = append(res.Items[i].Selected, option)
			}
		}
	}
	return res, nil
}

// TextJudgment is one worker's free-text answer to one item.
type TextJudgment struct {
	Item   string
	Worker string
	Text   string
}

// TextItem is every answer given to one free-text item.
type TextItem struct {
	Item    string
	Answers []TextJudgment
}

// Text groups free-text answers by item, keeping every answer in input
// order: free text has no consensus to infer.
func Text(judgments []TextJudgment) []TextItem {
	at := make(map[string]int)
	var out []TextItem
	for _, j := range judgments {
		i, ok := at[j.Item]
		if !ok {
			i = len(out)
			at[j.Item] = i
			out = append(out, TextItem{Item: j.Item})
		}
		out[i].Answers = append(out[i].Answers, j)
	}
	return out
}
