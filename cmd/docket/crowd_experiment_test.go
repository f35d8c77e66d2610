package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/testdb"
)

// TestQCExperiment is issue 14's experiment at a fifth of its size
// (docs/quality.md, "The experiment"), with as many units per contributor
// (20) as the full one so that the quiz weighs as much, on both backends:
// with the documented quality defaults, QC on is more accurate than QC
// off for at most 5% more judgments in all — test questions included, they
// are paid — every bad contributor (spammer, always-first bot, fast
// clicker) is flagged, not before the minimum of test questions, and at
// most one honest contributor is (the point-estimate rule this replaced
// flagged about one in six of them).
func TestQCExperiment(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("about 20 s per backend")
	}
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			c := qcExperimentConfig{DatabaseURL: backend.URL(t), Units: 400, Golden: 40, Contributors: 20,
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
				require.Equal(t, 400, r.Units)
				require.Zero(t, r.NotFinal, "%s: every unit finalized", r.Mode)
				require.GreaterOrEqual(t, r.PerUnit, 3.0, "%s: at least min", r.Mode)
			}
			require.Greater(t, on.Accuracy, off.Accuracy, "QC on is more accurate")
			all := func(r *qcRun) int { return r.RegularJudgments + r.TestJudgments }
			require.LessOrEqual(t, float64(all(on)), float64(all(off))*1.05,
				"at a similar cost in all judgments, test questions included (%d against %d)", all(on), all(off))
			require.Less(t, on.RegularJudgments, off.RegularJudgments, "fewer judgments of regular units")

			require.Zero(t, off.TestJudgments)
			require.Zero(t, off.Tainted)
			require.Zero(t, off.Audits)
			require.Empty(t, off.Flagged, "QC off flags nobody")

			require.Positive(t, on.TestJudgments)
			for _, p := range []string{"spammer", "first", "fast"} {
				require.Equal(t, on.Seats[p], on.Flagged[p], "every %s is flagged", p)
				for _, n := range on.UntilFlagged[p] {
					// minTests 5: the quiz
					require.GreaterOrEqual(t, n, 5, "%s: no flag before minTests test questions", p)
				}
			}
			require.LessOrEqual(t, on.Flagged["good"], 1, "at most one honest contributor of %d flagged", on.Seats["good"])
			require.Equal(t, on.Audits, on.Reopened+on.Recomputed)
			require.Equal(t, on.Tests["good"]+on.Tests["spammer"]+on.Tests["first"]+on.Tests["fast"], on.TestJudgments)
		})
	}
}
