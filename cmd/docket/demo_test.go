package main

import (
	"bytes"
	"io"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The demo shows what it says it shows: retries (with one job's attempt
// history), progress and the fatal error, besides the totals.
func TestDemoShowsRetriesAndProgress(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	url := "sqlite:" + filepath.Join(t.TempDir(), "demo.db")
	require.NoError(t, runDemo(t.Context(), &out, io.Discard, url, 12))
	s := out.String()
	require.Regexp(t, regexp.MustCompile(`(?m)^SUCCESS +11$`), s)
	require.Regexp(t, regexp.MustCompile(`(?m)^retries: \d+ jobs needed more than one attempt`), s)
	require.Regexp(t, regexp.MustCompile(`(?m)^  attempt 1 +error +report r\d+: upstream not ready`), s)
	require.Regexp(t, regexp.MustCompile(`(?m)^progress: \d+ demo.resize jobs reported progress; photo-\d+\.jpg ended at 100% "resizing photo-\d+\.jpg"`), s)
	require.Regexp(t, regexp.MustCompile(`(?m)^fatal: demo.charge is DEAD after 1 attempt, not retried: fatal: card declined`), s)
}
