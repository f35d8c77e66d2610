package api

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
)

// documentedMetric is one row of the metrics table of
// docs/configuration.md.
type documentedMetric struct {
	typ    string
	labels []string
}

// documentedMetrics reads the table of docs/configuration.md's "Metrics"
// section: | `name` | type | `label`, `label` | meaning |.
func documentedMetrics(t *testing.T) map[string]documentedMetric {
	t.Helper()
	doc, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "\n### Metrics\n")
	require.True(t, ok, "docs/configuration.md has no Metrics section")
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	out := map[string]documentedMetric{}
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "| `docket_") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		require.GreaterOrEqual(t, len(cells), 4, "row %q", line)
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		m := documentedMetric{typ: strings.TrimSpace(cells[1])}
		for l := range strings.SplitSeq(cells[2], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				m.labels = append(m.labels, l)
			}
		}
		slices.Sort(m.labels)
		require.NotContains(t, out, name, "documented twice")
		out[name] = m
	}
	require.NotEmpty(t, out)
	return out
}

// fixedCounter counts one queue with one job of each state.
type fixedCounter struct{}

func (fixedCounter) QueueCounts(context.Context, int) ([]*docket.QueueInfo, error) {
	return []*docket.QueueInfo{{Name: "q", Counts: map[docket.JobState]int{docket.JobStateQueued: 1}, AtLeast: map[docket.JobState]bool{}}}, nil
}

// TestMetricsDocumented: the docket_ metrics the registry serves are the
// ones docs/configuration.md lists, with the same type and labels, each
// with help text; a metric added, renamed or relabelled without the docs
// (or documented and gone) fails here.
func TestMetricsDocumented(t *testing.T) {
	t.Parallel()
	documented := documentedMetrics(t)

	m := NewMetrics()
	m.countFrom(fixedCounter{})
	// Every vector gets a child, or it is not gathered.
	m.Inserted("q", 1)
	now := time.Now()
	m.JobFinished(docket.JobFinishedEvent{
		Queue: "q", State: docket.JobStateRetry, Outcome: docket.OutcomeError,
		DueAt: now.Add(-time.Second), StartedAt: now, FinishedAt: now.Add(time.Second),
	})
	m.requestStarted()
	defer m.requestDone()
	families, err := m.Registry().Gather()
	require.NoError(t, err)

	served := map[string]documentedMetric{}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, metricNamespace+"_") {
			continue
		}
		require.NotEmpty(t, f.GetHelp(), "%s has no help text", name)
		got := documentedMetric{typ: strings.ToLower(f.GetType().String())}
		if f.GetType().String() == "UNTYPED" {
			t.Errorf("%s is untyped", name)
		}
		for _, l := range f.GetMetric()[0].GetLabel() {
			got.labels = append(got.labels, l.GetName())
		}
		slices.Sort(got.labels)
		served[name] = got
	}
	require.Equal(t, documented, served, "docs/configuration.md's metrics table against the registry")
}
