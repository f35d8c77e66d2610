package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/quality"
)

// The quality panels (docs/web.md): the pool page's contributors with
// their trust, flags, test questions and speed, and the page of one
// contributor in a pool with their trust history and recent judgments.
// Every read is bounded: a page of the pool's contributors' quality states
// (Client.PoolContributors, each one's judgments counted up to a cap),
// one state, at most quality.MaxTrustHistory history entries, a page of
// judgments.

const (
	qualityTop          = 20    // contributors listed on the pool page
	qualityJudgmentCap  = 1000  // each one's judgments counted up to this
	qualityCountCap     = 10000 // the pool's contributors counted up to this
	contributorRecent   = 50    // judgments on a contributor's page
	contributorHistoryN = 20    // history entries listed in the table
)

// qualityPanel is the pool page's contributors panel.
type qualityPanel struct {
	Rows []qualityRow
	// More contributors than listed ("" for none), "n" or "n+".
	More string
	// Flagged of the listed.
	Flagged int
	// MinTrust, MinTests and Certainty are the pool's thresholds;
	// SettingsError says they could not be read.
	MinTrust      float64
	MinTests      int
	Certainty     float64
	SettingsError string
	// settings decide which rows are Low (the trust rule).
	settings quality.Settings
}

// qualityRow is one contributor of the panel.
type qualityRow struct {
	ID        uuid.UUID
	Name      string
	Known     bool   // the pool keeps a quality state of them
	Judgments string // counted up to the cap ("1,000+"), or of the sample
	Sampled   bool   // Judgments counts the sample only
	Median    string // from the sample, "—" when not in it
	quality.Trust
	Scored     bool // answered a test question: Trust.Value is theirs
	Low        bool // trust below the pool's minimum after its minimum of tests
	Flagged    bool
	Check      string
	Reason     string
	FlaggedAt  time.Time
	ForgivenAt time.Time
	TooFast    int
	flagSort   int
}

// TrustText is the trust as shown: the value, "0.500 (no test yet)" at
// the prior.
func (r qualityRow) TrustText() string {
	if !r.Scored {
		return fmt.Sprintf("%.3f (no test yet)", r.Value)
	}
	return fmt.Sprintf("%.3f", r.Value)
}

// TestsText is "3 of 4 right (75%)", or "none".
func (r qualityRow) TestsText() string { return testsText(r.TestsCorrect, r.TestsAnswered) }

func testsText(correct, answered int) string {
	if answered == 0 {
		return "none"
	}
	return fmt.Sprintf("%d of %d right (%.0f%%)", correct, answered, 100*float64(correct)/float64(answered))
}

// loadQuality reads the pool's contributors panel: the first qualityTop
// quality states (flagged first, lowest trust next) merged with the
// contributors of the judgments sample that the pool keeps no state of
// yet (when the states are all listed, so that nobody is hidden).
func (h *Handler) loadQuality(ctx context.Context, p *docket.Pool, stats *poolStats) (*qualityPanel, error) {
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	page, err := h.client.PoolContributors(ctx, p.ID, docket.PoolContributorsParams{Limit: qualityTop, JudgmentCap: qualityJudgmentCap, CountCap: qualityCountCap})
	if err != nil {
		return nil, fmt.Errorf("list the contributors: %w", err)
	}
	qp := &qualityPanel{}
	settings, err := quality.Decode(p.Settings)
	if err != nil {
		qp.SettingsError = err.Error()
	}
	qp.MinTrust, qp.MinTests, qp.Certainty, qp.settings = settings.MinTrust, settings.MinTests, settings.Certainty, settings
	var sample map[uuid.UUID]contributorRow
	if stats != nil {
		sample = stats.Sample
	}
	seen := map[uuid.UUID]bool{}
	for _, st := range page.States {
		seen[st.ContributorID] = true
		r := qualityRow{ID: st.ContributorID, Known: true, Judgments: formatCount(st.Judgments, qualityJudgmentCap, st.JudgmentsCapped), Median: "—",
			Trust: st.Trust, Scored: st.Trust.TestsAnswered > 0,
			Flagged: st.Standing.Flagged, Check: string(st.Standing.Check), Reason: st.FlagReason, FlaggedAt: st.FlaggedAt,
			ForgivenAt: st.ForgivenAt, TooFast: st.TooFast}
		if s, ok := sample[st.ContributorID]; ok {
			r.Median = s.Median
		}
		qp.rowLow(&r)
		qp.Rows = append(qp.Rows, r)
	}
	total, capped := page.Contributors, page.ContributorsCapped
	if !capped && total <= len(page.States) {
		for id, s := range sample {
			if seen[id] {
				continue
			}
			r := qualityRow{ID: id, Judgments: thousands(s.Judgments), Sampled: true, Median: s.Median, Trust: quality.NewTrust()}
			qp.Rows = append(qp.Rows, r)
			total++
		}
	}
	for i := range qp.Rows {
		if qp.Rows[i].Flagged {
			qp.Rows[i].flagSort = -1
		}
	}
	slices.SortFunc(qp.Rows, func(a, b qualityRow) int {
		return cmp.Or(cmp.Compare(a.flagSort, b.flagSort), cmp.Compare(a.Value, b.Value), strings.Compare(a.ID.String(), b.ID.String()))
	})
	if len(qp.Rows) > qualityTop {
		qp.Rows = qp.Rows[:qualityTop]
	}
	if more := total - len(qp.Rows); more > 0 || capped {
		qp.More = formatCount(more, qualityCountCap, capped)
	}
	for i := range qp.Rows {
		if qp.Rows[i].Flagged {
			qp.Flagged++
		}
		if c, err := h.client.ContributorGet(ctx, qp.Rows[i].ID); err == nil {
			qp.Rows[i].Name = c.Name
		}
	}
	return qp, nil
}

// rowLow marks a contributor whom the trust rule flags: accuracy below
// the pool's minimum with probability Certainty, after its minimum of
// test questions (quality.Settings.CheckTrust).
func (qp *qualityPanel) rowLow(r *qualityRow) {
	r.Low = qp.settings.CheckTrust(uuid.Nil, r.ID, r.Trust, quality.Standing{}).Flag
}

// contributorData is the page of one contributor in one pool.
type contributorData struct {
	Pool        *docket.Pool
	Contributor *docket.Contributor
	State       *docket.ContributorQuality
	Known       bool // the pool keeps a state of them
	Row         qualityRow
	MinTrust    float64
	MinTests    int
	Certainty   float64
	Chart       *trustChart
	History     []quality.TrustEntry // newest first, at most contributorHistoryN
	HistoryAll  int                  // entries kept (at most quality.MaxTrustHistory)
	Judgments   []contributorJudgment
	More        bool // more judgments than listed
	Tainted     int  // of the listed
	// Message says what a forgiveness did or why it was refused; Errors
	// are the forgive form's problems, each naming its field.
	Message string
	Errors  []string
	// CanForgive: the session may forgive (admin) and the contributor is
	// flagged in the pool.
	CanForgive bool
}

// contributorJudgment is one of the contributor's judgments in the pool.
type contributorJudgment struct {
	*docket.Judgment
	Seconds string
}

// TrustText is the trust recorded with the judgment, "—" when none.
func (j contributorJudgment) TrustText() string { return fraction(j.Trust, "%.2f") }

func (h *Handler) contributorDetail(w http.ResponseWriter, r *http.Request) {
	h.showContributor(w, r, http.StatusOK, "", nil)
}

// showContributor renders the page of a contributor in a pool with status,
// a message and the forgive form's problems (forgive.go).
func (h *Handler) showContributor(w http.ResponseWriter, r *http.Request, status int, message string, problems []string) {
	poolID, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "Not a pool id: "+r.PathValue("id"))
		return
	}
	cID, err := uuid.Parse(r.PathValue("contributor"))
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "Not a contributor id: "+r.PathValue("contributor"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), statsTimeout)
	defer cancel()
	p, err := h.client.PoolGet(ctx, poolID)
	if errors.Is(err, docket.ErrNotFound) {
		h.renderError(w, r, http.StatusNotFound, "No pool "+poolID.String()+".")
		return
	}
	if err != nil {
		h.renderFailure(w, r, "Reading the pool failed", err)
		return
	}
	c, err := h.client.ContributorGet(ctx, cID)
	if errors.Is(err, docket.ErrNotFound) {
		h.renderError(w, r, http.StatusNotFound, "No contributor "+cID.String()+".")
		return
	}
	if err != nil {
		h.renderFailure(w, r, "Reading the contributor failed", err)
		return
	}
	st, err := h.client.ContributorQualityGet(ctx, poolID, cID)
	if err != nil {
		h.renderFailure(w, r, "Reading the contributor's quality failed", err)
		return
	}
	history, err := h.client.TrustHistory(ctx, poolID, cID)
	if err != nil {
		h.renderFailure(w, r, "Reading the trust history failed", err)
		return
	}
	js, err := h.client.JudgmentPage(ctx, docket.JudgmentPageParams{PoolID: poolID, ContributorID: cID, Limit: contributorRecent + 1})
	if err != nil {
		h.renderFailure(w, r, "Listing the judgments failed", err)
		return
	}
	name := c.Name
	if name == "" {
		name = c.ExternalID
	}
	if message == "" {
		message = forgiven(r.URL.Query(), name)
	}
	settings, _ := quality.Decode(p.Settings) // the defaults when they do not decode
	d := &contributorData{Pool: p, Contributor: c, State: st, Known: !st.UpdatedAt.IsZero(), MinTrust: settings.MinTrust, MinTests: settings.MinTests,
		Certainty:  settings.Certainty,
		HistoryAll: len(history), Message: message, Errors: problems,
		CanForgive: st.Standing.Flagged && can(sessionOf(r.Context()).key.Role, accessAdmin)}
	d.Row = qualityRow{ID: cID, Name: c.Name, Known: d.Known, Trust: st.Trust, Scored: st.Trust.TestsAnswered > 0,
		Flagged: st.Standing.Flagged, Check: string(st.Standing.Check), Reason: st.FlagReason, FlaggedAt: st.FlaggedAt,
		ForgivenAt: st.ForgivenAt, TooFast: st.TooFast}
	(&qualityPanel{settings: settings}).rowLow(&d.Row)
	d.Chart = drawTrust(history, settings.MinTrust)
	for i := len(history) - 1; i >= 0 && len(d.History) < contributorHistoryN; i-- {
		d.History = append(d.History, history[i])
	}
	if len(js) > contributorRecent {
		js, d.More = js[:contributorRecent], true
	}
	for _, j := range js {
		if j.Tainted {
			d.Tainted++
		}
		d.Judgments = append(d.Judgments, contributorJudgment{Judgment: j, Seconds: formatSeconds(j.SubmittedAt.Sub(j.StartedAt).Seconds())})
	}
	h.renderPageStatus(w, r, status, "contributor", "Contributor "+name+" in pool "+p.Workflow+"/"+p.Step, d)
}

// trustChart is a contributor's trust history as an SVG line: one point
// per change, evenly spaced, oldest left; trust 0 at the bottom, 1 at the
// top; the pool's minimum trust as a dashed line.
type trustChart struct {
	Width, Height int
	Points        string // the polyline's "x,y x,y …"
	Dots          []trustDot
	MinY          int  // y of the minimum trust
	HasMin        bool // the pool has a minimum trust
	MinText       string
	Ticks         []trustTick // y axis: 0, 0.5, 1
	First, Last   time.Time
	Empty         bool
}

type trustDot struct {
	X, Y  int
	Label string // "2026-11-25 12:00:00Z: 0.750 — test judgment …: right"
	Low   bool   // under the minimum
}

type trustTick struct {
	Y     int
	Label string
}

// Layout of the trust chart, in SVG user units.
const (
	trustW    = 720
	trustH    = 160
	trustLeft = 36 // y-axis labels
	trustTop  = 8
)

// drawTrust lays out the history (oldest first).
func drawTrust(history []quality.TrustEntry, minTrust float64) *trustChart {
	c := &trustChart{Width: trustW, Height: trustH + 2*trustTop, Empty: len(history) == 0}
	y := func(v float64) int { return trustTop + int((1-min(max(v, 0), 1))*trustH+0.5) }
	for _, v := range []float64{0, 0.5, 1} {
		c.Ticks = append(c.Ticks, trustTick{Y: y(v), Label: fmt.Sprintf("%.1f", v)})
	}
	if minTrust > 0 {
		c.HasMin, c.MinY, c.MinText = true, y(minTrust), fmt.Sprintf("minimum %.2f", minTrust)
	}
	if c.Empty {
		return c
	}
	c.First, c.Last = history[0].At, history[len(history)-1].At
	span := trustW - trustLeft - 12
	var pts []string
	for i, e := range history {
		x := trustLeft + 6
		if len(history) > 1 {
			x += i * span / (len(history) - 1)
		} else {
			x += span / 2
		}
		d := trustDot{X: x, Y: y(e.Value), Low: minTrust > 0 && e.Value < minTrust,
			Label: fmt.Sprintf("%s: %.3f (%s) — %s", e.At.UTC().Format("2006-01-02 15:04:05Z"), e.Value, testsText(e.TestsCorrect, e.TestsAnswered), e.Reason)}
		c.Dots = append(c.Dots, d)
		pts = append(pts, fmt.Sprintf("%d,%d", d.X, d.Y))
	}
	c.Points = strings.Join(pts, " ")
	return c
}
