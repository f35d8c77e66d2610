package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/events"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/workflow"
)

// Kinds of violation of the workflow invariants.
const (
	KindRunNotTerminal   = "run_not_terminal"   // the run is still RUNNING or PAUSED
	KindRunWrongState    = "run_wrong_state"    // finished, but not as its script implies
	KindRunTerminal      = "run_terminal"       // the run entered a terminal state more than once
	KindRunOutbox        = "run_outbox"         // the outbox's run transitions are not the run's path
	KindRunGraph         = "run_graph"          // the run's workflow version cannot be read
	KindDoubleRelease    = "double_release"     // a step instance was released (or got a job) more than once
	KindStepOutbox       = "step_outbox"        // the outbox's step transitions are not the instance's path
	KindStepBeforeParent = "step_before_parent" // a step started before all its parents ended
	KindSucceededEarly   = "succeeded_early"    // a SUCCEEDED run has a step that neither SUCCEEDED nor was skipped
	KindFanIn            = "fan_in"             // a fan-in's payload does not list every instance's output in order
)

// FlowSnapshot is what the checker reads of the workflow tables.
type FlowSnapshot struct {
	Runs []*flow.Run
	// Steps are each run's step instances.
	Steps map[uuid.UUID][]*flow.StepInstance
	// Graphs are the DAGs of the workflow versions the runs are pinned
	// to, by "name@version"; a version that could not be read or decoded
	// is missing, its error in GraphErrors.
	Graphs      map[string]*flow.Graph
	GraphErrors map[string]string
	// RunTransitions and StepTransitions are the outbox's run and step
	// transitions, in outbox order.
	RunTransitions  []RunChange
	StepTransitions []StepChange
}

// RunChange is one run transition of the outbox with its event id.
type RunChange struct {
	EventID string
	flow.RunTransition
}

// StepChange is one step instance transition of the outbox with its event
// id.
type StepChange struct {
	EventID string
	flow.StepTransition
}

// FlowReader is what LoadFlows reads of the store.
type FlowReader interface {
	RunList(ctx context.Context, p *store.RunListParams) ([]*flow.Run, error)
	StepList(ctx context.Context, runID uuid.UUID) ([]*flow.StepInstance, error)
	WorkflowGet(ctx context.Context, p *store.WorkflowGetParams) (*flow.Version, error)
	OutboxList(ctx context.Context, p *store.OutboxListParams) ([]*store.OutboxEvent, error)
}

func graphKey(name string, version int) string { return fmt.Sprintf("%s@%d", name, version) }

// LoadFlows reads every run, its step instances, the versions they are
// pinned to and the outbox's run and step transitions.
func LoadFlows(ctx context.Context, st FlowReader) (*FlowSnapshot, error) {
	s := &FlowSnapshot{Steps: map[uuid.UUID][]*flow.StepInstance{}, Graphs: map[string]*flow.Graph{}, GraphErrors: map[string]string{}}
	before := uuid.Nil
	for {
		runs, err := st.RunList(ctx, &store.RunListParams{BeforeID: before, Limit: pageSize})
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		s.Runs = append(s.Runs, runs...)
		if len(runs) < pageSize {
			break
		}
		before = runs[len(runs)-1].ID
	}
	for _, r := range s.Runs {
		steps, err := st.StepList(ctx, r.ID)
		if err != nil {
			return nil, fmt.Errorf("list steps of run %s: %w", r.ID, err)
		}
		s.Steps[r.ID] = steps
		key := graphKey(r.Workflow, r.Version)
		if _, ok := s.Graphs[key]; ok || s.GraphErrors[key] != "" {
			continue
		}
		v, err := st.WorkflowGet(ctx, &store.WorkflowGetParams{Name: r.Workflow, Version: r.Version})
		if err != nil {
			s.GraphErrors[key] = err.Error()
			continue
		}
		def, err := flow.Decode(v.Definition)
		if err != nil {
			s.GraphErrors[key] = err.Error()
			continue
		}
		g, err := flow.NewGraph(def)
		if err != nil {
			s.GraphErrors[key] = err.Error()
			continue
		}
		s.Graphs[key] = g
	}
	var after int64
	for {
		evs, err := st.OutboxList(ctx, &store.OutboxListParams{AfterID: after, Limit: pageSize})
		if err != nil {
			return nil, fmt.Errorf("list outbox: %w", err)
		}
		for _, ev := range evs {
			after = ev.ID
			switch ev.Type {
			case flow.EventRunStateChanged:
				var d flow.RunStateChangedData
				if err := json.Unmarshal(ev.Data, &d); err != nil {
					return nil, fmt.Errorf("decode outbox row %d: %w", ev.ID, err)
				}
				for i, tr := range d.Transitions {
					s.RunTransitions = append(s.RunTransitions, RunChange{EventID: events.EventID(ev.ID, i), RunTransition: tr})
				}
			case flow.EventStepStateChanged:
				var d flow.StepStateChangedData
				if err := json.Unmarshal(ev.Data, &d); err != nil {
					return nil, fmt.Errorf("decode outbox row %d: %w", ev.ID, err)
				}
				for i, tr := range d.Transitions {
					s.StepTransitions = append(s.StepTransitions, StepChange{EventID: events.EventID(ev.ID, i), StepTransition: tr})
				}
			}
		}
		if len(evs) < pageSize {
			break
		}
	}
	return s, nil
}

// instanceKey names a step instance of a run in one generation.
type instanceKey struct {
	run        uuid.UUID
	step       string
	index      int
	generation int
}

// checkFlows returns every workflow invariant that s and flows break. The
// job snapshot s gives the step jobs (payloads, attempts).
func (s *Snapshot) checkFlows(f *FlowSnapshot, exp Expectations) []Violation {
	var out []Violation
	add := func(kind string, r *flow.Run, format string, args ...any) {
		v := Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)}
		if r != nil {
			v.RunID, v.Key = r.ID, r.IdempotencyKey
		}
		out = append(out, v)
	}

	byKey := map[string][]*flow.Run{}
	runs := map[uuid.UUID]*flow.Run{}
	for _, r := range f.Runs {
		runs[r.ID] = r
		if r.IdempotencyKey != "" {
			byKey[r.IdempotencyKey] = append(byKey[r.IdempotencyKey], r)
		}
	}
	keys := make([]string, 0, len(exp.Runs))
	for k := range exp.Runs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch rs := byKey[k]; len(rs) {
		case 0:
			out = append(out, Violation{Kind: KindMissing, Key: k, Detail: "no run has this idempotency key"})
		case 1:
		default:
			add(KindDuplicate, rs[0], "%d runs have this idempotency key", len(rs))
		}
	}

	runPaths := map[uuid.UUID][]flow.RunTransition{}
	for _, tr := range f.RunTransitions {
		runPaths[tr.RunID] = append(runPaths[tr.RunID], tr.RunTransition)
	}
	stepPaths := map[instanceKey][]flow.StepTransition{}
	for _, tr := range f.StepTransitions {
		k := instanceKey{tr.RunID, tr.Step, tr.Index, tr.Generation}
		stepPaths[k] = append(stepPaths[k], tr.StepTransition)
	}
	// Step jobs, by the instance their payload names.
	type ref struct {
		run   uuid.UUID
		step  string
		index int
	}
	stepJobs := map[ref][]*job.Row{}
	runJobs := map[uuid.UUID][]ref{} // each run's step jobs, in job order
	jobs := map[uuid.UUID]*job.Row{}
	for _, j := range s.Jobs {
		jobs[j.ID] = j
		if sr, ok := workflow.StepRefOf(j.Payload); ok {
			k := ref{sr.RunID, sr.Step, sr.Index}
			stepJobs[k] = append(stepJobs[k], j)
			runJobs[sr.RunID] = append(runJobs[sr.RunID], k)
		}
	}

	for _, r := range f.Runs {
		if !exp.AllowNonTerminal && !r.State.Terminal() {
			add(KindRunNotTerminal, r, "state %s", r.State)
		}
		if want, ok := exp.Runs[r.IdempotencyKey]; ok && r.State.Terminal() && r.State != want {
			add(KindRunWrongState, r, "wants %s, the run is %s (error %q)", want, r.State, r.Error)
		}
		checkRunPath(r, runPaths[r.ID], add)

		insts := f.Steps[r.ID]
		seen := map[ref]bool{}
		for _, in := range insts {
			k := ref{in.RunID, in.Step, in.Index}
			if seen[k] {
				add(KindDoubleRelease, r, "step %s[%d] has more than one instance row", in.Step, in.Index)
			}
			seen[k] = true
			checkStepPath(r, in, stepPaths, add)
			// Each generation is released at most once, so an instance
			// has had at most one job per generation.
			if n := len(stepJobs[k]); n > in.Generation {
				add(KindDoubleRelease, r, "step %s[%d] in generation %d has %d jobs", in.Step, in.Index, in.Generation, n)
			}
		}
		for _, k := range runJobs[r.ID] {
			if !seen[k] {
				seen[k] = true // one violation per instance
				add(KindDoubleRelease, r, "job %s belongs to step %s[%d], which has no instance", stepJobs[k][0].ID, k.step, k.index)
			}
		}

		g := f.Graphs[graphKey(r.Workflow, r.Version)]
		if g == nil {
			add(KindRunGraph, r, "workflow %s version %d: %s", r.Workflow, r.Version, f.GraphErrors[graphKey(r.Workflow, r.Version)])
			continue
		}
		byStep := map[string][]*flow.StepInstance{}
		for _, in := range insts {
			byStep[in.Step] = append(byStep[in.Step], in)
		}
		for _, ins := range byStep {
			slices.SortFunc(ins, func(a, b *flow.StepInstance) int { return a.Index - b.Index })
		}
		s.checkParents(r, g, byStep, add)
		if r.State == flow.RunSucceeded {
			checkSucceeded(r, g, byStep, add)
		}
		checkFanIn(r, g, byStep, jobs, add)
	}
	for id, p := range runPaths {
		if runs[id] == nil {
			add(KindRunOutbox, &flow.Run{ID: id}, "%d outbox transitions of a run that does not exist", len(p))
		}
	}
	for id, ks := range runJobs {
		if runs[id] == nil {
			add(KindDoubleRelease, &flow.Run{ID: id}, "%d step jobs (the first %s, step %s[%d]) of a run that does not exist", len(ks), stepJobs[ks[0]][0].ID, ks[0].step, ks[0].index)
		}
	}
	return out
}

// checkRunPath: the run's outbox transitions go from "" (its insert) to
// its state, each allowed by the run state machine, and it entered a
// terminal state once (once more for each retry, FAILED → RUNNING).
func checkRunPath(r *flow.Run, path []flow.RunTransition, add func(string, *flow.Run, string, ...any)) {
	if len(path) == 0 {
		add(KindRunOutbox, r, "no outbox transition at all (state %s)", r.State)
		return
	}
	terminal, retries := 0, 0
	for _, tr := range path {
		if tr.To.Terminal() {
			terminal++
		}
		if tr.From == flow.RunFailed && tr.To == flow.RunRunning {
			retries++
		}
	}
	if terminal > retries+1 {
		add(KindRunTerminal, r, "entered a terminal state %d times with %d retries", terminal, retries)
	}
	prev := flow.RunState("")
	for i, tr := range path {
		switch {
		case tr.From != prev:
			add(KindRunOutbox, r, "transition %d is %s→%s but the previous one ended in %q", i, tr.From, tr.To, prev)
			return
		case i == 0 && (tr.From != "" || tr.To != flow.RunRunning):
			add(KindRunOutbox, r, "first transition is %s→%s, not the insert (→RUNNING)", tr.From, tr.To)
			return
		case i > 0 && !flow.CanRunTransition(tr.From, tr.To):
			add(KindRunOutbox, r, "transition %d %s→%s is not in the state machine", i, tr.From, tr.To)
			return
		}
		prev = tr.To
	}
	if prev != r.State {
		add(KindRunOutbox, r, "the outbox's last transition ends in %s, the run is %s", prev, r.State)
	}
}

// checkStepPath: the instance was released (→ RUNNING) at most once in
// each generation; and for an instance never reset by a retry, the
// outbox's transitions form a path of the step state machine from its
// insert to its state.
func checkStepPath(r *flow.Run, in *flow.StepInstance, paths map[instanceKey][]flow.StepTransition, add func(string, *flow.Run, string, ...any)) {
	id := fmt.Sprintf("%s[%d]", in.Step, in.Index)
	for gen := 1; gen <= in.Generation; gen++ {
		releases := 0
		for _, tr := range paths[instanceKey{in.RunID, in.Step, in.Index, gen}] {
			if tr.To == flow.StepRunning {
				releases++
			}
		}
		if releases > 1 {
			add(KindDoubleRelease, r, "step %s was released %d times in generation %d", id, releases, gen)
		}
	}
	if in.Generation != 1 {
		return
	}
	path := paths[instanceKey{in.RunID, in.Step, in.Index, 1}]
	if len(path) == 0 {
		add(KindStepOutbox, r, "step %s: no outbox transition at all (state %s)", id, in.State)
		return
	}
	prev := flow.StepState("")
	for i, tr := range path {
		ok := tr.From == prev
		if i == 0 {
			ok = ok && (tr.To == flow.StepPending || tr.To == flow.StepRunning)
		} else {
			ok = ok && flow.CanStepTransition(tr.From, tr.To)
		}
		if !ok {
			add(KindStepOutbox, r, "step %s: transition %d %s→%s after %q", id, i, tr.From, tr.To, prev)
			return
		}
		prev = tr.To
	}
	if prev != in.State {
		add(KindStepOutbox, r, "step %s: the outbox's last transition ends in %s, the instance is %s", id, prev, in.State)
	}
}

// checkParents: an instance that started (was released) did so after
// every instance of each of its parents had ended, and its job's attempts
// started after that too.
func (s *Snapshot) checkParents(r *flow.Run, g *flow.Graph, byStep map[string][]*flow.StepInstance, add func(string, *flow.Run, string, ...any)) {
	for _, name := range g.Order() {
		for _, in := range byStep[name] {
			if in.StartedAt.IsZero() {
				continue
			}
			id := fmt.Sprintf("%s[%d]", in.Step, in.Index)
			var ended time.Time // the last end of a parent instance
			for _, p := range g.Parents(name) {
				ps := byStep[p]
				if len(ps) == 0 {
					add(KindStepBeforeParent, r, "step %s started at %s; its parent %s never had an instance", id, ts(in.StartedAt), p)
					continue
				}
				for _, pin := range ps {
					switch {
					case !pin.State.Done() || pin.FinishedAt.IsZero():
						add(KindStepBeforeParent, r, "step %s started at %s; its parent %s[%d] is %s", id, ts(in.StartedAt), p, pin.Index, pin.State)
					case pin.FinishedAt.After(in.StartedAt):
						add(KindStepBeforeParent, r, "step %s started at %s, before its parent %s[%d] ended at %s", id, ts(in.StartedAt), p, pin.Index, ts(pin.FinishedAt))
					case pin.FinishedAt.After(ended):
						ended = pin.FinishedAt
					}
				}
			}
			if in.JobID == uuid.Nil || ended.IsZero() {
				continue
			}
			for _, a := range s.Attempts[in.JobID] {
				if a.StartedAt.Before(ended) {
					add(KindStepBeforeParent, r, "step %s: attempt %d of its job %s started at %s, before its last parent ended at %s", id, a.Attempt, in.JobID, ts(a.StartedAt), ts(ended))
				}
			}
		}
	}
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// checkSucceeded: every step of a SUCCEEDED run has instances, each
// SUCCEEDED or SKIPPED — or FAILED in a step whose onFailure is
// "continue", the one failure a run may succeed with.
func checkSucceeded(r *flow.Run, g *flow.Graph, byStep map[string][]*flow.StepInstance, add func(string, *flow.Run, string, ...any)) {
	for _, name := range g.Order() {
		ins := byStep[name]
		if len(ins) == 0 {
			add(KindSucceededEarly, r, "the run SUCCEEDED but step %s never had an instance", name)
			continue
		}
		tolerated := g.Step(name).OnFailure.OrDefault() == flow.OnFailureContinue
		for _, in := range ins {
			switch {
			case in.State == flow.StepSucceeded, in.State == flow.StepSkipped:
			case in.State == flow.StepFailed && tolerated:
			default:
				add(KindSucceededEarly, r, "the run SUCCEEDED but step %s[%d] is %s", name, in.Index, in.State)
			}
		}
	}
}

// droppedPrefix starts the error of a fan-out instance left over from an
// earlier generation (a retry's forEach yielded fewer items): it is not
// part of the step's output.
const droppedPrefix = "not an item of this generation"

// checkFanIn: the job of each instance whose parent fans out carries that
// parent's outputs as a list with one element per instance, in index
// order, each equal to the instance's output (null for none).
func checkFanIn(r *flow.Run, g *flow.Graph, byStep map[string][]*flow.StepInstance, jobs map[uuid.UUID]*job.Row, add func(string, *flow.Run, string, ...any)) {
	for _, name := range g.Order() {
		if g.Step(name).Input != "" {
			continue // its payload carries its input expression's value, not its parents'
		}
		for _, in := range byStep[name] {
			j := jobs[in.JobID]
			if in.JobID == uuid.Nil || j == nil {
				continue
			}
			id := fmt.Sprintf("%s[%d]", in.Step, in.Index)
			var payload struct {
				Steps map[string]struct {
					Output json.RawMessage `json:"output"`
				} `json:"steps"`
			}
			if err := json.Unmarshal(j.Payload, &payload); err != nil {
				add(KindFanIn, r, "step %s: job %s has a payload that is not a step input: %v", id, j.ID, err)
				continue
			}
			for _, p := range g.Parents(name) {
				if g.Step(p).ForEach == "" {
					continue
				}
				var want []json.RawMessage
				for _, pin := range byStep[p] {
					if pin.State == flow.StepSkipped && strings.HasPrefix(pin.Error, droppedPrefix) {
						continue
					}
					if pin.Index == 0 && pin.State == flow.StepSucceeded && pin.JobID == uuid.Nil && pin.UnitID == uuid.Nil && pin.Kind != flow.KindSignal {
						want = nil // the record of a fan-out over an empty list
						break
					}
					out := pin.Output
					if len(out) == 0 {
						out = json.RawMessage("null")
					}
					want = append(want, out)
				}
				var got []json.RawMessage
				if err := json.Unmarshal(payload.Steps[p].Output, &got); err != nil {
					add(KindFanIn, r, "step %s: its job's steps.%s.output is not a list: %s", id, p, payload.Steps[p].Output)
					continue
				}
				if len(got) != len(want) {
					add(KindFanIn, r, "step %s: its job saw %d outputs of %s, which has %d instances", id, len(got), p, len(want))
					continue
				}
				for i := range got {
					if !sameJSON(got[i], want[i]) {
						add(KindFanIn, r, "step %s: element %d of steps.%s.output is %s, instance %d's output is %s", id, i, p, got[i], i, want[i])
						break
					}
				}
			}
		}
	}
}

// sameJSON compares two JSON documents by value (PostgreSQL's jsonb
// reorders keys and spaces them).
func sameJSON(a, b []byte) bool {
	var x, y any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}
