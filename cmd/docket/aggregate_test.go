package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestAggregateCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	judgments := writeFile(t, dir, "j.csv", "item,worker,label\ni1,w1,a\ni1,w2,a\ni1,w3,b\ni2,w1,b\ni2,w2,b\ni3,w3,a\n")
	truth := writeFile(t, dir, "t.csv", "item,label\ni1,a\ni2,a\ni9,b\n")

	out, err := runDocket(t, "aggregate", "--method", "majority", "--truth", truth, judgments)
	require.NoError(t, err)
	require.Equal(t, "item,label,confidence\ni1,a,0.666667\ni2,b,1\ni3,a,1\n"+
		"method majority: accuracy 50.00% (1 of 2 items with truth and a judgment); 1 truth items had no judgment\n", out)

	out, err = runDocket(t, "aggregate", "-o", "jsonl", "--gold", writeFile(t, dir, "g.csv", "item,label\ni3,b\n"), judgments)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3)
	require.Contains(t, lines[2], `"item":"i3","label":"b","confidence":1`)
	require.Contains(t, lines[2], `"gold":true`)

	out, err = runDocket(t, "aggregate", "--method", "all", "--truth", truth, judgments)
	require.NoError(t, err)
	for _, m := range []string{"majority", "weighted", "wawa", "zencrowd", "ds", "glad", "ebcc"} {
		require.Contains(t, out, "\n"+m+" ")
	}
	require.Regexp(t, `\nmajority +50\.00% +1 +2 +0 `, out)
	require.True(t, strings.HasSuffix(out, "\n1 truth items had no judgment\n"), out)

	// Without --truth there is no score and no count.
	out, err = runDocket(t, "aggregate", "--method", "all", judgments)
	require.NoError(t, err)
	require.Regexp(t, `\nmajority +- +- +- +0 `, out)
	require.NotContains(t, out, "had no judgment")

	outFile := filepath.Join(dir, "out.csv")
	out, err = runDocket(t, "aggregate", "--out", outFile, "--progress", "always", judgments)
	require.NoError(t, err)
	// The bar (on stderr) ends full, and the answers went to the file only.
	require.Contains(t, out, "\r", "no progress bar")
	require.Equal(t, "\rreading "+judgments+" ["+strings.Repeat("=", 30)+"] 100%\n", out[strings.LastIndex(out, "\r"):])
	require.NotContains(t, out, "item,label,confidence")
	body, err := os.ReadFile(outFile)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(body), "item,label,confidence\n"))

	numeric := writeFile(t, dir, "n.csv", "item,worker,label\nx,w1,1\nx,w2,3\ny,w1,10\n")
	out, err = runDocket(t, "aggregate", "--numeric", "--method", "mean", "--truth", writeFile(t, dir, "nt.csv", "item,label\nx,2.5\ny,10\n"), numeric)
	require.NoError(t, err)
	require.Contains(t, out, "x,2,1\n")
	require.Contains(t, out, "method mean: MAE 0.25, RMSE 0.3536 (2 items with truth and a judgment); 0 truth items had no judgment")
	out, err = runDocket(t, "aggregate", "--numeric", "--method", "all", "--truth", writeFile(t, dir, "nt2.csv", "item,label\nx,2.5\nz,1\n"), numeric)
	require.NoError(t, err)
	require.Regexp(t, `\nmean +0\.5 +0\.5 +1 `, out)
	require.True(t, strings.HasSuffix(out, "\n1 truth items had no judgment\n"), out)

	// A gold item with truth keeps its gold answer whatever the method:
	// scored, it counted i2 right (majority says b) and gave 100 %.
	gold := writeFile(t, dir, "g2.csv", "item,label\ni2,a\n")
	out, err = runDocket(t, "aggregate", "--method", "majority", "--gold", gold, "--truth", truth, judgments)
	require.NoError(t, err)
	require.Contains(t, out, "method majority: accuracy 100.00% (1 of 1 items with truth and a judgment); 1 truth items had no judgment; 1 gold items not scored\n")
	out, err = runDocket(t, "aggregate", "--method", "all", "--gold", gold, "--truth", truth, judgments)
	require.NoError(t, err)
	require.Regexp(t, `\nmajority +100\.00% +1 +1 +0 `, out)
	require.True(t, strings.HasSuffix(out, "\n1 truth items had no judgment; 1 gold items not scored\n"), out)

	// Labels spelt otherwise than the workers' are told, not silently a
	// class of their own or scored wrong.
	out, err = runDocket(t, "aggregate", "--method", "majority", "--gold", writeFile(t, dir, "gA.csv", "item,label\ni3,B\ni2,A\ni1,a\n"),
		"--truth", writeFile(t, dir, "tY.csv", "item,label\ni1,yes\n"), judgments)
	require.NoError(t, err)
	require.Contains(t, out, `warning: --gold `+filepath.Join(dir, "gA.csv")+`: 2 items have a label that no judgment gives (item "i2": "A"); each is a class of its own, which no worker answers`+"\n")
	require.Contains(t, out, `warning: --truth `+filepath.Join(dir, "tY.csv")+`: 1 items have a label that no judgment gives (item "i1": "yes"); no method can answer them`+"\n")
	out, err = runDocket(t, "aggregate", "--method", "majority", "--gold", gold, "--truth", truth, judgments)
	require.NoError(t, err)
	require.NotContains(t, out, "warning", "every label is a worker's")

	// A truth file whose ids match no judged item (another id format):
	// nothing is scored, which is no accuracy of 0 %; the numeric table
	// without --truth scores nothing either (it showed MAE 0).
	other := writeFile(t, dir, "other.csv", "item,label\nI-1,a\nI-2,b\n")
	out, err = runDocket(t, "aggregate", "--method", "majority", "--truth", other, judgments)
	require.NoError(t, err)
	require.Contains(t, out, "method majority: accuracy - (0 of 0 items with truth and a judgment); 2 truth items had no judgment\n")
	out, err = runDocket(t, "aggregate", "--method", "all", "--truth", other, judgments)
	require.NoError(t, err)
	require.Regexp(t, `\nmajority +- +0 +0 +0 `, out)
	out, err = runDocket(t, "aggregate", "--numeric", "--method", "all", numeric)
	require.NoError(t, err)
	require.Regexp(t, `\nmean +- +- +- +0 `, out)
	out, err = runDocket(t, "aggregate", "--numeric", "--method", "median", "--truth", writeFile(t, dir, "nother.csv", "item,label\nX,1\n"), numeric)
	require.NoError(t, err)
	require.Contains(t, out, "method median: MAE -, RMSE - (0 items with truth and a judgment); 1 truth items had no judgment\n")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--method", "vote", judgments}, `unknown aggregation method "vote"`},
		{[]string{writeFile(t, dir, "bad.csv", "item,worker,label\ni1,w1,a\ni2,w2\n")}, "bad.csv: line 3: 2 fields, but the header row has 3"},
		{[]string{writeFile(t, dir, "hdr.csv", "item,who,label\n")}, `hdr.csv: line 1: the header row "item,who,label" lacks the column(s) worker`},
		{[]string{"--numeric", writeFile(t, dir, "nan.csv", "item,worker,label\ni,w,1\ni,w2,lots\n")}, `nan.csv: line 3: label "lots" is not a finite number`},
		{[]string{"--trust", writeFile(t, dir, "tr.csv", "worker,trust\nw2,1\nw1,-2\n"), judgments}, `tr.csv: line 3: trust of worker "w1" is "-2"`},
		{[]string{"-o", "xml", judgments}, `--output "xml": want csv or jsonl`},
		{[]string{"--numeric", "--method", "mode", numeric}, `--method "mode": with --numeric, want mean, median, weighted, auto or all`},
		{[]string{"--numeric", "--truth", writeFile(t, dir, "ntnan.csv", "item,label\ny,1\nx,NaN\n"), numeric}, `ntnan.csv: line 3: truth of item "x" is "NaN", not a finite number`},
		{[]string{filepath.Join(dir, "missing.csv")}, "no such file"},
		// A worker's second row for an item counted their answer twice:
		// w1's three a's outvoted w2's and w3's b's.
		{[]string{"--method", "majority", writeFile(t, dir, "dup.csv", "item,worker,label\ni2,w9,b\ni1,w1,a\ni1,w2,b\ni1,w1,a\ni1,w3,b\ni1,w1,a\ni2,w9,b\n")},
			`dup.csv: line 5: worker "w1" judged item "i1" again (first on line 3); keep one row per worker and item`},
		{[]string{"--numeric", writeFile(t, dir, "ndup.csv", "item,worker,label\nx,w1,1\nx,w2,2\ny,w2,3\nx,w2,2\n")},
			`ndup.csv: line 5: worker "w2" judged item "x" again (first on line 3)`},
		// --method all prints a table to stdout: --out and -o jsonl were
		// ignored, the file never written.
		{[]string{"--method", "all", "--out", filepath.Join(dir, "all.csv"), judgments}, "--out and --output are for the answers; --method all prints a table"},
		{[]string{"--method", "all", "-o", "jsonl", judgments}, "--out and --output are for the answers"},
		{[]string{"--numeric", "--method", "all", "--out", filepath.Join(dir, "all.csv"), numeric}, "--out and --output are for the answers"},
	} {
		_, err := runDocket(t, append([]string{"aggregate"}, tc.args...)...)
		require.ErrorContains(t, err, tc.want, tc.args)
	}
}
