package loadtest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Report is the outcome of a run.
type Report struct {
	Backend           string  `json:"backend"`
	Workers           string  `json:"workers"`
	WorkerConcurrency int     `json:"workerConcurrency"`
	StepSeconds       float64 `json:"stepSeconds"`
	WarmupSeconds     float64 `json:"warmupSeconds"`
	Steps             []*Step `json:"steps"`
	// HighestHeldRate is the rate of the highest held step, 0 when none.
	HighestHeldRate int `json:"highestHeldRate"`
	// Final is the database check after the last step; nil when the run
	// was interrupted.
	Final *Final `json:"final,omitempty"`
}

// Step is the measured window of one step.
type Step struct {
	// Rate asked, and achieved: accepted submissions per second from the
	// window's start to the last answer (or the window's end, if later).
	Rate         int     `json:"rate"`
	AchievedRate float64 `json:"achievedRate"`
	// Submitted: requests due in the window; Accepted: answered 2xx;
	// Errors: the others, by kind ("status 503", "transport"), with the
	// first one's text.
	Submitted  int            `json:"submitted"`
	Accepted   int            `json:"accepted"`
	Errors     int            `json:"errors"`
	ErrorKinds map[string]int `json:"errorKinds,omitempty"`
	FirstError string         `json:"firstError,omitempty"`
	// Latency of the accepted submissions, from due time to answer.
	Latency Latency `json:"latency"`
	// MaxSendLagMs is the latest a request left after its due time: the
	// dispatcher's own lag (CPU, MaxInFlight). It is part of the latency.
	MaxSendLagMs float64 `json:"maxSendLagMs"`
	// Backlog at the window's start and end, its highest sample, and its
	// least-squares slope in jobs per second.
	BacklogStart int      `json:"backlogStart"`
	BacklogEnd   int      `json:"backlogEnd"`
	BacklogMax   int      `json:"backlogMax"`
	BacklogSlope float64  `json:"backlogSlopePerSec"`
	Samples      []Sample `json:"samples"`
	// WorkerErrors: failed lease or complete calls of the HTTP workers
	// during the window.
	WorkerErrors int `json:"workerErrors,omitempty"`
	// Held is the verdict (see the package comment); Why lists what failed.
	Held bool     `json:"held"`
	Why  []string `json:"why,omitempty"`
}

// Final is the database as the run leaves it.
type Final struct {
	// Sent and Accepted: submissions of the whole run, warm-ups included.
	Sent     int `json:"sent"`
	Accepted int `json:"accepted"`
	// Drained: every accepted job finished within the drain timeout.
	Drained bool `json:"drained"`
	// Jobs by state, counted in the database.
	States map[string]int `json:"states"`
	// Problems found: jobs missing or in a state a no-op handler cannot
	// explain. Empty when the run is sound.
	Problems []string `json:"problems,omitempty"`
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	return nil
}

// WriteText writes the report as a table, the database check, and last
// the line load_highest_held_rate=R.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "load held: 1 docket serve on %s, %s workers ×%d, steps of %gs after %gs warm-up\n",
		r.Backend, r.Workers, r.WorkerConcurrency, r.StepSeconds, r.WarmupSeconds)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rate/s\tachieved/s\tsubmitted\terrors\tp50 ms\tp90 ms\tp99 ms\tmax ms\tbacklog start\tend\tslope/s\tverdict\t")
	for _, s := range r.Steps {
		v := "held"
		if !s.Held {
			v = "NOT held"
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%.2f\t%s\t\n",
			s.Rate, s.AchievedRate, s.Submitted, s.Errors, s.Latency.P50, s.Latency.P90, s.Latency.P99, s.Latency.Max,
			s.BacklogStart, s.BacklogEnd, s.BacklogSlope, v)
	}
	_ = tw.Flush()
	for _, s := range r.Steps {
		if len(s.Why) > 0 {
			fmt.Fprintf(&b, "%d/s not held: %s\n", s.Rate, strings.Join(s.Why, "; "))
		}
		if s.FirstError != "" {
			fmt.Fprintf(&b, "%d/s errors: %s; first: %s\n", s.Rate, countsOf(s.ErrorKinds), s.FirstError)
		}
		if s.WorkerErrors > 0 {
			fmt.Fprintf(&b, "%d/s: %d worker calls failed\n", s.Rate, s.WorkerErrors)
		}
	}
	if f := r.Final; f != nil {
		drained := "drained"
		if !f.Drained {
			drained = "NOT drained"
		}
		fmt.Fprintf(&b, "database after the run: %s (%d sent, %d accepted, %s)\n", countsOf(f.States), f.Sent, f.Accepted, drained)
		for _, p := range f.Problems {
			fmt.Fprintf(&b, "PROBLEM: %s\n", p)
		}
	}
	fmt.Fprintf(&b, "load_highest_held_rate=%d\n", r.HighestHeldRate)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	return nil
}

// countsOf is "k1 n1, k2 n2" in key order.
func countsOf(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
