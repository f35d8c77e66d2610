package web

import (
	"strings"

	"github.com/docket-run/docket"
)

// barChart is a horizontal stacked bar chart of jobs per queue by state,
// laid out here and drawn by the template as SVG: every coordinate is a
// number computed on the server, colours come from CSS classes (the CSP
// allows no inline style).
type barChart struct {
	Width, Height int
	Bars          []bar
	Legend        []legendItem
}

type bar struct {
	Label    string
	Y        int // top of the bar
	LabelY   int
	Total    int
	TotalX   int
	Segments []segment
}

type segment struct {
	Class string // "st-queued" …
	State docket.JobState
	X, W  int
	Count int
}

type legendItem struct {
	Class string
	State docket.JobState
	X     int
}

// Layout of the chart, in SVG user units.
const (
	chartWidth  = 720
	chartLabelW = 160 // queue names left of the bars
	chartTotalW = 80  // totals right of the bars
	chartBarH   = 18
	chartGap    = 8
	chartLegend = 28 // legend row at the top
)

func stateClass(st docket.JobState) string { return "st-" + strings.ToLower(string(st)) }

// drawBars lays out one bar per queue (states: the segments, in order), each segment as wide as its share
// of the largest queue's total (a queue with jobs gets at least 1 unit per
// non-empty state so a small count stays visible).
func drawBars(queues []queueRow, states []docket.JobState) *barChart {
	c := &barChart{Width: chartWidth, Height: chartLegend + max(1, len(queues))*(chartBarH+chartGap)}
	for i, st := range states {
		c.Legend = append(c.Legend, legendItem{Class: stateClass(st), State: st, X: i * (chartWidth / len(states))})
	}
	most := 0
	for _, q := range queues {
		most = max(most, q.Total)
	}
	span := chartWidth - chartLabelW - chartTotalW
	for i, q := range queues {
		y := chartLegend + i*(chartBarH+chartGap)
		b := bar{Label: q.Name, Y: y, LabelY: y + chartBarH - 4, Total: q.Total}
		x := chartLabelW
		for _, st := range states {
			n := q.Counts[st]
			if n == 0 {
				continue
			}
			w := max(1, n*span/most)
			b.Segments = append(b.Segments, segment{Class: stateClass(st), State: st, X: x, W: w, Count: n})
			x += w
		}
		b.TotalX = x + 6
		c.Bars = append(c.Bars, b)
	}
	return c
}
