package aggregate

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// million is the synthetic benchmark set: 1,000,000 judgments, 100,000
// items, 2,000 workers, 4 classes (10 judgments per item).
var million = sync.OnceValue(func() []Judgment {
	const items, workers, classes, per = 100_000, 2_000, 4, 10
	r := rand.New(rand.NewPCG(42, 42))
	acc := make([]float64, workers)
	for w := range acc {
		acc[w] = 0.4 + 0.55*r.Float64()
	}
	names := make([]string, workers)
	for w := range names {
		names[w] = fmt.Sprintf("worker-%d", w)
	}
	labels := []string{"a", "b", "c", "d"}
	out := make([]Judgment, 0, items*per)
	for i := range items {
		id := fmt.Sprintf("item-%d", i)
		tr := r.IntN(classes)
		for range per {
			w := r.IntN(workers)
			l := tr
			if r.Float64() > acc[w] {
				l = r.IntN(classes)
			}
			out = append(out, Judgment{Item: id, Worker: names[w], Label: labels[l]})
		}
	}
	return out
})

// BenchmarkCategorical: each method on the shared datasets and on the
// synthetic million (the whole call: indexing the string ids included).
func BenchmarkCategorical(b *testing.B) {
	sets := []struct {
		name string
		load func(testing.TB) []Judgment
	}{
		{"d_product", func(tb testing.TB) []Judgment { return loadDataset(tb, "d_product").judgments }},
		{"d_possent", func(tb testing.TB) []Judgment { return loadDataset(tb, "d_possent").judgments }},
		{"synthetic_1M", func(testing.TB) []Judgment { return million() }},
	}
	for _, set := range sets {
		for _, m := range Methods() {
			if m == MethodEBCC && set.name == "synthetic_1M" {
				continue // minutes per run: see docs/aggregation.md
			}
			b.Run(set.name+"/"+string(m), func(b *testing.B) {
				in := set.load(b)
				b.ReportAllocs()
				var res *Result
				for b.Loop() {
					var err error
					if res, err = Categorical(m, in, Options{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(res.Iterations), "iterations")
			})
		}
	}
}

// BenchmarkPosterior: one item's posterior from ten votes under a model of
// the synthetic million's 2,000 workers.
func BenchmarkPosterior(b *testing.B) {
	in := million()
	for _, m := range []Method{MethodDS, MethodMajority} {
		b.Run(string(m), func(b *testing.B) {
			res, err := Categorical(m, in[:200_000], Options{})
			if err != nil {
				b.Fatal(err)
			}
			votes := make([]Vote, 10)
			for n := range votes {
				votes[n] = Vote{Worker: in[n].Worker, Label: in[n].Label}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := res.Model.Posterior("item-0", votes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNumeric: the numeric methods on a million synthetic values.
func BenchmarkNumeric(b *testing.B) {
	cat := million()
	in := make([]NumericJudgment, len(cat))
	for n, j := range cat {
		in[n] = NumericJudgment{Item: j.Item, Worker: j.Worker, Value: float64(j.Label[0]-'a') + float64(n%7)/10}
	}
	for _, m := range NumericMethods() {
		b.Run(string(m), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Numeric(m, in, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
