package main

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/docket-run/docket/internal/aggregate"
	"github.com/docket-run/docket/internal/crowdcsv"
)

// progressMinBytes is the judgments file size from which docket aggregate
// shows a progress bar (when stderr is a terminal).
const progressMinBytes = 16 << 20

type aggregateFlags struct {
	method   string
	gold     string
	truth    string
	trust    string
	format   string
	out      string
	numeric  bool
	progress string
}

func aggregateCommand() *cobra.Command {
	var fl aggregateFlags
	cmd := &cobra.Command{
		Use:   "aggregate [flags] JUDGMENTS.csv",
		Short: "Infer each item's answer from crowd judgments (truth inference)",
		Long: `Infer each item's answer, with a confidence, from a CSV of judgments
(header row, columns item,worker,label; other columns are ignored).

The answers go to stdout (or --out) as item,label,confidence CSV, or JSON
lines with -o jsonl. With --truth (columns item,label) the accuracy on the
items that have a truth and at least one judgment goes to stderr, with the
count of truth items that had no judgment (--gold items keep their gold
answer and are not scored; their count follows); --method all prints one row per
method instead of answers (and that count after the table), on stdout:
--out and -o are for answers only.

Categorical methods: majority, weighted (votes weighed by --trust,
columns worker,trust; a worker not in it, or every worker without it,
counts 1), wawa, zencrowd, ds, glad, ebcc, auto (the default, ds; see
docs/aggregation.md). With --numeric the labels are numbers and the methods
are mean, median and weighted (bias and variance per worker; auto means
weighted); --truth then reports MAE and RMSE as well.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAggregate(cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.method, "method", string(aggregate.MethodAuto), "method, or all to compare every method")
	f.StringVar(&fl.gold, "gold", "", "CSV of known answers (item,label): clamped, and they inform worker quality")
	f.StringVar(&fl.truth, "truth", "", "CSV of true answers (item,label) to score the result against")
	f.StringVar(&fl.trust, "trust", "", "CSV of worker trust (worker,trust) for --method weighted")
	f.StringVarP(&fl.format, "output", "o", "csv", "csv or jsonl")
	f.StringVar(&fl.out, "out", "", "write the answers to this file instead of stdout")
	f.BoolVar(&fl.numeric, "numeric", false, "labels are numbers: methods mean, median, weighted")
	f.StringVar(&fl.progress, "progress", "auto", "progress bar on stderr: auto (big files on a terminal), always, never")
	return cmd
}

func runAggregate(stdout, stderr io.Writer, path string, fl aggregateFlags) error {
	if fl.format != "csv" && fl.format != "jsonl" {
		return usageErrorf("--output %q: want csv or jsonl", fl.format)
	}
	if fl.progress != "auto" && fl.progress != "always" && fl.progress != "never" {
		return usageErrorf("--progress %q: want auto, always or never", fl.progress)
	}
	if fl.method == "all" && (fl.out != "" || fl.format != "csv") {
		// The table of --method all goes to stdout; --out and -o shape
		// the answers, which it does not print: taking them silently
		// left no file where a script looked for one.
		return usageErrorf("--out and --output are for the answers; --method all prints a table of the methods to stdout")
	}
	if fl.numeric {
		return runAggregateNumeric(stdout, stderr, path, fl)
	}
	methods := []aggregate.Method{}
	if fl.method == "all" {
		methods = aggregate.Methods()
	} else {
		m, err := aggregate.ParseMethod(fl.method)
		if err != nil {
			return usageErrorf("--method: %w", err)
		}
		methods = append(methods, m)
	}
	var opts aggregate.Options
	var err error
	if fl.gold != "" {
		if opts.Gold, err = readPairs(fl.gold, "item", "label", nil); err != nil {
			return err
		}
	}
	if fl.trust != "" {
		opts.Trust = map[string]float64{}
		_, err := readPairs(fl.trust, "worker", "trust", func(w, s string) error {
			t, err := strconv.ParseFloat(s, 64)
			if err != nil || !(t >= 0) || math.IsInf(t, 1) {
				return fmt.Errorf("trust of worker %q is %q; want a finite number ≥ 0", w, s)
			}
			opts.Trust[w] = t
			return nil
		})
		if err != nil {
			return err
		}
	}
	var truth map[string]string
	if fl.truth != "" {
		if truth, err = readPairs(fl.truth, "item", "label", nil); err != nil {
			return err
		}
	}
	var (
		judgments []aggregate.Judgment
		lines     []int32
	)
	err = readJudgments(path, stderr, fl.progress, func(row []string, line int) error {
		judgments = append(judgments, aggregate.Judgment{Item: row[0], Worker: row[1], Label: row[2]})
		lines = append(lines, int32(line))
		return nil
	})
	if err != nil {
		return err
	}
	if err := checkRepeats(path, lines, func(i int) (string, string) { return judgments[i].Item, judgments[i].Worker }); err != nil {
		return err
	}
	judged := make(map[string]bool)
	for _, j := range judgments {
		judged[j.Label] = true
	}
	warnUnknownLabels(stderr, "--gold "+fl.gold, opts.Gold, judged, "each is a class of its own, which no worker answers")
	warnUnknownLabels(stderr, "--truth "+fl.truth, truth, judged, "no method can answer them")

	if fl.method == "all" {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "METHOD\tACCURACY\tCORRECT\tSCORED\tITERATIONS\tTIME")
		var last score
		for _, m := range methods {
			start := time.Now()
			res, err := aggregate.Categorical(m, judgments, opts)
			if err != nil {
				return err
			}
			took := time.Since(start)
			acc, correct, scored := "-", "-", "-"
			s := scoreCategorical(res, truth)
			if truth != nil {
				acc, correct, scored = s.accuracy(), strconv.Itoa(s.correct), strconv.Itoa(s.scored)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", m, acc, correct, scored, res.Iterations, took.Round(time.Microsecond))
			last = s
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if truth != nil {
			fmt.Fprintf(stderr, "%d truth items had no judgment%s\n", last.unjudged, last.goldNote())
		}
		return nil
	}

	res, err := aggregate.Categorical(methods[0], judgments, opts)
	if err != nil {
		return err
	}
	if err := writeAnswers(stdout, fl, func(w *bufio.Writer) error {
		if fl.format == "csv" {
			cw := csv.NewWriter(w)
			_ = cw.Write([]string{"item", "label", "confidence"})
			for _, it := range res.Items {
				_ = cw.Write([]string{it.Item, it.Label, strconv.FormatFloat(it.Confidence, 'g', 6, 64)})
			}
			cw.Flush()
			return cw.Error()
		}
		enc := json.NewEncoder(w)
		for _, it := range res.Items {
			dist := make(map[string]float64, len(res.Classes))
			for c, p := range it.Distribution {
				dist[res.Classes[c]] = p
			}
			if err := enc.Encode(struct {
				Item         string             `json:"item"`
				Label        string             `json:"label"`
				Confidence   float64            `json:"confidence"`
				Distribution map[string]float64 `json:"distribution"`
				Judgments    int                `json:"judgments"`
				Gold         bool               `json:"gold,omitempty"`
			}{it.Item, it.Label, it.Confidence, dist, it.Judgments, it.Gold}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if truth != nil {
		s := scoreCategorical(res, truth)
		fmt.Fprintf(stderr, "method %s: accuracy %s (%d of %d items with truth and a judgment); %d truth items had no judgment%s\n",
			res.Method, s.accuracy(), s.correct, s.scored, s.unjudged, s.goldNote())
	}
	return nil
}

// score is a categorical result against the truth: items right and
// scored, truth items without a judgment, and judged truth items that are
// gold (their answer is the --gold one, so they are not scored).
type score struct{ correct, scored, unjudged, gold int }

// goldNote says how many truth items were not scored for being gold.
func (s score) goldNote() string {
	if s.gold == 0 {
		return ""
	}
	return fmt.Sprintf("; %d gold items not scored", s.gold)
}

// accuracy is the share of the scored items right, or "-" when none was
// scored (no truth item has a judgment: the ids do not match), which is
// not an accuracy of 0.
func (s score) accuracy() string {
	if s.scored == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(s.correct)/float64(s.scored))
}

// errorOf is a numeric error measure of n scored items, or "-" for none.
func errorOf(v float64, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.4g", v)
}

func scoreCategorical(res *aggregate.Result, truth map[string]string) score {
	var s score
	for _, it := range res.Items {
		t, ok := truth[it.Item]
		if !ok || it.Judgments == 0 {
			continue
		}
		if it.Gold {
			// Its answer is the --gold one, whatever the method: scoring
			// it would count the gold file, not the method.
			s.gold++
			continue
		}
		s.scored++
		if t == it.Label {
			s.correct++
		}
	}
	s.unjudged = len(truth) - s.scored - s.gold
	return s
}

func runAggregateNumeric(stdout, stderr io.Writer, path string, fl aggregateFlags) error {
	var methods []aggregate.NumericMethod
	switch fl.method {
	case "all":
		methods = aggregate.NumericMethods()
	case string(aggregate.MethodAuto):
		methods = []aggregate.NumericMethod{aggregate.NumericWeighted}
	default:
		m := aggregate.NumericMethod(fl.method)
		if !slices.Contains(aggregate.NumericMethods(), m) {
			return usageErrorf("--method %q: with --numeric, want mean, median, weighted, auto or all", fl.method)
		}
		methods = []aggregate.NumericMethod{m}
	}
	if fl.gold != "" || fl.trust != "" {
		return usageErrorf("--gold and --trust are for categorical labels, not with --numeric")
	}
	var (
		judgments []aggregate.NumericJudgment
		lines     []int32
	)
	err := readJudgments(path, stderr, fl.progress, func(row []string, line int) error {
		v, err := strconv.ParseFloat(row[2], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("line %d: label %q is not a finite number", line, row[2])
		}
		judgments = append(judgments, aggregate.NumericJudgment{Item: row[0], Worker: row[1], Value: v})
		lines = append(lines, int32(line))
		return nil
	})
	if err != nil {
		return err
	}
	if err := checkRepeats(path, lines, func(i int) (string, string) { return judgments[i].Item, judgments[i].Worker }); err != nil {
		return err
	}
	var truth map[string]float64
	if fl.truth != "" {
		truth = map[string]float64{}
		_, err := readPairs(fl.truth, "item", "label", func(item, s string) error {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("truth of item %q is %q, not a finite number", item, s)
			}
			truth[item] = v
			return nil
		})
		if err != nil {
			return err
		}
	}
	score := func(res *aggregate.NumericResult) (mae, rmse float64, n int) {
		for _, it := range res.Items {
			if t, ok := truth[it.Item]; ok {
				d := it.Value - t
				mae += math.Abs(d)
				rmse += d * d
				n++
			}
		}
		if n > 0 {
			mae, rmse = mae/float64(n), math.Sqrt(rmse/float64(n))
		}
		return mae, rmse, n
	}
	if fl.method == "all" {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "METHOD\tMAE\tRMSE\tSCORED\tITERATIONS\tTIME")
		unjudged := 0
		for _, m := range methods {
			start := time.Now()
			res, err := aggregate.Numeric(m, judgments, aggregate.Options{})
			if err != nil {
				return err
			}
			took := time.Since(start)
			mae, rmse, n := score(res)
			scored := "-" // no --truth: nothing scored, as for categorical labels
			if truth != nil {
				scored = strconv.Itoa(n)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", m, errorOf(mae, n), errorOf(rmse, n), scored, res.Iterations, took.Round(time.Microsecond))
			unjudged = len(truth) - n
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if truth != nil {
			fmt.Fprintf(stderr, "%d truth items had no judgment\n", unjudged)
		}
		return nil
	}
	res, err := aggregate.Numeric(methods[0], judgments, aggregate.Options{})
	if err != nil {
		return err
	}
	if err := writeAnswers(stdout, fl, func(w *bufio.Writer) error {
		if fl.format == "csv" {
			cw := csv.NewWriter(w)
			_ = cw.Write([]string{"item", "value", "stderr"})
			for _, it := range res.Items {
				_ = cw.Write([]string{it.Item, strconv.FormatFloat(it.Value, 'g', -1, 64), strconv.FormatFloat(it.StdErr, 'g', 6, 64)})
			}
			cw.Flush()
			return cw.Error()
		}
		enc := json.NewEncoder(w)
		for _, it := range res.Items {
			if err := enc.Encode(struct {
				Item      string  `json:"item"`
				Value     float64 `json:"value"`
				StdErr    float64 `json:"stdErr"`
				Judgments int     `json:"judgments"`
			}{it.Item, it.Value, it.StdErr, it.Judgments}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if truth != nil {
		mae, rmse, n := score(res)
		fmt.Fprintf(stderr, "method %s: MAE %s, RMSE %s (%d items with truth and a judgment); %d truth items had no judgment\n",
			res.Method, errorOf(mae, n), errorOf(rmse, n), n, len(truth)-n)
	}
	return nil
}

// writeAnswers runs write on a buffered stdout or --out file.
func writeAnswers(stdout io.Writer, fl aggregateFlags, write func(*bufio.Writer) error) error {
	dst := stdout
	if fl.out != "" {
		f, err := os.Create(fl.out)
		if err != nil {
			return err
		}
		defer f.Close()
		dst = f
	}
	w := bufio.NewWriterSize(dst, 1<<16)
	if err := write(w); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if f, ok := dst.(*os.File); ok && fl.out != "" {
		return f.Close()
	}
	return nil
}

// readJudgments streams the item,worker,label rows of path into fn, with a
// progress bar on stderr for big files.
func readJudgments(path string, stderr io.Writer, progress string, fn func(row []string, line int) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var src io.Reader = f
	if st, err := f.Stat(); err == nil && showProgress(progress, st.Size(), stderr) {
		bar := &progressReader{r: f, total: st.Size(), out: stderr, name: path}
		defer bar.done()
		src = bar
	}
	r, err := crowdcsv.NewReader(bufio.NewReaderSize(src, 1<<16), "item", "worker", "label")
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for {
		row, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := fn(row, r.Line()); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
}

// warnUnknownLabels tells on stderr how many items of a --gold or --truth
// file have a label that no judgment gives, with the first such item: a
// label spelt otherwise than the workers' ("Yes" for "yes") otherwise
// silently made a class of its own, or scored every such item wrong.
func warnUnknownLabels(stderr io.Writer, what string, pairs map[string]string, judged map[string]bool, consequence string) {
	n, first := 0, ""
	for item, label := range pairs {
		if !judged[label] {
			n++
			if first == "" || item < first {
				first = item
			}
		}
	}
	if n > 0 && len(judged) > 0 {
		fmt.Fprintf(stderr, "warning: %s: %d items have a label that no judgment gives (item %q: %q); %s\n",
			what, n, first, pairs[first], consequence)
	}
}

// checkRepeats refuses a worker's second judgment of an item: every method
// takes each row as an independent judgment, so a row repeated (two
// exports concatenated, a re-judgment) counted that worker's answer twice
// and could outvote the others. It names the first row (in file order)
// that repeats a pair, and the row it repeats. key gives judgment i's item
// and worker; lines[i] is its line. It sorts indices (4 bytes a judgment)
// rather than keeping a set of the pairs.
func checkRepeats(path string, lines []int32, key func(i int) (item, worker string)) error {
	idx := make([]int32, len(lines))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int {
		ia, wa := key(int(a))
		ib, wb := key(int(b))
		return cmp.Or(strings.Compare(ia, ib), strings.Compare(wa, wb), cmp.Compare(a, b))
	})
	// Within a run of one pair the rows are in file order: the run's
	// second row is the pair's first repeat, its first row the original.
	again, first := -1, -1
	for start := 0; start < len(idx); {
		end := start + 1
		is, ws := key(int(idx[start]))
		for end < len(idx) {
			ie, we := key(int(idx[end]))
			if ie != is || we != ws {
				break
			}
			end++
		}
		if end-start > 1 && (again < 0 || int(idx[start+1]) < again) {
			again, first = int(idx[start+1]), int(idx[start])
		}
		start = end
	}
	if again < 0 {
		return nil
	}
	item, worker := key(again)
	return fmt.Errorf("%s: line %d: worker %q judged item %q again (first on line %d); keep one row per worker and item",
		path, lines[again], worker, item, lines[first])
}

// readPairs reads a two-column CSV (by header names) into a map; a key
// given twice is an error. check, if not nil, is called on each row; its
// error is given the file and line.
func readPairs(path, key, value string, check func(k, v string) error) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := crowdcsv.NewReader(bufio.NewReader(f), key, value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make(map[string]string)
	for {
		row, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if _, dup := out[row[0]]; dup {
			return nil, fmt.Errorf("%s: line %d: %s %q appears twice", path, r.Line(), key, row[0])
		}
		if check != nil {
			if err := check(row[0], row[1]); err != nil {
				return nil, fmt.Errorf("%s: line %d: %w", path, r.Line(), err)
			}
		}
		out[row[0]] = row[1]
	}
}

func showProgress(mode string, size int64, stderr io.Writer) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	f, ok := stderr.(*os.File)
	if !ok || size < progressMinBytes {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressReader draws a progress bar of the bytes read, at most every
// 200 ms.
type progressReader struct {
	r     io.Reader
	out   io.Writer
	name  string
	total int64
	read  int64
	last  time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.read += int64(n)
	if now := time.Now(); now.Sub(p.last) >= 200*time.Millisecond {
		p.last = now
		p.draw()
	}
	return n, err
}

func (p *progressReader) draw() {
	frac := 1.0
	if p.total > 0 {
		frac = min(float64(p.read)/float64(p.total), 1)
	}
	const width = 30
	full := int(frac * width)
	fmt.Fprintf(p.out, "\rreading %s [%s%s] %3.0f%%", p.name, strings.Repeat("=", full), strings.Repeat(" ", width-full), 100*frac)
}

func (p *progressReader) done() {
	p.draw()
	fmt.Fprintln(p.out)
}
