package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplitCommandLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   ", nil},
		{"cat", []string{"cat"}},
		{"  ./run --size 128  ", []string{"./run", "--size", "128"}},
		{`sh -c "cat; exit 0"`, []string{"sh", "-c", "cat; exit 0"}},
		{`sh -c 'echo "$HOME"'`, []string{"sh", "-c", `echo "$HOME"`}},
		{`a"b c"d`, []string{"ab cd"}},
		{`say "a \"quoted\" \$word \\ \n"`, []string{"say", `a "quoted" $word \ \n`}},
		{`one\ word two`, []string{"one word", "two"}},
		{`''`, []string{""}},
		{`x "" y`, []string{"x", "", "y"}},
		{"a\\\nb", []string{"ab"}},
		{"a\tb\nc", []string{"a", "b", "c"}},
	} {
		got, err := splitCommandLine(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{`sh -c "cat`, `it's`, `end\`} {
		_, err := splitCommandLine(bad)
		require.Error(t, err, bad)
	}
}

func FuzzSplitCommandLine(f *testing.F) {
	for _, s := range []string{`sh -c "cat; exit 0"`, `a'b'c`, `x\ y`, `"\""`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := splitCommandLine(s)
		if err != nil {
			return
		}
		// Quoting each word back gives the same words.
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
		again, err := splitCommandLine(strings.Join(quoted, " "))
		require.NoError(t, err)
		require.Equal(t, words, again)
	})
}

func TestOutputBuffers(t *testing.T) {
	t.Parallel()
	c := &cappedBuffer{max: 5}
	n, err := c.Write([]byte("abc"))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.False(t, c.overflow)
	n, _ = c.Write([]byte("defg"))
	require.Equal(t, 4, n, "a full buffer still takes every byte: the program must not block")
	require.True(t, c.overflow)
	require.Equal(t, "abcde", c.String())

	tail := &tailBuffer{max: 4}
	for _, s := range []string{"ab", "cdef", "g"} {
		_, _ = tail.Write([]byte(s))
	}
	require.Equal(t, "defg", tail.String())
}

func TestDefaultWorkerIDIsAName(t *testing.T) {
	t.Parallel()
	id := defaultWorkerID()
	require.NotEmpty(t, id)
	for _, c := range id {
		require.True(t, c < 128 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-:/", c)), "%q", id)
	}
}
