package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/testdb"
)

// TestQCExperiment is issue 14's experiment at a tenth of its size
// (docs/quality.md, "The experiment"), on both backends: with the
// documented quality defaults, QC on is more accurate than QC off at a
// similar or lower number of judgments of regular units, every bad
// contributor (spammer, always-first bot, fast clicker) is flagged, and
// the repair changed finalized results with an audit row each.
func TestQCExperiment(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("about 15 s per backend")
	}
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			c := qcExperimentConfig{DatabaseURL: backend.URL(t), Units: 200, Golden: 40, Contributors: 30,
				Profiles: "good=70,spammer=10,first=10,fast=10", Accuracy: 0.8, NoisyAccuracy: 0.6, Options: 3,
				Min: 3, Max: 7, Target: 0.9, Quality: "{}", EstimateEvery: 300, Think: qcThinkDefault, Seed: 1}
			var log bytes.Buffer
			runs, err := runQCExperiment(context.Background(), c, &log)
			require.NoError(t, err)
			require.Len(t, runs, 2)
			off, on := runs[0], runs[1]
			var table strings.Builder
			require.NoError(t, printQCRuns(&table, runs))
			t.Logf("\n%s", table.String())

			for _, r := range runs {
				require.Equal(t, 200, r.Units)
				require.Zero(t, r.NotFinal, "%s: every unit finalized", r.Mode)
				require.GreaterOrEqual(t, r.PerUnit, 3.0, "%s: at least min", r.Mode)
			}
			require.Greater(t, on.Accuracy, off.Accuracy, "QC on is more accurate")
			require.LessOrEqual(t, on.PerUnit, off.PerUnit*1.1, "at a similar or lower cost in regular judgments")

			require.Zero(t, off.TestJudgments)
			require.Zero(t, off.Tainted)
			require.Zero(t, off.Audits)
			require.Empty(t, off.Flagged, "QC off flags nobody")

			require.Positive(t, on.TestJudgments)
			for _, p := range []string{"spammer", "first", "fast"} {
				require.Equal(t, on.Seats[p], on.Flagged[p], "every %s is flagged", p)
				for _, n := range on.UntilFlagged[p] {
					// the 8th test question (minTests) is the 29th assignment (quizSize 5, testEvery 8)
					require.GreaterOrEqual(t, n, 29, "%s: no flag before minTests test questions", p)
				}
			}
			require.Positive(t, on.Tainted)
			require.Positive(t, on.Audits)
			require.Equal(t, on.Audits, on.Reopened+on.Recomputed)
		})
	}
}
