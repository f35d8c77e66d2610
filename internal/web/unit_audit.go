package web

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/quality"
)

// unitAudits is how many of a unit's audit records its page lists, newest
// first.
const unitAudits = 100

// unitAudit is one change of a unit's finalized result by a repair.
type unitAudit struct {
	*docket.UnitAudit
	CauseName string // the contributor whose flag caused it
}

// OldText and NewText are the results, compact; "none" for no result (a
// reopened unit).
func (a unitAudit) OldText() string { return resultText(a.Old) }
func (a unitAudit) NewText() string { return resultText(a.New) }

// OldConfidence and NewConfidence are the confidences, "—" for none.
func (a unitAudit) OldConfidence() string { return fraction(a.Old.Confidence, "%.3f") }
func (a unitAudit) NewConfidence() string { return fraction(a.New.Confidence, "%.3f") }

// Verb is what happened to the cause: "flagged" or "un-flagged".
func (a unitAudit) Verb() string {
	if a.Cause.Untaint {
		return "un-flagged"
	}
	return "flagged"
}

func resultText(r quality.Result) string {
	if r.Value == nil {
		return "none"
	}
	var v any
	if json.Unmarshal(r.Value, &v) != nil {
		return string(r.Value)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return string(r.Value)
	}
	return string(b)
}

// unitQuality adds quality control's part of the unit page: the clean and
// tainted judgments, whether each clean one agreed with the result (the
// finalization's rule), and the audit trail of the result.
func (h *Handler) unitQuality(ctx context.Context, d *unitData) {
	u := d.Unit
	var judged []quality.Judged
	for _, j := range d.Judgments {
		switch {
		case j.Golden || u.Golden:
		case j.Tainted:
			d.Tainted++
		default:
			d.Clean++
			judged = append(judged, quality.Judged{ID: j.ID, Data: j.Data})
		}
	}
	if len(u.Result) > 0 && d.Pool != nil && len(judged) > 0 {
		if ct, err := h.client.CompiledTask(ctx, d.Pool.Task, d.Pool.TaskVersion); err == nil {
			if as, err := quality.Agreements(ct, u.Result, judged); err == nil {
				agreed := make(map[uuid.UUID]bool, len(as))
				for _, a := range as {
					agreed[a.JudgmentID] = a.Agreed
				}
				for i := range d.Judgments {
					if a, ok := agreed[d.Judgments[i].ID]; ok {
						d.Judgments[i].Agreed = map[bool]string{true: "agreed", false: "disagreed"}[a]
					}
				}
			}
		}
	}
	audits, err := h.client.UnitAudits(ctx, u.ID)
	if err != nil {
		d.AuditsError = fmt.Sprintf("the audit trail could not be read: %v", err)
		return
	}
	names := map[uuid.UUID]string{}
	for i := len(audits) - 1; i >= 0 && len(d.Audits) < unitAudits; i-- {
		a := audits[i]
		who := a.Cause.ContributorID
		if _, ok := names[who]; !ok {
			names[who] = ""
			if c, err := h.client.ContributorGet(ctx, who); err == nil {
				names[who] = c.Name
			}
		}
		d.Audits = append(d.Audits, unitAudit{UnitAudit: a, CauseName: names[who]})
	}
}
