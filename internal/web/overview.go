package web

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/docket-run/docket"
)

// overviewData is the overview's: counts per queue and state from the
// cached counts (Config.Counts), and the bar chart drawn from them.
type overviewData struct {
	States  []docket.JobState
	Queues  []queueRow
	Totals  map[docket.JobState]int
	Dead    int
	Chart   *barChart
	At      time.Time
	Error   string // the counts could not be read
	Refresh int    // seconds between polls
	// Bus is the event bus's health (Config.BusHealth): "" when the
	// dashboard knows no bus, "up", or what is wrong.
	Bus string
}

type queueRow struct {
	Name   string
	Paused bool
	Counts map[docket.JobState]int
	Total  int
}

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
	d := &overviewData{States: docket.JobStates(), Totals: map[docket.JobState]int{}, At: h.cfg.Now(), Refresh: overviewRefresh, Bus: h.busHealth()}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	queues, err := h.cfg.Counts(ctx)
	if err != nil {
		d.Error = fmt.Sprintf("Counting jobs failed: %v", err)
		d.Chart = drawBars(nil)
		return d
	}
	for _, q := range queues {
		row := queueRow{Name: q.Name, Paused: q.Paused, Counts: map[docket.JobState]int{}}
		for st, n := range q.Counts {
			row.Counts[st] = n
			row.Total += n
			d.Totals[st] += n
		}
		d.Queues = append(d.Queues, row)
	}
	slices.SortFunc(d.Queues, func(a, b queueRow) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	d.Dead = d.Totals[docket.JobStateDead]
	d.Chart = drawBars(d.Queues)
	return d
}
