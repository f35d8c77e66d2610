package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/task"
)

// unitJudgments is how many of a unit's judgments its page lists, newest
// first (a regular unit has its target's few; a golden unit is judged by
// everyone who meets it).
const unitJudgments = 100

// unitData is a unit page's: the unit, its pool, its judgments, each
// with whether it agreed with the result.
type unitData struct {
	Unit      *docket.Unit
	Pool      *docket.Pool // nil when it could not be read
	Judgments []unitJudgment
	More      bool // more judgments than listed
	// Clean and Tainted count the listed judgments of a regular unit that
	// count toward its result, and the tainted ones excluded from it.
	Clean, Tainted int
	// Audits are the changes of the unit's finalized result by repairs,
	// newest first (unit_audit.go).
	Audits      []unitAudit
	AuditsError string
}

// unitJudgment is one judgment with its contributor's name and, per
// compared field (choice, rating, multi_choice), whether it matches the
// unit's result.
type unitJudgment struct {
	*docket.Judgment
	Name     string
	Seconds  string
	Agrees   []string // fields that match the result
	Disagree []string // fields that do not
	// Agreed says whether the judgment agreed with the result by the rule
	// of the finalization (quality.Agreements, what unit.finalized
	// carries): "agreed", "disagreed", or "" when unknown (no result, a
	// tainted or test judgment, a task with no field to compare).
	Agreed string
}

func (h *Handler) unitDetail(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.renderError(w, r, http.StatusNotFound, "Not a unit id: "+r.PathValue("id"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), statsTimeout)
	defer cancel()
	u, err := h.client.UnitGet(ctx, id)
	if errors.Is(err, docket.ErrNotFound) {
		h.renderError(w, r, http.StatusNotFound, "No unit "+id.String()+".")
		return
	}
	if err != nil {
		h.renderFailure(w, r, "Reading the unit failed", err)
		return
	}
	js, err := h.client.JudgmentPage(ctx, docket.JudgmentPageParams{UnitID: id, Limit: unitJudgments + 1})
	if err != nil {
		h.renderFailure(w, r, "Listing the judgments failed", err)
		return
	}
	d := &unitData{Unit: u}
	if len(js) > unitJudgments {
		js, d.More = js[:unitJudgments], true
	}
	var fields []task.Field
	if p, err := h.client.PoolGet(ctx, u.PoolID); err == nil {
		d.Pool = p
		if ct, err := h.client.CompiledTask(ctx, p.Task, p.TaskVersion); err == nil {
			fields = ct.Fields
		}
	}
	var result map[string]any
	if len(u.Result) > 0 {
		_ = json.Unmarshal(u.Result, &result)
	}
	names := map[uuid.UUID]string{}
	for _, j := range js {
		if _, ok := names[j.ContributorID]; !ok {
			names[j.ContributorID] = ""
			if c, err := h.client.ContributorGet(ctx, j.ContributorID); err == nil {
				names[j.ContributorID] = c.Name
			}
		}
		uj := unitJudgment{Judgment: j, Name: names[j.ContributorID], Seconds: formatSeconds(j.SubmittedAt.Sub(j.StartedAt).Seconds())}
		var data map[string]any
		if result != nil && json.Unmarshal(j.Data, &data) == nil {
			for _, f := range fields {
				if f.Kind != task.KindChoice && f.Kind != task.KindRating && f.Kind != task.KindMultiChoice {
					continue
				}
				want, ok1 := result[f.Name]
				got, ok2 := data[f.Name]
				switch {
				case !ok1 || !ok2:
				case sameAnswer(got, want, f.Kind == task.KindMultiChoice):
					uj.Agrees = append(uj.Agrees, f.Name)
				default:
					uj.Disagree = append(uj.Disagree, f.Name)
				}
			}
		}
		d.Judgments = append(d.Judgments, uj)
	}
	h.unitQuality(ctx, d)
	h.renderPage(w, r, "unit", "Unit "+id.String(), d)
}

// TrustText is the contributor's trust when the judgment came in, "—"
// when none was known.
func (j unitJudgment) TrustText() string { return fraction(j.Trust, "%.2f") }

// ConfidenceText is the unit's confidence, "" when it has none.
func (d *unitData) ConfidenceText() string {
	if d.Unit == nil || d.Unit.Confidence == nil {
		return ""
	}
	return fraction(d.Unit.Confidence, "%.3f")
}

func fraction(v *float64, format string) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf(format, *v)
}
