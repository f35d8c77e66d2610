package loadtest

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// recorder collects a step's answers.
type recorder struct {
	mu sync.Mutex
	// The whole step, for the progress lines.
	sent, accepted, errors int
	recent                 []float64 // latencies (ms) since the last progress line
	// The measured window.
	submitted  int
	lat        []float64 // latencies (ms) of accepted submissions
	errs       map[string]int
	firstErr   string
	lastAnswer time.Time // of an accepted submission
	maxLag     time.Duration
}

func (r *recorder) sending() {
	r.mu.Lock()
	r.sent++
	r.mu.Unlock()
}

// record one answer of a submission due at due and sent lag after it.
func (r *recorder) record(measured bool, due time.Time, lag time.Duration, a answer) {
	ms := float64(a.at.Sub(due)) / float64(time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	if a.kind == "" {
		r.accepted++
		r.recent = append(r.recent, ms)
	} else {
		r.errors++
	}
	if !measured {
		return
	}
	r.submitted++
	r.maxLag = max(r.maxLag, lag)
	if a.kind != "" {
		if r.errs == nil {
			r.errs = map[string]int{}
		}
		r.errs[a.kind]++
		if r.firstErr == "" {
			r.firstErr = a.text
		}
		return
	}
	r.lat = append(r.lat, ms)
	if a.at.After(r.lastAnswer) {
		r.lastAnswer = a.at
	}
}

// progress returns the step's counts and the p99 of the latencies since
// the last call (-1 when none came).
func (r *recorder) progress() (sent, accepted, errors int, p99 float64) {
	r.mu.Lock()
	recent := r.recent
	r.recent = nil
	sent, accepted, errors = r.sent, r.accepted, r.errors
	r.mu.Unlock()
	if len(recent) == 0 {
		return sent, accepted, errors, -1
	}
	return sent, accepted, errors, percentiles(recent).P99
}

// step runs one step at rate jobs per second: warm-up, then the measured
// window; it returns once every submission of the step is answered.
func (l *load) step(ctx context.Context, idx, rate int) (*Step, error) {
	cfg := l.cfg
	warm := int(math.Round(float64(rate) * cfg.Warmup.Seconds()))
	measured := max(1, int(math.Round(float64(rate)*cfg.StepDuration.Seconds())))
	start := time.Now()
	due := func(i int) time.Time {
		return start.Add(time.Duration(float64(i) * float64(time.Second) / float64(rate)))
	}
	from, to := due(warm), due(warm+measured)
	workerErrors := l.t.workerErrors.Load()
	rec := &recorder{}

	sampled := make(chan []Sample, 1)
	go func() { sampled <- l.sample(ctx, from, to) }()
	answered := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		l.progress(idx, rate, start, from, to, rec, answered)
	}()

	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
send:
	for i := range warm + measured {
		at := due(i)
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break send
			}
		}
		select {
		case l.sub.slots <- struct{}{}:
		case <-ctx.Done():
			break send
		}
		lag := time.Since(at)
		rec.sending()
		l.sent.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := l.sub.submit(ctx, i, fmt.Sprintf("load-%s-%d-%d", l.runID, idx, i))
			<-l.sub.slots
			if a.kind == "" {
				l.t.accepted.Add(1)
			}
			rec.record(i >= warm, at, lag, a)
		}()
	}
	wg.Wait()
	close(answered)
	<-progressDone
	samples := <-sampled
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l.srv.exited() {
		return nil, fmt.Errorf("%w:\n%s", errServerExited, l.srv.tail(20))
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	s := &Step{
		Rate: rate, Submitted: rec.submitted, Accepted: len(rec.lat), Errors: rec.submitted - len(rec.lat),
		ErrorKinds: rec.errs, FirstError: rec.firstErr, Latency: percentiles(rec.lat),
		MaxSendLagMs: float64(rec.maxLag) / float64(time.Millisecond),
		Samples:      samples, BacklogSlope: slope(samples),
		WorkerErrors: int(l.t.workerErrors.Load() - workerErrors),
	}
	window := max(to.Sub(from), rec.lastAnswer.Sub(from))
	s.AchievedRate = float64(s.Accepted) / window.Seconds()
	if len(samples) > 0 {
		s.BacklogStart, s.BacklogEnd = samples[0].Backlog, samples[len(samples)-1].Backlog
		for _, x := range samples {
			s.BacklogMax = max(s.BacklogMax, x.Backlog)
		}
	}
	s.Held, s.Why = verdict(s)
	verdictText := "held"
	if !s.Held {
		verdictText = "NOT held: " + strings.Join(s.Why, "; ")
	}
	logf(cfg.Log, "step %d/%d, %d/s: %d submitted, %d errors, p99 %.1f ms, backlog %d → %d (%+.2f/s): %s",
		idx+1, len(cfg.Rates), rate, s.Submitted, s.Errors, s.Latency.P99, s.BacklogStart, s.BacklogEnd, s.BacklogSlope, verdictText)
	return s, nil
}

// sample takes the backlog every SampleInterval from from to to, and at
// to itself, or until ctx ends.
func (l *load) sample(ctx context.Context, from, to time.Time) []Sample {
	var at []time.Time
	for t := from; !t.After(to); t = t.Add(l.cfg.SampleInterval) {
		at = append(at, t)
	}
	if at[len(at)-1].Before(to) {
		at = append(at, to)
	}
	out := make([]Sample, 0, len(at))
	timer := time.NewTimer(0)
	defer timer.Stop()
	for _, t := range at {
		timer.Reset(time.Until(t))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return out
		}
		out = append(out, Sample{Seconds: t.Sub(from).Seconds(), Backlog: l.t.backlog()})
	}
	return out
}

// progress writes a line every ProgressInterval until answered is closed.
func (l *load) progress(idx, rate int, start, from, to time.Time, rec *recorder, answered <-chan struct{}) {
	tick := time.NewTicker(l.cfg.ProgressInterval)
	defer tick.Stop()
	for {
		select {
		case <-answered:
			return
		case <-tick.C:
		}
		now := time.Now()
		var phase string
		switch {
		case now.Before(from):
			phase = fmt.Sprintf("warm-up %.0f/%.0fs", now.Sub(start).Seconds(), from.Sub(start).Seconds())
		case now.Before(to):
			phase = fmt.Sprintf("measuring %.0f/%.0fs", now.Sub(from).Seconds(), to.Sub(from).Seconds())
		default:
			phase = "awaiting the last answers"
		}
		sent, accepted, errors, p99 := rec.progress()
		recent := "no answer"
		if p99 >= 0 {
			recent = fmt.Sprintf("%.1f ms", p99)
		}
		logf(l.cfg.Log, "step %d/%d, %d/s, %s: sent %d, accepted %d, errors %d, in flight %d, p99 of the last %v %s, backlog %d",
			idx+1, len(l.cfg.Rates), rate, phase, sent, accepted, errors, sent-accepted-errors, l.cfg.ProgressInterval, recent, l.t.backlog())
	}
}
