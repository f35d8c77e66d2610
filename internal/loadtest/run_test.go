package loadtest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/docket-run/docket/internal/loadtest"
	"github.com/docket-run/docket/internal/servertest"
	"github.com/docket-run/docket/internal/testdb"
)

func TestMain(m *testing.M) { servertest.Main(m) }

// TestRunShort runs one short step at 50/s against the real binary on
// SQLite and checks the report adds up and every job ended SUCCESS in the
// database. The verdict is not checked: on a busy CI machine, under -race,
// p99 may well pass 100 ms.
func TestRunShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts docket serve: not in -short")
	}
	defer goleak.VerifyNone(t)
	const rate, seconds = 50, 3
	var log strings.Builder
	rep, err := loadtest.Run(t.Context(), loadtest.Config{
		DocketBin:        servertest.Binary(t),
		DatabaseURL:      testdb.SQLiteURL(t),
		Rates:            []int{rate},
		StepDuration:     seconds * time.Second,
		Warmup:           time.Second,
		ProgressInterval: time.Second,
		Log:              &log,
	})
	require.NoError(t, err, "log:\n%s", log.String())
	t.Logf("progress:\n%s", log.String())

	require.Equal(t, "sqlite", rep.Backend)
	require.Len(t, rep.Steps, 1)
	s := rep.Steps[0]
	require.Equal(t, rate, s.Rate)
	require.Equal(t, rate*seconds, s.Submitted, "submitted = rate × duration")
	require.Zero(t, s.Errors, "errors: %v, first: %s", s.ErrorKinds, s.FirstError)
	require.Equal(t, s.Submitted, s.Accepted)
	require.Equal(t, s.Accepted, s.Latency.Count)
	require.InDelta(t, rate, s.AchievedRate, rate*0.2)
	require.True(t, s.Latency.P50 > 0 && s.Latency.P50 <= s.Latency.P90 && s.Latency.P90 <= s.Latency.P99 && s.Latency.P99 <= s.Latency.Max, "%+v", s.Latency)
	require.GreaterOrEqual(t, len(s.Samples), seconds+1, "a backlog sample every second, ends included")
	require.Equal(t, float64(seconds), s.Samples[len(s.Samples)-1].Seconds)
	if s.Held {
		require.Equal(t, rate, rep.HighestHeldRate)
	} else {
		require.NotEmpty(t, s.Why)
		require.Zero(t, rep.HighestHeldRate)
	}

	f := rep.Final
	require.NotNil(t, f)
	require.Equal(t, rate*(seconds+1), f.Sent, "warm-up and window")
	require.Equal(t, f.Sent, f.Accepted)
	require.True(t, f.Drained)
	require.Empty(t, f.Problems)
	require.Equal(t, map[string]int{"SUCCESS": f.Sent}, f.States, "every job SUCCESS in the database")

	var out strings.Builder
	require.NoError(t, rep.WriteText(&out))
	require.True(t, strings.HasSuffix(out.String(), "\nload_highest_held_rate="+map[bool]string{true: "50", false: "0"}[s.Held]+"\n"), out.String())
}
