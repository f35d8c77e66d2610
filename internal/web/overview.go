package web

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/docket-run/docket"
)

// The overview reads the jobs with bounded queries only (Client.Overview,
// issue 15): no count over the jobs table, whatever its size.
const (
	// overviewCap: a queue's QUEUED jobs and the DEAD jobs are counted up
	// to overviewCap+1 ("10,000+"); at most overviewCap+1 RUNNING and as
	// many RETRY jobs are read over all queues.
	overviewCap = 10_000
	// overviewFinishedCap: at most this many jobs finished in the last
	// hour are read, newest first, for the per-minute chart.
	overviewFinishedCap = 10_000
	// overviewLatencyOf: the wait before the start of the newest this
	// many finished jobs.
	overviewLatencyOf = 100
	// overviewWindow: the per-minute chart's span.
	overviewWindow = time.Hour
	// overviewCacheFor: one overview read serves every view for this long
	// (the live refresh is at most once a second per view).
	overviewCacheFor = time.Second
)

// overviewCache holds the newest overview read, shared by every view and
// the queues page.
type overviewCache struct {
	mu   sync.Mutex
	read time.Time // when it was read, by the wall clock; zero: never
	at   time.Time // when it was read, by Config.Now (shown)
	o    *docket.JobOverview
	err  error
}

// forget drops the cached read: the next view reads again.
func (c *overviewCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.read = time.Time{}
}

// jobOverview returns the overview read at most overviewCacheFor ago.
func (h *Handler) jobOverview(ctx context.Context) (*docket.JobOverview, time.Time, error) {
	c := &h.ov
	c.mu.Lock()
	defer c.mu.Unlock()
	// The cache's age is real time (a rate limit on the database), whatever
	// Config.Now says; the window and the time shown follow Config.Now.
	if !c.read.IsZero() && time.Since(c.read) < overviewCacheFor {
		return c.o, c.at, c.err
	}
	now := h.cfg.Now()
	// The read serves every view for a second, so the request that happens
	// to make it does not cancel it: a browser gone meanwhile would leave
	// its "context canceled" cached for the others to show (a 500 on the
	// queues page). It stays bounded by its own timeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	c.o, c.err = h.cfg.Overview(ctx, &docket.OverviewParams{
		Cap: overviewCap, Since: now.Add(-overviewWindow), FinishedCap: overviewFinishedCap, LatencyOf: overviewLatencyOf,
	})
	c.read, c.at = time.Now(), now
	return c.o, c.at, c.err
}

// overviewData is the overview's.
type overviewData struct {
	Queues  []queueRow
	Dead    string // "10,000+" above the cap
	Chart   *barChart
	Minutes *minuteChart
	// Completed and Failed: SUCCESS and DEAD jobs over the chart's span;
	// PerSecond: Completed per second over it.
	Completed, Failed int
	PerSecond         string
	Waits             int // jobs the latency figures come from
	WaitP50, WaitP95  string
	WaitMax           string
	Cap               string
	At                time.Time
	Error             string // the figures could not be read
	Refresh           int    // seconds between polls
	// Bus is the event bus's health (Config.BusHealth): "" when the
	// dashboard knows no bus, "up", or what is wrong.
	Bus string
}

// queueRow is one queue's depth, each figure as shown ("10,000+" above
// the cap, "12+" when the state's read was cut), and Counts for the
// chart.
type queueRow struct {
	Name                   string
	Paused                 bool
	Queued, Running, Retry string
	Counts                 map[docket.JobState]int
	Total                  int
}

// depthStates are the states of a queue's depth.
var depthStates = []docket.JobState{docket.JobStateQueued, docket.JobStateRunning, docket.JobStateRetry}

// overviewRefresh is the polling period of the overview panel.
const overviewRefresh = 5

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	h.renderPage(w, r, "overview", "Overview", h.overviewData(r.Context()))
}

// overviewPanel is the part of the overview htmx fetches every
// overviewRefresh seconds.
func (h *Handler) overviewPanel(w http.ResponseWriter, r *http.Request) {
	h.render(w, http.StatusOK, "overview", "panel", &view{User: userOf(sessionOf(r.Context())), Data: h.overviewData(r.Context())})
}

func (h *Handler) overviewData(ctx context.Context) *overviewData {
	d := &overviewData{Refresh: overviewRefresh, Bus: h.busHealth(), Cap: formatCount(overviewCap, overviewCap, false)}
	o, at, err := h.jobOverview(ctx)
	d.At = at
	if err != nil {
		d.Error = fmt.Sprintf("Reading the jobs failed: %v", err)
		d.Chart = drawBars(nil, depthStates)
		return d
	}
	d.Queues = queueRows(o)
	d.Dead = formatCount(o.Dead, overviewCap, false)
	d.Chart = drawBars(d.Queues, depthStates)
	d.Minutes = drawMinutes(o, at)
	for _, m := range o.Finished {
		d.Completed += m.Succeeded
		d.Failed += m.Dead
	}
	span := at.Sub(o.FinishedFrom)
	if span > 0 {
		d.PerSecond = strconv.FormatFloat(float64(d.Completed)/span.Seconds(), 'f', 2, 64)
	}
	if n := len(o.Waits); n > 0 {
		ws := slices.Clone(o.Waits)
		slices.Sort(ws)
		d.Waits = n
		d.WaitP50 = roundWait(ws[(n-1)/2])
		d.WaitP95 = roundWait(ws[(n-1)*95/100])
		d.WaitMax = roundWait(ws[n-1])
	}
	return d
}

// queueRows turns o's depths into rows, by name.
func queueRows(o *docket.JobOverview) []queueRow {
	var rows []queueRow
	for _, q := range o.Queues {
		rows = append(rows, queueRow{
			Name: q.Name, Paused: q.Paused,
			Queued:  formatCount(q.Queued, overviewCap, false),
			Running: formatCount(q.Running, overviewCap, o.RunningCut),
			Retry:   formatCount(q.Retry, overviewCap, o.RetryCut),
			Counts:  map[docket.JobState]int{docket.JobStateQueued: q.Queued, docket.JobStateRunning: q.Running, docket.JobStateRetry: q.Retry},
			Total:   q.Queued + q.Running + q.Retry,
		})
	}
	return rows
}

// formatCount writes n with thousands separators: "10,000+" when n is
// above limit, "n+" when the read it comes from was cut (a lower bound).
func formatCount(n, limit int, cut bool) string {
	if n > limit {
		return thousands(limit) + "+"
	}
	if cut {
		return thousands(n) + "+"
	}
	return thousands(n)
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// roundWait writes a wait to a useful precision.
func roundWait(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}

// minuteChart is the jobs finished per minute over the last hour: one
// column a minute, SUCCESS stacked on DEAD, drawn as SVG by the template.
type minuteChart struct {
	Width, Height int
	Cols          []minuteCol
	Max           int
	Cut           bool // some minutes are older than the jobs read
}

type minuteCol struct {
	X, W                int
	Label               string // "12:34" (UTC)
	Tick                bool
	Unknown             bool // before the oldest job read: not counted
	Succeeded, Dead     int
	SuccY, SuccH, DeadY int
	DeadH               int
}

const (
	minuteChartW = 720
	minuteChartH = 140
	minuteBarsH  = 110 // the bars' area; the ticks below
)

// drawMinutes lays out the last overviewWindow of o.Finished ending at now.
func drawMinutes(o *docket.JobOverview, now time.Time) *minuteChart {
	n := int(overviewWindow / time.Minute)
	c := &minuteChart{Width: minuteChartW, Height: minuteChartH, Cut: o.FinishedCut}
	first := now.UTC().Truncate(time.Minute).Add(-time.Duration(n-1) * time.Minute)
	by := map[time.Time]*docket.FinishedMinute{}
	for _, m := range o.Finished {
		by[m.At.UTC()] = m
		c.Max = max(c.Max, m.Succeeded+m.Dead)
	}
	w := minuteChartW / n
	for i := range n {
		at := first.Add(time.Duration(i) * time.Minute)
		col := minuteCol{X: i * w, W: w - 1, Label: at.Format("15:04"), Tick: i%10 == 0}
		if o.FinishedCut && !at.Add(time.Minute).After(o.FinishedFrom) {
			col.Unknown, col.SuccY, col.SuccH = true, 0, minuteBarsH
		} else if m := by[at]; m != nil && c.Max > 0 {
			col.Succeeded, col.Dead = m.Succeeded, m.Dead
			col.DeadH = m.Dead * minuteBarsH / c.Max
			if m.Dead > 0 {
				col.DeadH = max(1, col.DeadH)
			}
			col.SuccH = m.Succeeded * minuteBarsH / c.Max
			if m.Succeeded > 0 {
				col.SuccH = max(1, col.SuccH)
			}
			col.DeadY = minuteBarsH - col.DeadH
			col.SuccY = col.DeadY - col.SuccH
		}
		c.Cols = append(c.Cols, col)
	}
	return c
}
