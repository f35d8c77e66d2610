package aggregate

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// crowdDataDir finds ../shared/data/crowd beside the repository root (the
// directory with go.mod). Outside CI a missing directory skips the test;
// under CI it fails.
func crowdDataDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	require.NoError(tb, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		require.NotEqual(tb, parent, dir, "no go.mod above the package")
		dir = parent
	}
	data := filepath.Join(dir, "..", "shared", "data", "crowd")
	if _, err := os.Stat(data); errors.Is(err, fs.ErrNotExist) {
		if os.Getenv("CI") != "" {
			tb.Fatalf("the shared crowd datasets are missing: %s", data)
		}
		tb.Skipf("the shared crowd datasets are not at %s", data)
	}
	return data
}

type dataset struct {
	judgments []Judgment
	truth     map[string]string
}

func loadDataset(tb testing.TB, name string) dataset {
	tb.Helper()
	dir := filepath.Join(crowdDataDir(tb), name)
	read := func(file string) [][]string {
		f, err := os.Open(filepath.Join(dir, file))
		require.NoError(tb, err)
		defer f.Close()
		rows, err := csv.NewReader(f).ReadAll()
		require.NoError(tb, err)
		return rows[1:]
	}
	var d dataset
	for _, r := range read("judgments.csv") {
		d.judgments = append(d.judgments, Judgment{Item: r[0], Worker: r[1], Label: r[2]})
	}
	d.truth = make(map[string]string)
	for _, r := range read("truth.csv") {
		d.truth[r[0]] = r[1]
	}
	return d
}

func accuracy(res *Result, truth map[string]string) (correct, scored int) {
	for _, it := range res.Items {
		if tr, ok := truth[it.Item]; ok {
			scored++
			if tr == it.Label {
				correct++
			}
		}
	}
	return correct, scored
}

// TestSharedDatasets: accuracy on D_Product and D_PosSent (README in
// ../shared/data/crowd) with no per-dataset setting. The default must beat
// the paper's Dawid-Skene figure on D_Product (93.66) and match it on
// D_PosSent (96.00). It does not reach the best published figures (94.0 and
// 96.1, i.e. 7,816 and 961 items; it gets 7,808 and 960). MethodEBCC
// reaches 96.1 on D_PosSent but not 93.9 on D_Product: see
// docs/aggregation.md.
func TestSharedDatasets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// Exact correct counts for the votes (deterministic ties), minimum
		// accuracies (%) for the others.
		majority, wawa             int
		zencrowd, glad, ebcc, dflt float64
		items                      int
	}{
		{name: "d_product", majority: 7455, wawa: 7455, zencrowd: 92.7, glad: 92.8, ebcc: 93.8, dflt: 93.9, items: 8315},
		{name: "d_possent", majority: 932, wawa: 951, zencrowd: 95.0, glad: 94.8, ebcc: 96.0, dflt: 96.0, items: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := loadDataset(t, tc.name)
			for _, m := range append(Methods(), MethodAuto) {
				res, err := Categorical(m, d.judgments, Options{})
				require.NoError(t, err)
				correct, scored := accuracy(res, d.truth)
				require.Equal(t, tc.items, scored)
				pct := 100 * float64(correct) / float64(scored)
				t.Logf("%s %s: %.2f%% (%d/%d), %d iterations", tc.name, m, pct, correct, scored, res.Iterations)
				switch m {
				case MethodMajority, MethodWeighted:
					require.Equal(t, tc.majority, correct, m)
				case MethodWawa:
					require.Equal(t, tc.wawa, correct, m)
				case MethodZenCrowd:
					require.GreaterOrEqual(t, pct, tc.zencrowd, m)
				case MethodGLAD:
					require.GreaterOrEqual(t, pct, tc.glad, m)
				case MethodEBCC:
					require.GreaterOrEqual(t, pct, tc.ebcc, m)
				case MethodAuto:
					require.GreaterOrEqual(t, pct, tc.dflt, "the default method")
				}
			}
		})
	}
}

// synthetic is a seeded crowd: skewed classes, many workers with few
// labels, spammers, adversaries.
func synthetic(seed uint64, items, workers, perItem, classes int) ([]Judgment, map[string]string) {
	r := rand.New(rand.NewPCG(seed, 2))
	// Skewed class prior: each class half as likely as the previous one.
	prior := make([]float64, classes)
	var sum float64
	for c := range prior {
		prior[c] = math.Pow(0.5, float64(c))
		sum += prior[c]
	}
	draw := func(p []float64) int {
		u := r.Float64() * sum
		for c, v := range p {
			if u < v {
				return c
			}
			u -= v
		}
		return len(p) - 1
	}
	type kind struct {
		acc   float64
		style int // 0 honest, 1 spammer (one class), 2 random, 3 adversary
	}
	ws := make([]kind, workers)
	for w := range ws {
		switch u := r.Float64(); {
		case u < 0.10:
			ws[w] = kind{style: 1}
		case u < 0.18:
			ws[w] = kind{style: 2}
		case u < 0.22:
			ws[w] = kind{style: 3}
		default:
			ws[w] = kind{acc: 0.55 + 0.4*r.Float64()}
		}
	}
	// Activity: a few workers do most of the work (Zipf-like), many do a
	// handful of labels.
	weights := make([]float64, workers)
	var wsum float64
	for w := range weights {
		weights[w] = 1 / math.Pow(float64(w+1), 0.9)
		wsum += weights[w]
	}
	pick := func() int {
		u := r.Float64() * wsum
		for w, v := range weights {
			if u < v {
				return w
			}
			u -= v
		}
		return workers - 1
	}
	var out []Judgment
	truth := make(map[string]string, items)
	for i := range items {
		id := fmt.Sprintf("t%d", i)
		tr := draw(prior)
		truth[id] = fmt.Sprint(tr)
		seen := make(map[int]bool, perItem)
		for len(seen) < perItem {
			w := pick()
			if seen[w] {
				continue
			}
			seen[w] = true
			l := tr
			switch k := ws[w]; k.style {
			case 0:
				if r.Float64() > k.acc {
					l = (tr + 1 + r.IntN(classes-1)) % classes
				}
			case 1:
				l = w % classes
			case 2:
				l = r.IntN(classes)
			case 3:
				l = (tr + 1) % classes
			}
			out = append(out, Judgment{Item: id, Worker: fmt.Sprintf("u%d", w), Label: fmt.Sprint(l)})
		}
	}
	return out, truth
}

// TestSyntheticCrowds: beyond the two shared datasets, the default beats
// majority vote clearly on skewed 3- and 4-class crowds with spammers,
// adversaries and many workers with a few labels.
func TestSyntheticCrowds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		seed                    uint64
		items, workers, perItem int
		classes                 int
	}{
		{1, 3000, 400, 5, 3},
		{2, 3000, 1500, 5, 4},
		{3, 2000, 300, 3, 4},
	} {
		t.Run(fmt.Sprintf("seed%d_%dclasses_%dper", tc.seed, tc.classes, tc.perItem), func(t *testing.T) {
			t.Parallel()
			in, truth := synthetic(tc.seed, tc.items, tc.workers, tc.perItem, tc.classes)
			pct := map[Method]float64{}
			for _, m := range Methods() {
				res, err := Categorical(m, in, Options{})
				require.NoError(t, err)
				c, n := accuracy(res, truth)
				pct[m] = 100 * float64(c) / float64(n)
				t.Logf("%s: %.2f%%", m, pct[m])
			}
			require.Greater(t, pct[MethodDefault], pct[MethodMajority]+3)
			require.GreaterOrEqual(t, pct[MethodDefault], pct[MethodWawa])
			require.GreaterOrEqual(t, pct[MethodDefault], pct[MethodZenCrowd]-1.5)
		})
	}
}
