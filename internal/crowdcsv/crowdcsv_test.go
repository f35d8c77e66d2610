package crowdcsv

import (
	"errors"
	"io"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func readAll(t *testing.T, in string, cols ...string) ([][]string, error) {
	t.Helper()
	r, err := NewReader(strings.NewReader(in), cols...)
	if err != nil {
		return nil, err
	}
	var rows [][]string
	for {
		row, err := r.Next()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return rows, err
		}
		rows = append(rows, append([]string(nil), row...))
	}
}

func TestReader(t *testing.T) {
	t.Parallel()
	rows, err := readAll(t, "\uFEFFWorker,extra,item,label\nw1,x,i1,a\r\n\"w 2\", y ,i2, b \n", "item", "worker", "label")
	require.NoError(t, err)
	require.Equal(t, [][]string{{"i1", "w1", "a"}, {"i2", "w 2", "b"}}, rows)

	for _, tc := range []struct{ in, want string }{
		{"", "line 1: empty file; want a header row with the columns item,worker,label"},
		{"item,label\n", `line 1: the header row "item,label" lacks the column(s) worker`},
		{"item,worker,label\ni1,w1,a\ni2,w2\n", "line 3: 2 fields, but the header row has 3"},
		{"item,worker,label,note\ni1,w1,a,x\ni2,w2,b,y,z\n", "line 3: 5 fields, but the header row has 4"},
		{"item,worker,label\ni1,w1,a\ni2,,b\n", "line 3: worker (column 2) is empty"},
		{"label,item,worker\na,i1,w1\n\" \",i2,w2\n", "line 3: label (column 1) is empty"},
		{"item,worker,label\ni1,w1,a\n\"i2,w2,b\n", "line 3"},
	} {
		_, err := readAll(t, tc.in, "item", "worker", "label")
		require.ErrorContains(t, err, tc.want, tc.in)
		requireLine(t, err, tc.in)
	}
}

// The fields returned keep only their own bytes alive, not their row's
// other columns: a caller keeping every row of a file with a long column
// it does not read (a comment, the item's text) held the whole file.
func TestReaderKeepsOnlyTheFields(t *testing.T) {
	const rows, width = 200, 100 << 10
	var in strings.Builder
	in.WriteString("item,worker,label,comment\n")
	pad := strings.Repeat("x", width)
	for i := range rows {
		in.WriteString("i" + strconv.Itoa(i) + ",w,a," + pad + "\n")
	}
	src := in.String()
	r, err := NewReader(strings.NewReader(src), "item", "worker", "label")
	require.NoError(t, err)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var kept [][]string
	for {
		row, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		kept = append(kept, slices.Clone(row))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.Len(t, kept, rows)
	require.Equal(t, []string{"i7", "w", "a"}, kept[7])
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	require.Less(t, grown, int64(rows*width/10), "the rows' %d KiB of comments are kept", rows*width>>10)
	runtime.KeepAlive(kept)
	runtime.KeepAlive(src)
}

// requireLine checks that err names a line of in: "line N" with 1 ≤ N ≤
// the number of lines.
func requireLine(t *testing.T, err error, in string) {
	t.Helper()
	m := regexp.MustCompile(`^line (\d+): `).FindStringSubmatch(err.Error())
	require.NotNil(t, m, "%v does not start with a line number", err)
	n, convErr := strconv.Atoi(m[1])
	require.NoError(t, convErr)
	require.GreaterOrEqual(t, n, 1, err)
	require.LessOrEqual(t, n, strings.Count(in, "\n")+1, err)
}

// FuzzReader: any input either reads or fails with an error that names a
// line of the input; it never panics.
func FuzzReader(f *testing.F) {
	f.Add("item,worker,label\ni1,w1,a\n")
	f.Add("item,worker,label\ni1,w1\n")
	f.Add("label,item,worker\n\"x\"\"y\",i,w\n")
	f.Add("\uFEFFitem,worker,label\r\n\"unterminated\n")
	f.Fuzz(func(t *testing.T, in string) {
		r, err := NewReader(strings.NewReader(in), "item", "worker", "label")
		if err != nil {
			requireLine(t, err, in)
			return
		}
		for {
			row, err := r.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				requireLine(t, err, in)
				return
			}
			require.Len(t, row, 3)
			for _, f := range row {
				require.NotEmpty(t, f)
			}
		}
	})
}
