package loadtest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPercentiles(t *testing.T) {
	t.Parallel()
	require.Equal(t, Latency{}, percentiles(nil))
	require.Equal(t, Latency{Count: 1, P50: 7, P90: 7, P99: 7, Max: 7}, percentiles([]float64{7}))

	// 1..100 shuffled: the nearest rank of p is p×100 itself.
	ms := make([]float64, 100)
	for i := range ms {
		ms[i] = float64((i*37)%100 + 1)
	}
	require.Equal(t, Latency{Count: 100, P50: 50, P90: 90, P99: 99, Max: 100}, percentiles(ms))

	// 1..1000: p99 is the 990th value; a single slow outlier is the max
	// only.
	ms = make([]float64, 1000)
	for i := range ms {
		ms[i] = float64(i + 1)
	}
	ms[500] = 5000
	l := percentiles(ms)
	require.Equal(t, 991.0, l.P99) // 501 moved to the top: the 990th is 991
	require.Equal(t, 5000.0, l.Max)
}

func TestSlope(t *testing.T) {
	t.Parallel()
	line := func(a, b float64, n int) []Sample {
		var s []Sample
		for i := range n {
			x := float64(i)
			s = append(s, Sample{Seconds: x, Backlog: int(a + b*x)})
		}
		return s
	}
	require.Zero(t, slope(nil))
	require.Zero(t, slope([]Sample{{Seconds: 0, Backlog: 40}}))
	require.Zero(t, slope([]Sample{{Seconds: 3, Backlog: 1}, {Seconds: 3, Backlog: 9}}), "one instant has no slope")
	require.InDelta(t, 0, slope(line(25, 0, 120)), 1e-9, "flat")
	require.InDelta(t, 10, slope(line(5, 10, 120)), 1e-9, "growing")
	require.InDelta(t, -2, slope(line(500, -2, 60)), 1e-9, "draining")

	// A sawtooth (polling) around a constant has a slope near zero.
	var saw []Sample
	for i := range 120 {
		saw = append(saw, Sample{Seconds: float64(i), Backlog: 100 + 40*(i%3)})
	}
	require.InDelta(t, 0, slope(saw), 0.05)
}

func TestVerdict(t *testing.T) {
	t.Parallel()
	held := func() *Step {
		return &Step{Rate: 1000, Submitted: 120000, Accepted: 120000, Latency: Latency{P99: 20}, BacklogSlope: 3}
	}
	tests := []struct {
		name   string
		change func(s *Step)
		why    string // "" for held
	}{
		{"held", func(*Step) {}, ""},
		{"draining backlog", func(s *Step) { s.BacklogSlope = -50 }, ""},
		{"p99 just under", func(s *Step) { s.Latency.P99 = 99.9 }, ""},
		{"p99 at the limit", func(s *Step) { s.Latency.P99 = 100 }, "p99 100.0 ms >= 100ms"},
		{"one error", func(s *Step) { s.Errors, s.Accepted = 1, 119999 }, "1 errors"},
		{"slope under 1 %", func(s *Step) { s.BacklogSlope = 9.99 }, ""},
		{"slope at 1 %", func(s *Step) { s.BacklogSlope = 10 }, "backlog grows 10.00 jobs/s >= 10.00"},
		{"nothing accepted", func(s *Step) { s.Accepted, s.Errors = 0, 120000 }, "no submission accepted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := held()
			tt.change(s)
			ok, why := verdict(s)
			if tt.why == "" {
				require.True(t, ok, "why: %v", why)
				require.Empty(t, why)
				return
			}
			require.False(t, ok)
			require.Contains(t, strings.Join(why, "; "), tt.why)
		})
	}
}

func TestReportText(t *testing.T) {
	t.Parallel()
	rep := &Report{
		Backend: "sqlite", Workers: WorkersGo, WorkerConcurrency: 100, StepSeconds: 120, WarmupSeconds: 10,
		Steps: []*Step{
			{Rate: 100, AchievedRate: 100, Submitted: 12000, Accepted: 12000, Latency: Latency{P99: 5}, Held: true},
			{Rate: 200, AchievedRate: 180, Submitted: 24000, Accepted: 23990, Errors: 10,
				ErrorKinds: map[string]int{"status 503": 10}, FirstError: "status 503: overloaded",
				Latency: Latency{P99: 450}, Why: []string{"10 errors", "p99 450.0 ms >= 100ms"}},
		},
		HighestHeldRate: 100,
		Final:           &Final{Sent: 38000, Accepted: 37990, Drained: true, States: map[string]int{"SUCCESS": 37990}},
	}
	var b strings.Builder
	require.NoError(t, rep.WriteText(&b))
	out := b.String()
	require.True(t, strings.HasSuffix(out, "\nload_highest_held_rate=100\n"), out)
	require.Contains(t, out, "NOT held")
	require.Contains(t, out, "200/s errors: status 503 10; first: status 503: overloaded")
	require.Contains(t, out, "database after the run: SUCCESS 37990")
	require.NotContains(t, out, "PROBLEM")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{DocketBin: "docket"}.WithDefaults()
	require.NoError(t, ok.Validate())
	require.Equal(t, RatesDefault, ok.Rates)
	require.Equal(t, StepDurationDefault, ok.StepDuration)

	bad := ok
	bad.Rates = []int{100, 0}
	require.ErrorContains(t, bad.Validate(), "rate 0")
	bad = ok
	bad.Workers = "python"
	require.ErrorContains(t, bad.Validate(), `workers "python"`)
	bad = ok
	bad.DocketBin = ""
	require.ErrorContains(t, bad.Validate(), "docket binary")
}
