package workflow

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/flow"
)

// judge is one element of CEL's judges.<step> (flow/expr/judges.go).
type judge struct {
	ContributorID uuid.UUID `json:"contributorId"`
	Trust         *float64  `json:"trust"`
	Prior         int       `json:"prior"`
}

// celInput is the document step name's expressions are evaluated on:
// flow.StepInput over its ancestors, plus "judges" with the clean
// judgments of each human step its expressions name as judges.<step>
// (none for a step that was not answered: skipped, failed). A document
// that cannot be built is a *stepFailure (the step fails); any other
// error is the store's.
func (adv *advance) celInput(ctx context.Context, name string, recs map[string]*flow.Record, item *flow.Item) ([]byte, error) {
	in, err := flow.StepInput(adv.run.Input, recs, adv.c.g.Ancestors(name), item)
	if err != nil {
		return nil, &stepFailure{err.Error()}
	}
	steps := adv.c.wf.Judges(name)
	if len(steps) == 0 {
		return in, nil
	}
	judges := map[string][]judge{}
	for _, step := range steps {
		list := []judge{}
		if st := adv.instance(step, 0); st != nil && st.State == flow.StepSucceeded && st.UnitID != uuid.Nil {
			js, err := adv.tx.UnitJudges(ctx, st.UnitID)
			if err != nil {
				return nil, err
			}
			for _, j := range js {
				list = append(list, judge{ContributorID: j.ContributorID, Trust: j.Trust, Prior: j.Prior})
			}
		}
		judges[step] = list
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(in, &doc); err != nil {
		return nil, &stepFailure{fmt.Sprintf("step %q: %v", name, err)}
	}
	b, err := json.Marshal(judges)
	if err != nil {
		return nil, &stepFailure{fmt.Sprintf("step %q: %v", name, err)}
	}
	doc["judges"] = b
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, &stepFailure{fmt.Sprintf("step %q: %v", name, err)}
	}
	return out, nil
}
