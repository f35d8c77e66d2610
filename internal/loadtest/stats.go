package loadtest

import (
	"fmt"
	"time"

	"github.com/docket-run/docket/internal/bench"
)

// Limits of the verdict (see the package comment).
const (
	// P99Limit is the highest p99 submit latency of a held step.
	P99Limit = 100 * time.Millisecond
	// SlopeLimitFraction is the highest backlog growth of a held step, as
	// a fraction of the asked rate: the workers must drain at least 99 %
	// of what is submitted.
	SlopeLimitFraction = 0.01
)

// Latency is submit latency percentiles in milliseconds, by nearest rank,
// as docket bench reports enqueue→start latency.
type Latency = bench.Latency

// percentiles of ms; ms is sorted in place.
func percentiles(ms []float64) Latency { return bench.Percentiles(ms) }

// Sample is the backlog at one instant of a step.
type Sample struct {
	Seconds float64 `json:"seconds"` // since the measured window began
	Backlog int     `json:"backlog"`
}

// slope is the least-squares slope of the backlog over time, in jobs per
// second; 0 with fewer than two distinct instants.
func slope(samples []Sample) float64 {
	n := float64(len(samples))
	if n < 2 {
		return 0
	}
	var sx, sy float64
	for _, s := range samples {
		sx += s.Seconds
		sy += float64(s.Backlog)
	}
	mx, my := sx/n, sy/n
	var sxy, sxx float64
	for _, s := range samples {
		dx := s.Seconds - mx
		sxy += dx * (float64(s.Backlog) - my)
		sxx += dx * dx
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}

// verdict says whether a step held its rate, and if not, why.
func verdict(s *Step) (bool, []string) {
	var why []string
	if s.Errors > 0 {
		why = append(why, fmt.Sprintf("%d errors", s.Errors))
	}
	if s.Accepted == 0 {
		why = append(why, "no submission accepted")
	}
	if p99 := time.Duration(s.Latency.P99 * float64(time.Millisecond)); p99 >= P99Limit {
		why = append(why, fmt.Sprintf("p99 %.1f ms >= %v", s.Latency.P99, P99Limit))
	}
	if limit := SlopeLimitFraction * float64(s.Rate); s.BacklogSlope >= limit {
		why = append(why, fmt.Sprintf("backlog grows %.2f jobs/s >= %.2f (%g%% of the rate)", s.BacklogSlope, limit, 100*SlopeLimitFraction))
	}
	return len(why) == 0, why
}
