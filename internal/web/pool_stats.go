package web

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/task"
)

// The pool page's progress, agreement and contributors come from two
// bounded samples, never from a count over the pool's units or judgments:
// the newest statsJudgments judgments (statsPages pages of the root
// package's JudgmentPage, by the judgments' (pool_id, id) index) and the
// newest statsUnits FINALIZED regular units (by (pool_id, state, id)). The
// unit counts by state are the pool's counters. What a sample cannot see
// (judgments older than its oldest) the page says.
const (
	statsPage      = 1000
	statsPages     = 2
	statsJudgments = statsPage * statsPages
	statsUnits     = 500
	statsHours     = 24 // hours of the judgments/hour chart
	rateWindow     = 3 * time.Hour
	statsTop       = 20 // contributors listed
	histBins       = 10 // confidence histogram: [0, 0.1) … [0.9, 1]
)

// poolStats is the pool page's progress and quality panels.
type poolStats struct {
	Sampled    int       // judgments in the sample
	Full       bool      // the sample hit its cap: older judgments unseen
	Oldest     time.Time // of the sample
	PerHour    *hourChart
	Rate       float64 // judgments per hour, recent
	RateWindow string  // over what the rate was measured
	Remaining  int     // judgments still needed, at most (open units × target)
	ETA        string  // "" when no rate
	Confidence *histChart
	Finalized  int // units in the confidence sample
	NoConf     int // of them, without a confidence
	Agreement  []fieldAgreement
	AgreeAll   agreement // judgments agreeing with every compared field
	Workers    []contributorRow
	MoreWorker int // contributors beyond statsTop
	// Sampled is every contributor of the sample by id (the quality
	// panel's judgments and median times of contributors without a
	// quality record).
	Sample map[uuid.UUID]contributorRow
}

type agreement struct {
	Agreed, Compared int
	Percent          string
}

func agreementOf(a, n int) agreement {
	p := "—"
	if n > 0 {
		p = fmt.Sprintf("%.0f%%", 100*float64(a)/float64(n))
	}
	return agreement{Agreed: a, Compared: n, Percent: p}
}

type fieldAgreement struct {
	Field string
	Kind  string
	agreement
}

// contributorRow is one contributor of the pool, from the judgments
// sample.
type contributorRow struct {
	ID        uuid.UUID
	Name      string // "" when unknown
	Judgments int
	Median    string // seconds per judgment, from take to submit
}

// hourChart is judgments per hour as SVG bars, oldest left.
type hourChart struct {
	Width, Height int
	Bars          []hourBar
	Max           int
	Partial       bool // hours before the sample's oldest judgment are unknown
}

type hourBar struct {
	X, Y, W, H int
	Count      int
	Label      string // "14:00"
	Unknown    bool   // before the sample: not counted
	Tick       bool   // label this bar
}

// histChart is the confidence histogram as SVG bars.
type histChart struct {
	Width, Height int
	Bars          []histBar
}

type histBar struct {
	X, Y, W, H int
	Count      int
	Label      string // "0.9–1"
}

const (
	histW   = 720
	histH   = 160
	histPad = 20 // room for labels below the bars
)

// statsTimeout bounds the pool page's sample reads: past it the page
// shows without its panels (and says why) rather than waiting.
const statsTimeout = 2 * time.Second

// loadStats reads the two samples and the contributors' names.
func (h *Handler) loadStats(ctx context.Context, p *docket.Pool, now time.Time) (*poolStats, error) {
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	var js []*docket.Judgment
	before := uuid.Nil
	for range statsPages {
		page, err := h.client.JudgmentPage(ctx, docket.JudgmentPageParams{PoolID: p.ID, Before: before, Limit: statsPage})
		if err != nil {
			return nil, fmt.Errorf("sample judgments: %w", err)
		}
		js = append(js, page...)
		if len(page) < statsPage {
			break
		}
		before = page[len(page)-1].ID
	}
	regular := false
	units, err := h.client.UnitList(ctx, p.ID, docket.UnitListParams{States: []docket.UnitState{docket.UnitFinalized}, Golden: &regular, Limit: statsUnits})
	if err != nil {
		return nil, fmt.Errorf("sample finalized units: %w", err)
	}
	var fields []task.Field
	if ct, err := h.client.CompiledTask(ctx, p.Task, p.TaskVersion); err == nil {
		fields = ct.Fields
	}
	s := computeStats(p, js, units, fields, now)
	for i := range s.Workers {
		c, err := h.client.ContributorGet(ctx, s.Workers[i].ID)
		if err == nil {
			s.Workers[i].Name = c.Name
		}
	}
	return s, nil
}

// computeStats works out the panels from the samples (newest first).
func computeStats(p *docket.Pool, js []*docket.Judgment, units []*docket.Unit, fields []task.Field, now time.Time) *poolStats {
	s := &poolStats{Sampled: len(js), Full: len(js) >= statsJudgments, Finalized: len(units)}
	if len(js) > 0 {
		s.Oldest = js[len(js)-1].SubmittedAt
	}
	s.PerHour = drawHours(js, s.Full, s.Oldest, now)

	// The rate over the last rateWindow, or over the sample when it does
	// not reach that far back.
	from := now.Add(-rateWindow)
	if s.Full && s.Oldest.After(from) {
		from = s.Oldest
	}
	n := 0
	for _, j := range js {
		if !j.SubmittedAt.Before(from) {
			n++
		}
	}
	if span := now.Sub(from); n > 0 && span > 0 {
		s.Rate = float64(n) / span.Hours()
		s.RateWindow = hoursMinutes(span)
	}
	s.Remaining = p.Counts.Open() * max(p.JudgmentsPerUnit, 1)
	if s.Rate > 0 && s.Remaining > 0 {
		s.ETA = roundDuration(time.Duration(float64(s.Remaining) / s.Rate * float64(time.Hour)))
	}

	var conf []float64
	for _, u := range units {
		if u.Confidence == nil {
			s.NoConf++
			continue
		}
		conf = append(conf, *u.Confidence)
	}
	s.Confidence = drawHistogram(conf)
	s.Agreement, s.AgreeAll = agreements(js, units, fields)
	s.Workers, s.MoreWorker, s.Sample = contributors(js)
	return s
}

func roundDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "under a minute"
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	default:
		return fmt.Sprintf("%.0f days", d.Hours()/24)
	}
}

// drawHours counts the sample's judgments in each of the last statsHours
// hours (the current one last); with a full sample, the hours wholly
// before its oldest judgment are marked unknown instead of drawn as 0.
func drawHours(js []*docket.Judgment, full bool, oldest, now time.Time) *hourChart {
	c := &hourChart{Width: histW, Height: histH + histPad}
	end := now.Truncate(time.Hour).Add(time.Hour)
	start := end.Add(-statsHours * time.Hour)
	counts := make([]int, statsHours)
	for _, j := range js {
		if j.SubmittedAt.Before(start) || !j.SubmittedAt.Before(end) {
			continue
		}
		counts[int(j.SubmittedAt.Sub(start)/time.Hour)]++
	}
	for _, n := range counts {
		c.Max = max(c.Max, n)
	}
	w := histW / statsHours
	for i, n := range counts {
		at := start.Add(time.Duration(i) * time.Hour)
		b := hourBar{X: i * w, W: w - 2, Count: n, Label: at.UTC().Format("15:04"), Tick: i%4 == 0 || i == statsHours-1}
		if full && at.Add(time.Hour).Before(oldest) {
			b.Unknown, c.Partial = true, true
			b.H, b.Y = histH, 0
		} else if c.Max > 0 {
			b.H = n * histH / c.Max
			if n > 0 {
				b.H = max(b.H, 1)
			}
			b.Y = histH - b.H
		}
		c.Bars = append(c.Bars, b)
	}
	return c
}

// drawHistogram bins confidences into histBins equal bins (1 in the last).
func drawHistogram(conf []float64) *histChart {
	c := &histChart{Width: histW, Height: histH + histPad}
	counts := make([]int, histBins)
	for _, v := range conf {
		i := int(math.Floor(v * histBins))
		counts[min(max(i, 0), histBins-1)]++
	}
	most := slices.Max(counts)
	w := histW / histBins
	for i, n := range counts {
		b := histBar{X: i * w, W: w - 4, Count: n, Label: fmt.Sprintf("%.1f–%.1f", float64(i)/histBins, float64(i+1)/histBins)}
		if most > 0 {
			b.H = n * histH / most
			if n > 0 {
				b.H = max(b.H, 1)
			}
		}
		b.Y = histH - b.H
		c.Bars = append(c.Bars, b)
	}
	return c
}

// agreements compares each sampled judgment of a sampled finalized unit
// with the unit's result, field by field, for the fields whose answers can
// be equal: choice and rating (the same value) and multi_choice (the same
// set). Text, numbers and boxes are aggregated otherwise (kept, averaged,
// merged), so an exact match says nothing of them. Tainted judgments are
// left out as aggregation leaves them out.
func agreements(js []*docket.Judgment, units []*docket.Unit, fields []task.Field) ([]fieldAgreement, agreement) {
	results := map[uuid.UUID]map[string]any{}
	for _, u := range units {
		var r map[string]any
		if json.Unmarshal(u.Result, &r) == nil {
			results[u.ID] = r
		}
	}
	var compared []task.Field
	for _, f := range fields {
		if f.Kind == task.KindChoice || f.Kind == task.KindRating || f.Kind == task.KindMultiChoice {
			compared = append(compared, f)
		}
	}
	per := make([]fieldAgreement, len(compared))
	for i, f := range compared {
		per[i] = fieldAgreement{Field: f.Name, Kind: string(f.Kind)}
	}
	all, n := 0, 0
	for _, j := range js {
		r, ok := results[j.UnitID]
		if !ok || j.Tainted || j.Golden {
			continue
		}
		var d map[string]any
		if json.Unmarshal(j.Data, &d) != nil {
			continue
		}
		agreedAll, seen := true, false
		for i, f := range compared {
			want, ok := r[f.Name]
			if !ok {
				continue
			}
			got, ok := d[f.Name]
			if !ok {
				continue
			}
			seen = true
			per[i].Compared++
			if sameAnswer(got, want, f.Kind == task.KindMultiChoice) {
				per[i].Agreed++
			} else {
				agreedAll = false
			}
		}
		if seen {
			n++
			if agreedAll {
				all++
			}
		}
	}
	for i := range per {
		per[i].agreement = agreementOf(per[i].Agreed, per[i].Compared)
	}
	return per, agreementOf(all, n)
}

// sameAnswer: equal JSON values, or the same set for a multi_choice.
func sameAnswer(a, b any, set bool) bool {
	if set {
		as, aok := a.([]any)
		bs, bok := b.([]any)
		if aok && bok {
			return slices.Equal(sortedStrings(as), sortedStrings(bs))
		}
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func sortedStrings(vs []any) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, fmt.Sprint(v))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// contributors counts the sample's judgments per contributor with the
// median time from take to submit, most judgments first (the first
// statsTop, how many more, and all of them by id).
func contributors(js []*docket.Judgment) ([]contributorRow, int, map[uuid.UUID]contributorRow) {
	secs := map[uuid.UUID][]float64{}
	for _, j := range js {
		secs[j.ContributorID] = append(secs[j.ContributorID], j.SubmittedAt.Sub(j.StartedAt).Seconds())
	}
	rows := make([]contributorRow, 0, len(secs))
	for id, s := range secs {
		sort.Float64s(s)
		m := s[len(s)/2]
		if len(s)%2 == 0 {
			m = (s[len(s)/2-1] + s[len(s)/2]) / 2
		}
		rows = append(rows, contributorRow{ID: id, Judgments: len(s), Median: formatSeconds(m)})
	}
	all := make(map[uuid.UUID]contributorRow, len(rows))
	for _, r := range rows {
		all[r.ID] = r
	}
	slices.SortFunc(rows, func(a, b contributorRow) int {
		if a.Judgments != b.Judgments {
			return b.Judgments - a.Judgments
		}
		return strings.Compare(a.ID.String(), b.ID.String())
	})
	more := 0
	if len(rows) > statsTop {
		more = len(rows) - statsTop
		rows = rows[:statsTop]
	}
	return rows, more, all
}

// formatSeconds is a duration in seconds to a tenth ("12.5 s", "3 s").
func formatSeconds(s float64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", s), ".0") + " s"
}

// hoursMinutes is a span as "3 h", "1 h 20 min" or "12 min".
func hoursMinutes(d time.Duration) string {
	m := int(d.Round(time.Minute) / time.Minute)
	switch {
	case m < 60:
		return fmt.Sprintf("%d min", max(m, 1))
	case m%60 == 0:
		return fmt.Sprintf("%d h", m/60)
	default:
		return fmt.Sprintf("%d h %d min", m/60, m%60)
	}
}
