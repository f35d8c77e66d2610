// Command chart reads the JSON results of `docket bench -o json` and of the
// River programs (bench/river) and writes
//
//   - with -table: a Markdown table of the median of each figure per
//     backend, mode and system, with the ratio docket / River;
//   - with -svg FILE: an SVG line chart of committed jobs/s over time, one
//     line per run, for the results given (one backend and mode).
//
// It is what bench/run.sh calls; it uses only the standard library.
//
//	go run ./bench/chart -table results/*.json
//	go run ./bench/chart -svg docs/bench-burn-postgres.svg -title "…" results/postgres-burn-*.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/docket-run/docket/internal/bench"
)

func main() {
	table := flag.Bool("table", false, "print a Markdown table of medians")
	svg := flag.String("svg", "", "write a jobs/s-over-time chart to this file")
	title := flag.String("title", "", "chart title")
	flag.Parse()
	if err := run(*table, *svg, *title, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run(table bool, svg, title string, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("no result files given")
	}
	var results []*bench.Result
	for _, f := range files {
		r, err := load(f)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	if table {
		if err := writeTable(os.Stdout, results); err != nil {
			return err
		}
	}
	if svg != "" {
		f, err := os.Create(svg)
		if err != nil {
			return err
		}
		if err := writeSVG(f, title, results); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	}
	return nil
}

func load(path string) (*bench.Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r bench.Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// figure is one row of the table: a measure of a backend and mode.
type figure struct {
	backend, mode, name string
	get                 func(*bench.Result) float64
}

func figures(backend, mode string) []figure {
	jobs := func(r *bench.Result) float64 { return r.JobsPerSec }
	ins := func(r *bench.Result) float64 { return r.InsertJobsPerSec }
	lat := func(f func(*bench.Latency) float64) func(*bench.Result) float64 {
		return func(r *bench.Result) float64 {
			if r.Latency == nil {
				return math.NaN()
			}
			return f(r.Latency)
		}
	}
	switch mode {
	case bench.ModeBurn:
		return []figure{
			{backend, mode, "bulk insert, jobs/s", ins},
			{backend, mode, "burn (work down the backlog), jobs/s", jobs},
		}
	case bench.ModeContinuous:
		return []figure{{backend, mode, "continuous (insert and work), jobs/s", jobs}}
	case bench.ModeLatency:
		return []figure{
			{backend, mode, "enqueue→start p50, ms", lat(func(l *bench.Latency) float64 { return l.P50 })},
			{backend, mode, "enqueue→start p90, ms", lat(func(l *bench.Latency) float64 { return l.P90 })},
			{backend, mode, "enqueue→start p99, ms", lat(func(l *bench.Latency) float64 { return l.P99 })},
			{backend, mode, "enqueue→start max, ms", lat(func(l *bench.Latency) float64 { return l.Max })},
		}
	}
	return nil
}

func writeTable(w io.Writer, results []*bench.Result) error {
	type key struct{ backend, mode string }
	var keys []key
	seen := map[key]bool{}
	for _, r := range results {
		k := key{r.Backend, r.Mode}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	order := map[string]int{bench.ModeBurn: 0, bench.ModeContinuous: 1, bench.ModeLatency: 2}
	slices.SortStableFunc(keys, func(a, b key) int {
		if a.backend != b.backend {
			return strings.Compare(b.backend, a.backend) // postgres first
		}
		return order[a.mode] - order[b.mode]
	})
	// The comparison is River, another docket build run as "baseline"
	// (bench/run.sh BASELINE=…), or both (BASELINE=… RIVER=1): a table
	// each, the baseline's first.
	var others []string
	for _, o := range []string{"baseline", "river"} {
		if slices.ContainsFunc(results, func(r *bench.Result) bool { return r.System == o }) {
			others = append(others, o)
		}
	}
	if len(others) == 0 {
		others = []string{"river"}
	}
	var b strings.Builder
	for i, other := range others {
		otherName := map[string]string{"river": "River", "baseline": "baseline"}[other]
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "| backend | figure | docket | %[1]s | docket / %[1]s | runs (docket; %[1]s) |\n", otherName)
		b.WriteString("|---|---|---:|---:|---:|---|\n")
		for _, k := range keys {
			for _, f := range figures(k.backend, k.mode) {
				vals := map[string][]float64{}
				for _, r := range results {
					if r.Backend == k.backend && r.Mode == k.mode {
						vals[r.System] = append(vals[r.System], f.get(r))
					}
				}
				d, rv := median(vals["docket"]), median(vals[other])
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s; %s |\n", k.backend, f.name,
					num(d), num(rv), ratio(d, rv), list(vals["docket"]), list(vals[other]))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func list(vs []float64) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = num(v)
	}
	return strings.Join(s, ", ")
}

// Chart geometry.
const (
	width, height           = 760, 380
	left, right, top, below = 70, 150, 40, 50
)

func writeSVG(w io.Writer, title string, results []*bench.Result) error {
	maxX, maxY := 1.0, 1.0
	for _, r := range results {
		for _, s := range r.Samples {
			maxX = max(maxX, s.Seconds)
			maxY = max(maxY, s.JobsPerSec)
		}
	}
	maxY = niceCeil(maxY)
	maxX = math.Ceil(maxX)
	pw, ph := float64(width-left-right), float64(height-top-below)
	x := func(s float64) float64 { return left + s/maxX*pw }
	y := func(v float64) float64 { return top + ph - v/maxY*ph }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	for i := 0; i <= 5; i++ {
		v := maxY * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(v), width-right, y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(v)+4, thousands(v))
	}
	step := math.Max(1, niceCeil(maxX/10))
	for s := 0.0; s <= maxX+1e-9; s += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%g</text>`+"\n", x(s), height-below+18, s)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">seconds since the workers started</text>`+"\n", left+pw/2, height-12)
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">committed jobs/s</text>`+"\n", top+ph/2)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#888"/>`+"\n", left, top, pw, ph)

	colors := map[string][]string{
		"docket": {"#1f6feb", "#5b9bf5", "#99c1fa"},
		"river":  {"#d1242f", "#e8686f", "#f2a5a9"},
	}
	colors["baseline"] = colors["river"]
	count := map[string]int{}
	legend := 0
	for _, r := range results {
		c := colors[r.System]
		if c == nil {
			c = []string{"#555"}
		}
		color := c[count[r.System]%len(c)]
		count[r.System]++
		var pts []string
		for _, s := range r.Samples {
			if s.Seconds == 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.Seconds), y(s.JobsPerSec)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		ly := top + 14 + legend*18
		legend++
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", width-right+10, ly-4, width-right+30, ly-4, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s %s</text>`+"\n", width-right+36, ly, r.System, thousands(r.JobsPerSec))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func thousands(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}
