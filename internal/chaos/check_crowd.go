package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
)

// Kinds of violation of the human work invariants (DESIGN §6).
const (
	// KindSlotOverAssigned: a unit's slots_taken is not the count of its
	// ACTIVE and SUBMITTED assignments, or they exceed its
	// judgments_per_unit (a slot handed out twice, or one lost).
	KindSlotOverAssigned = "slot_over_assigned"
	// KindJudgmentsOverTarget: a unit holds more untainted judgments than
	// its target. Tainted judgments (their contributor flagged by quality
	// control, docs/quality.md) do not count: the unit's target grows by
	// them so that it still gets the clean judgments it wanted. Golden
	// units have no target.
	KindJudgmentsOverTarget = "judgments_over_target"
	// KindJudgmentCount: a unit's judgment_count (which decides when it
	// is finalized) differs from the judgments stored for it.
	KindJudgmentCount = "judgment_count"
	// KindJudgmentUntied: a judgment not tied to exactly one SUBMITTED
	// assignment of its own unit and contributor, or a SUBMITTED
	// assignment without its judgment.
	KindJudgmentUntied = "judgment_untied"
	// KindLateJudgment: a judgment stored after its assignment had
	// expired (a late submission must be refused, 409).
	KindLateJudgment = "late_judgment"
	// KindContributorTwice: one contributor holds two assignments, or two
	// judgments, of one unit.
	KindContributorTwice = "contributor_twice"
	// KindExpiredAssignment: an assignment still ACTIVE although its
	// lease ran out longer ago than the reap window (the reaper must have
	// freed its slot).
	KindExpiredAssignment = "expired_assignment"
	// KindHumanStepCompletion: a FINALIZED unit's step instance did not
	// complete exactly once (not SUCCEEDED, or the outbox holds other than
	// one RUNNING→SUCCEEDED for its generation), the run did not advance
	// past it (a child whose parents are all done was never released), or
	// a human step SUCCEEDED while its unit is not FINALIZED.
	KindHumanStepCompletion = "human_step_completion"
	// KindHumanStepOutput: a finalized unit's result is not its step's
	// output, or not what a child step's job was given as that output.
	// A unit whose result a repair changed after its step completed (an
	// audit record and unit.result_changed: the run is not rewound) is
	// compared by its first result, the old result of its first audit.
	KindHumanStepOutput = "human_step_output"

	// Quality control's invariants (docs/quality.md; the chaos run's
	// spammers are flagged, their judgments tainted and their units
	// repaired while processes are killed, and an admin forgives some).

	// KindFlaggedUntainted: a contributor flagged in a pool has a
	// judgment there that is not tainted (a flag taints every judgment
	// of theirs in the pool, and a judgment they submit after it is
	// tainted at once).
	KindFlaggedUntainted = "flagged_untainted"
	// KindDecidedOnTainted: a FINALIZED regular unit has fewer clean
	// judgments than its pool's judgments per unit: it was decided with
	// a judgment tainted since, and the repair neither recomputed it on
	// enough clean ones nor reopened it.
	KindDecidedOnTainted = "decided_on_tainted"
	// KindFlaggedTake: a contributor holds an assignment in a pool that
	// started while they were flagged there — later than a flag (plus
	// Expectations.FlagWindow: a take that read their state just before
	// the flag committed may start a moment after the flag's time) and
	// before the forgiveness that ended it, if any (less the same
	// window). The flagged periods come from the outbox's events, so a
	// take during a flag since forgiven is caught too.
	KindFlaggedTake = "flagged_take"
	// KindQualityEvents: the outbox's contributor.flagged and
	// contributor.unflagged events of a contributor in a pool do not
	// alternate from a flag, or do not end as their state does (flagged:
	// one flag more than un-flags; not flagged: as many); or a unit's
	// unit.result_changed events are not as many as its audit rows (one
	// of each per change of a finalized result). A flag, a forgiveness
	// or a repair written twice after a crash shows here.
	KindQualityEvents = "quality_events"
)

// Quality control's events, as the outbox names them.
const (
	eventFlagged       = "contributor.flagged"
	eventUnflagged     = "contributor.unflagged"
	eventResultChanged = "unit.result_changed"
)

// CrowdSnapshot is what the checker reads of the human work tables.
type CrowdSnapshot struct {
	Units       []*CrowdUnit
	Assignments []*crowd.Assignment
	Judgments   []*crowd.Judgment
	// PoolSteps names the workflow step of each pool.
	PoolSteps map[uuid.UUID]string
	// PoolMin is each pool's judgments per unit (its minimum: what a
	// unit needs of clean judgments to be finalized).
	PoolMin map[uuid.UUID]int
	// Standings are the contributors' quality states in pools
	// (docket_pool_contributors): flagged or not, since when.
	Standings []*CrowdStanding
	// QualityEvents are the outbox's contributor.flagged,
	// contributor.unflagged and unit.result_changed events, in outbox
	// order.
	QualityEvents []QualityEvent
}

// CrowdStanding is a contributor's standing in a pool.
type CrowdStanding struct {
	PoolID, ContributorID uuid.UUID
	Flagged               bool
	FlaggedAt             time.Time // zero when not flagged
}

// QualityEvent is one quality control event of the outbox: a flag or an
// un-flag (PoolID, ContributorID) or a changed result (PoolID, UnitID).
type QualityEvent struct {
	ID                            int64 // the outbox row
	Type                          string
	PoolID, ContributorID, UnitID uuid.UUID
	At                            time.Time // the outbox row's created_at
}

// CrowdUnit is a unit as the checker reads it.
type CrowdUnit struct {
	ID, PoolID, RunID uuid.UUID
	StepIndex         int
	State             crowd.UnitState
	Golden            bool
	SlotsTaken        int
	JudgmentsPerUnit  int
	JudgmentCount     int
	Result            json.RawMessage
	// Repaired: quality control changed the unit's result after it was
	// first finalized (docket_unit_audits); FirstResult is the result it
	// was first finalized with — what its run went on with, since a run
	// is not rewound (docs/quality.md).
	Repaired    bool
	FirstResult json.RawMessage
	// Audits is how many audit rows the unit has.
	Audits int
}

// stepResult is the result a unit's step completed with: its first
// result when a repair changed it since.
func (u *CrowdUnit) stepResult() json.RawMessage {
	if u.Repaired {
		return u.FirstResult
	}
	return u.Result
}

// LoadCrowd reads every unit, assignment and judgment of a docket
// database, PostgreSQL or SQLite (crowdcheck.Open opens either), straight
// from the tables: the store has no listing of every assignment, and the
// checker must see exactly what is stored.
func LoadCrowd(ctx context.Context, db *sql.DB) (*CrowdSnapshot, error) {
	s := &CrowdSnapshot{PoolSteps: map[uuid.UUID]string{}, PoolMin: map[uuid.UUID]int{}}
	err := queryRows(ctx, db, `SELECT id, step, judgments_per_unit FROM docket_pools`, func(sc scanner) error {
		var id, step string
		var jpu int
		if err := sc.Scan(&id, &step, &jpu); err != nil {
			return err
		}
		pid, err := uuid.Parse(id)
		s.PoolSteps[pid], s.PoolMin[pid] = step, jpu
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read pools: %w", err)
	}
	err = queryRows(ctx, db, `SELECT id, pool_id, run_id, coalesce(step_index, 0), state,
			CASE WHEN golden THEN 1 ELSE 0 END, slots_taken, judgments_per_unit, judgment_count, result
		FROM docket_units ORDER BY id`, func(sc scanner) error {
		u := &CrowdUnit{}
		var id, pool string
		var run, result sql.NullString
		var golden int
		if err := sc.Scan(&id, &pool, &run, &u.StepIndex, &u.State, &golden, &u.SlotsTaken, &u.JudgmentsPerUnit, &u.JudgmentCount, &result); err != nil {
			return err
		}
		u.Golden = golden != 0
		if result.Valid {
			u.Result = json.RawMessage(result.String)
		}
		var err error
		if u.ID, err = uuid.Parse(id); err != nil {
			return err
		}
		if u.PoolID, err = uuid.Parse(pool); err != nil {
			return err
		}
		if run.Valid {
			if u.RunID, err = uuid.Parse(run.String); err != nil {
				return err
			}
		}
		s.Units = append(s.Units, u)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read units: %w", err)
	}
	byID := make(map[uuid.UUID]*CrowdUnit, len(s.Units))
	for _, u := range s.Units {
		byID[u.ID] = u
	}
	err = queryRows(ctx, db, `SELECT unit_id, old_result FROM docket_unit_audits ORDER BY unit_id, id`, func(sc scanner) error {
		var id string
		var old sql.NullString
		if err := sc.Scan(&id, &old); err != nil {
			return err
		}
		uid, err := uuid.Parse(id)
		if u := byID[uid]; err == nil && u != nil {
			u.Audits++
			if !u.Repaired {
				u.Repaired = true
				if old.Valid {
					u.FirstResult = json.RawMessage(old.String)
				}
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read unit audits: %w", err)
	}
	if err := s.loadQuality(ctx, db); err != nil {
		return nil, err
	}
	err = queryRows(ctx, db, `SELECT id, unit_id, pool_id, contributor_id, state, started_at, expires_at
		FROM docket_assignments ORDER BY id`, func(sc scanner) error {
		a := &crowd.Assignment{}
		var id, unit, pool, who string
		var started, expires any
		if err := sc.Scan(&id, &unit, &pool, &who, &a.State, &started, &expires); err != nil {
			return err
		}
		return parseAll(
			func() (err error) { a.ID, err = uuid.Parse(id); return },
			func() (err error) { a.UnitID, err = uuid.Parse(unit); return },
			func() (err error) { a.PoolID, err = uuid.Parse(pool); return },
			func() (err error) { a.ContributorID, err = uuid.Parse(who); return },
			func() (err error) { a.StartedAt, err = dbTime(started); return },
			func() (err error) { a.ExpiresAt, err = dbTime(expires); return },
			func() error { s.Assignments = append(s.Assignments, a); return nil },
		)
	})
	if err != nil {
		return nil, fmt.Errorf("read assignments: %w", err)
	}
	err = queryRows(ctx, db, `SELECT id, assignment_id, unit_id, pool_id, contributor_id,
			CASE WHEN golden THEN 1 ELSE 0 END, CASE WHEN tainted THEN 1 ELSE 0 END, submitted_at
		FROM docket_judgments ORDER BY id`, func(sc scanner) error {
		j := &crowd.Judgment{}
		var id, asg, unit, pool, who string
		var golden, tainted int
		var submitted any
		if err := sc.Scan(&id, &asg, &unit, &pool, &who, &golden, &tainted, &submitted); err != nil {
			return err
		}
		j.Golden, j.Tainted = golden != 0, tainted != 0
		return parseAll(
			func() (err error) { j.ID, err = uuid.Parse(id); return },
			func() (err error) { j.AssignmentID, err = uuid.Parse(asg); return },
			func() (err error) { j.UnitID, err = uuid.Parse(unit); return },
			func() (err error) { j.PoolID, err = uuid.Parse(pool); return },
			func() (err error) { j.ContributorID, err = uuid.Parse(who); return },
			func() (err error) { j.SubmittedAt, err = dbTime(submitted); return },
			func() error { s.Judgments = append(s.Judgments, j); return nil },
		)
	})
	if err != nil {
		return nil, fmt.Errorf("read judgments: %w", err)
	}
	return s, nil
}

// loadQuality reads the contributors' standings and quality control's
// events.
func (s *CrowdSnapshot) loadQuality(ctx context.Context, db *sql.DB) error {
	err := queryRows(ctx, db, `SELECT pool_id, contributor_id, CASE WHEN flagged THEN 1 ELSE 0 END, flagged_at
		FROM docket_pool_contributors ORDER BY pool_id, contributor_id`, func(sc scanner) error {
		st := &CrowdStanding{}
		var pool, who string
		var flagged int
		var at any
		if err := sc.Scan(&pool, &who, &flagged, &at); err != nil {
			return err
		}
		st.Flagged = flagged != 0
		return parseAll(
			func() (err error) { st.PoolID, err = uuid.Parse(pool); return },
			func() (err error) { st.ContributorID, err = uuid.Parse(who); return },
			func() (err error) {
				if at != nil {
					st.FlaggedAt, err = dbTime(at)
				}
				return
			},
			func() error { s.Standings = append(s.Standings, st); return nil },
		)
	})
	if err != nil {
		return fmt.Errorf("read quality states: %w", err)
	}
	err = queryRows(ctx, db, `SELECT id, event_type, data, created_at FROM docket_outbox
		WHERE event_type IN ('`+eventFlagged+`', '`+eventUnflagged+`', '`+eventResultChanged+`') ORDER BY id`, func(sc scanner) error {
		var ev QualityEvent
		var data string
		var at any
		if err := sc.Scan(&ev.ID, &ev.Type, &data, &at); err != nil {
			return err
		}
		var err error
		if ev.At, err = dbTime(at); err != nil {
			return fmt.Errorf("outbox row %d (%s): %w", ev.ID, ev.Type, err)
		}
		var d struct {
			PoolID        uuid.UUID `json:"poolId"`
			ContributorID uuid.UUID `json:"contributorId"`
			UnitID        uuid.UUID `json:"unitId"`
		}
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			return fmt.Errorf("outbox row %d (%s): %w", ev.ID, ev.Type, err)
		}
		ev.PoolID, ev.ContributorID, ev.UnitID = d.PoolID, d.ContributorID, d.UnitID
		s.QualityEvents = append(s.QualityEvents, ev)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read quality events: %w", err)
	}
	return nil
}

type scanner interface{ Scan(dest ...any) error }

func queryRows(ctx context.Context, db *sql.DB, q string, each func(scanner) error) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func parseAll(steps ...func() error) error {
	for _, f := range steps {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// dbTime reads a time column: a time on PostgreSQL, unix microseconds on
// SQLite.
func dbTime(v any) (time.Time, error) {
	switch t := v.(type) {
	case time.Time:
		return t, nil
	case int64:
		return time.UnixMicro(t), nil
	}
	return time.Time{}, fmt.Errorf("a time column holds %T", v)
}

// checkCrowd returns every human work invariant the snapshot breaks; the
// flow snapshot gives the human steps' instances and transitions, the
// jobs the payloads their children were given.
func (s *Snapshot) checkCrowd(c *CrowdSnapshot, exp Expectations, now time.Time) []Violation {
	var out []Violation
	add := func(kind string, unit uuid.UUID, run uuid.UUID, format string, args ...any) {
		out = append(out, Violation{Kind: kind, UnitID: unit, RunID: run, Detail: fmt.Sprintf(format, args...)})
	}
	window := exp.ReapWindow
	if window == 0 {
		window = time.Minute
	}

	assignments := map[uuid.UUID]*crowd.Assignment{}
	held := map[uuid.UUID]int{} // ACTIVE and SUBMITTED assignments by unit
	type pair struct{ unit, who uuid.UUID }
	assignedTo := map[pair]int{}
	for _, a := range c.Assignments {
		assignments[a.ID] = a
		if a.State == crowd.AssignmentActive || a.State == crowd.AssignmentSubmitted {
			held[a.UnitID]++
		}
		assignedTo[pair{a.UnitID, a.ContributorID}]++
		if a.State == crowd.AssignmentActive && a.ExpiresAt.Before(now.Add(-window)) {
			add(KindExpiredAssignment, a.UnitID, uuid.Nil, "assignment %s of contributor %s is ACTIVE; its lease expired at %s, more than %v before %s",
				a.ID, a.ContributorID, ts(a.ExpiresAt), window, ts(now))
		}
	}
	judgedBy := map[pair]int{}
	judgments := map[uuid.UUID]int{}  // by unit
	untainted := map[uuid.UUID]int{}  // by unit
	judgmentOf := map[uuid.UUID]int{} // by assignment
	for _, j := range c.Judgments {
		judgedBy[pair{j.UnitID, j.ContributorID}]++
		judgments[j.UnitID]++
		if !j.Tainted {
			untainted[j.UnitID]++
		}
		judgmentOf[j.AssignmentID]++
		a := assignments[j.AssignmentID]
		switch {
		case a == nil:
			add(KindJudgmentUntied, j.UnitID, uuid.Nil, "judgment %s names assignment %s, which does not exist", j.ID, j.AssignmentID)
			continue
		case a.State != crowd.AssignmentSubmitted:
			add(KindJudgmentUntied, j.UnitID, uuid.Nil, "judgment %s: its assignment %s is %s, not SUBMITTED", j.ID, a.ID, a.State)
		case a.UnitID != j.UnitID || a.ContributorID != j.ContributorID:
			add(KindJudgmentUntied, j.UnitID, uuid.Nil, "judgment %s (unit %s, contributor %s): its assignment %s is of unit %s, contributor %s",
				j.ID, j.UnitID, j.ContributorID, a.ID, a.UnitID, a.ContributorID)
		}
		if j.SubmittedAt.After(a.ExpiresAt) {
			add(KindLateJudgment, j.UnitID, uuid.Nil, "judgment %s was stored at %s, after its assignment %s expired at %s",
				j.ID, ts(j.SubmittedAt), a.ID, ts(a.ExpiresAt))
		}
	}
	for _, a := range c.Assignments {
		if n := judgmentOf[a.ID]; a.State == crowd.AssignmentSubmitted && n != 1 {
			add(KindJudgmentUntied, a.UnitID, uuid.Nil, "assignment %s is SUBMITTED with %d judgments", a.ID, n)
		}
	}
	for _, m := range []struct {
		what string
		n    map[pair]int
	}{{"assignments", assignedTo}, {"judgments", judgedBy}} {
		pairs := make([]pair, 0)
		for p, n := range m.n {
			if n > 1 {
				pairs = append(pairs, p)
			}
		}
		slices.SortFunc(pairs, func(a, b pair) int {
			return strings.Compare(a.unit.String()+a.who.String(), b.unit.String()+b.who.String())
		})
		for _, p := range pairs {
			add(KindContributorTwice, p.unit, uuid.Nil, "contributor %s has %d %s of the unit", p.who, m.n[p], m.what)
		}
	}

	out = append(out, checkQuality(c, exp)...)

	ix := s.humanIndex()
	for _, u := range c.Units {
		if u.Golden {
			continue
		}
		if h := held[u.ID]; h != u.SlotsTaken || h > u.JudgmentsPerUnit {
			add(KindSlotOverAssigned, u.ID, u.RunID, "slots_taken %d, %d ACTIVE and SUBMITTED assignments, %d judgments per unit", u.SlotsTaken, h, u.JudgmentsPerUnit)
		}
		if n := untainted[u.ID]; n > u.JudgmentsPerUnit {
			add(KindJudgmentsOverTarget, u.ID, u.RunID, "%d untainted judgments, the target is %d", n, u.JudgmentsPerUnit)
		}
		if n := judgments[u.ID]; n != u.JudgmentCount {
			add(KindJudgmentCount, u.ID, u.RunID, "judgment_count %d, %d judgments stored", u.JudgmentCount, n)
		}
		if u.RunID != uuid.Nil && s.Flows != nil {
			s.checkHumanStep(c, u, ix, add)
		}
	}
	return out
}

// humanIndex is what checkHumanStep looks up, read once.
type humanIndex struct {
	runs     map[uuid.UUID]*flow.Run
	payloads map[uuid.UUID][]byte // of the jobs, by id
	// completions counts the outbox's RUNNING→SUCCEEDED (any → SUCCEEDED)
	// transitions of each instance and generation.
	completions map[instanceKey]int
}

func (s *Snapshot) humanIndex() *humanIndex {
	ix := &humanIndex{runs: map[uuid.UUID]*flow.Run{}, payloads: map[uuid.UUID][]byte{}, completions: map[instanceKey]int{}}
	if s.Flows == nil {
		return ix
	}
	for _, r := range s.Flows.Runs {
		ix.runs[r.ID] = r
	}
	for _, j := range s.Jobs {
		ix.payloads[j.ID] = j.Payload
	}
	for _, tr := range s.Flows.StepTransitions {
		if tr.To == flow.StepSucceeded {
			ix.completions[instanceKey{tr.RunID, tr.Step, tr.Index, tr.Generation}]++
		}
	}
	return ix
}

// checkHumanStep: a FINALIZED unit's step instance SUCCEEDED once, with
// the unit's result as its output, and the run went on past it; a step
// that SUCCEEDED has its unit FINALIZED.
func (s *Snapshot) checkHumanStep(c *CrowdSnapshot, u *CrowdUnit, ix *humanIndex, add func(string, uuid.UUID, uuid.UUID, string, ...any)) {
	f := s.Flows
	step := c.PoolSteps[u.PoolID]
	run := ix.runs[u.RunID]
	if run == nil {
		return // pruned, or a unit inserted by hand: no step to hold it to
	}
	byStep := map[string][]*flow.StepInstance{}
	var in *flow.StepInstance
	for _, si := range f.Steps[run.ID] {
		byStep[si.Step] = append(byStep[si.Step], si)
		if si.Step == step && si.Index == u.StepIndex {
			in = si
		}
	}
	id := fmt.Sprintf("%s[%d]", step, u.StepIndex)
	if in == nil {
		if u.State == crowd.UnitFinalized {
			add(KindHumanStepCompletion, u.ID, run.ID, "the unit is FINALIZED but its run has no instance %s", id)
		}
		return
	}
	if in.UnitID != uuid.Nil && in.UnitID != u.ID {
		return // a unit of an earlier generation: a retry gave the instance another
	}
	if u.State != crowd.UnitFinalized {
		if in.State == flow.StepSucceeded && !u.Repaired {
			add(KindHumanStepCompletion, u.ID, run.ID, "step %s SUCCEEDED while its unit is %s", id, u.State)
		}
		return
	}
	completions := ix.completions[instanceKey{run.ID, in.Step, in.Index, in.Generation}]
	if in.State != flow.StepSucceeded || completions != 1 {
		add(KindHumanStepCompletion, u.ID, run.ID, "the unit is FINALIZED; its step %s is %s and the outbox completed it %d times in generation %d",
			id, in.State, completions, in.Generation)
	}
	g := f.Graphs[graphKey(run.Workflow, run.Version)]
	// A review step's output is its verdict; a reviewed step's is what its
	// review made of the unit's result (a correction, a redo), and
	// children released before the review saw the first result
	// (docs/workflows.md, "Review steps"): their outputs are not the
	// unit's result to check.
	reviewed := g != nil && (g.ReviewOf(step) != "" || g.ReviewedBy(step) != "")
	if !reviewed && in.State == flow.StepSucceeded && !sameJSON(in.Output, u.stepResult()) {
		add(KindHumanStepOutput, u.ID, run.ID, "step %s's output is %s, its unit's result %s", id, in.Output, u.stepResult())
	}
	if g == nil {
		return // run_graph says so
	}
	fanOut := g.Step(step) != nil && g.Step(step).ForEach != ""
	for _, child := range g.Children(step) {
		ready := true
		for _, p := range g.Parents(child) {
			ins := byStep[p]
			ready = ready && len(ins) > 0
			for _, pin := range ins {
				ready = ready && pin.State.Done()
			}
		}
		cins := byStep[child]
		if ready && len(cins) == 0 && run.State != flow.RunCanceled {
			add(KindHumanStepCompletion, u.ID, run.ID, "the unit is FINALIZED and every parent of step %s is done, but %s was never released", child, child)
		}
		if fanOut || reviewed {
			continue // the child sees a list of the instances' outputs (fan_in checks it), or a reviewed output
		}
		for _, cin := range cins {
			payload, ok := ix.payloads[cin.JobID]
			if cin.JobID == uuid.Nil || !ok {
				continue
			}
			var p struct {
				Steps map[string]struct {
					Output json.RawMessage `json:"output"`
				} `json:"steps"`
			}
			if err := json.Unmarshal(payload, &p); err != nil {
				add(KindHumanStepOutput, u.ID, run.ID, "the job %s of step %s[%d] has a payload that is not a step input: %v", cin.JobID, child, cin.Index, err)
				continue
			}
			if got := p.Steps[step].Output; !sameJSON(got, u.stepResult()) {
				add(KindHumanStepOutput, u.ID, run.ID, "the job %s of step %s[%d] was given %s as steps.%s.output, the unit's result is %s", cin.JobID, child, cin.Index, got, step, u.Result)
			}
		}
	}
}

// checkQuality returns the violations of quality control's invariants:
// KindFlaggedUntainted, KindDecidedOnTainted, KindFlaggedTake and
// KindQualityEvents.
func checkQuality(c *CrowdSnapshot, exp Expectations) []Violation {
	var out []Violation
	add := func(kind string, unit uuid.UUID, format string, args ...any) {
		out = append(out, Violation{Kind: kind, UnitID: unit, Detail: fmt.Sprintf(format, args...)})
	}
	window := exp.FlagWindow
	if window == 0 {
		window = 10 * time.Second
	}
	type key struct{ pool, who uuid.UUID }
	flagged := map[key]*CrowdStanding{}
	for _, st := range c.Standings {
		if st.Flagged {
			flagged[key{st.PoolID, st.ContributorID}] = st
		}
	}
	for _, j := range c.Judgments {
		if st := flagged[key{j.PoolID, j.ContributorID}]; st != nil && !j.Tainted {
			add(KindFlaggedUntainted, j.UnitID, "contributor %s is flagged in pool %s (since %s); their judgment %s is not tainted",
				j.ContributorID, j.PoolID, ts(st.FlaggedAt), j.ID)
		}
	}
	// The flagged periods: from each flag to the forgiveness after it
	// (open while none), by the events; a flag with no event (itself a
	// KindQualityEvents violation) from the standing's time.
	type period struct{ from, to time.Time }
	periods := map[key][]period{}
	for _, ev := range c.QualityEvents {
		k := key{ev.PoolID, ev.ContributorID}
		ps := periods[k]
		switch {
		case ev.Type == eventFlagged:
			periods[k] = append(ps, period{from: ev.At})
		case ev.Type == eventUnflagged && len(ps) > 0 && ps[len(ps)-1].to.IsZero():
			ps[len(ps)-1].to = ev.At
		}
	}
	for k, st := range flagged {
		if ps := periods[k]; len(ps) == 0 || !ps[len(ps)-1].to.IsZero() {
			periods[k] = append(ps, period{from: st.FlaggedAt})
		}
	}
	for _, a := range c.Assignments {
		for _, p := range periods[key{a.PoolID, a.ContributorID}] {
			if a.StartedAt.After(p.from.Add(window)) && (p.to.IsZero() || a.StartedAt.Before(p.to.Add(-window))) {
				until := "still flagged"
				if !p.to.IsZero() {
					until = "forgiven at " + ts(p.to)
				}
				add(KindFlaggedTake, a.UnitID, "contributor %s, flagged in pool %s at %s (%s), took assignment %s at %s",
					a.ContributorID, a.PoolID, ts(p.from), until, a.ID, ts(a.StartedAt))
				break
			}
		}
	}
	clean := map[uuid.UUID]int{}
	for _, j := range c.Judgments {
		if !j.Tainted {
			clean[j.UnitID]++
		}
	}
	for _, u := range c.Units {
		if min, ok := c.PoolMin[u.PoolID]; ok && !u.Golden && u.State == crowd.UnitFinalized && clean[u.ID] < min {
			add(KindDecidedOnTainted, u.ID, "the unit is FINALIZED with %d clean judgments; its pool wants %d", clean[u.ID], min)
		}
	}

	// Flags and un-flags alternate, from a flag, and end as the state.
	changes := map[key][]string{}
	var order []key
	changed := map[uuid.UUID]int{}
	for _, ev := range c.QualityEvents {
		switch ev.Type {
		case eventFlagged, eventUnflagged:
			k := key{ev.PoolID, ev.ContributorID}
			if _, ok := changes[k]; !ok {
				order = append(order, k)
			}
			changes[k] = append(changes[k], ev.Type)
		case eventResultChanged:
			changed[ev.UnitID]++
		}
	}
	for _, st := range c.Standings {
		if k := (key{st.PoolID, st.ContributorID}); st.Flagged && changes[k] == nil {
			order = append(order, k)
		}
	}
	for _, k := range order {
		evs := changes[k]
		bad := ""
		for i, typ := range evs {
			if want := []string{eventFlagged, eventUnflagged}[i%2]; typ != want {
				bad = fmt.Sprintf("event %d is %s, not %s", i+1, typ, want)
				break
			}
		}
		isFlagged := flagged[k] != nil
		if bad == "" && (len(evs)%2 == 1) != isFlagged {
			bad = fmt.Sprintf("%d events, and the contributor is flagged: %v", len(evs), isFlagged)
		}
		if bad != "" {
			add(KindQualityEvents, uuid.Nil, "contributor %s in pool %s: flags and un-flags %s: %s", k.who, k.pool, strings.Join(evs, ", "), bad)
		}
	}
	for _, u := range c.Units {
		if n := changed[u.ID]; n != u.Audits {
			add(KindQualityEvents, u.ID, "%d audit rows, %d unit.result_changed events", u.Audits, n)
		}
	}
	return out
}
