package chaos_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/chaos"
	"github.com/docket-run/docket/internal/crowdcheck"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
)

type checkBundle struct {
	ctx  context.Context
	st   store.Store
	exp  chaos.Expectations
	byID map[string]uuid.UUID // key → job id
}

// setupCheck makes one job per script on a fresh database and drives each
// to the end its script implies, through the store as workers would.
func setupCheck(t *testing.T, backend testdb.Backend) *checkBundle {
	t.Helper()
	ctx := context.Background()
	st := teststore.Open(t, backend.URL(t))

	b := &checkBundle{ctx: ctx, st: st, byID: map[string]uuid.UUID{}, exp: chaos.Expectations{Jobs: map[string]chaos.Script{
		"k-success": chaos.ScriptSuccess, "k-retry": chaos.ScriptRetry,
		"k-fatal": chaos.ScriptFatal, "k-cancel": chaos.ScriptCancel,
	}}}
	now := time.Now()
	var ins []*store.JobInsertParams
	for _, k := range []string{"k-success", "k-retry", "k-fatal", "k-cancel"} {
		ins = append(ins, &store.JobInsertParams{
			ID: uuid.Must(uuid.NewV7()), Type: "t", Queue: "q", Payload: json.RawMessage(`{}`),
			IdempotencyKey: k, State: job.StateQueued, MaxAttempts: 3,
		})
	}
	res, err := st.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: ins, Now: now})
	require.NoError(t, err)
	for _, r := range res {
		b.byID[r.Job.IdempotencyKey] = r.Job.ID
	}
	_, err = st.JobCancel(ctx, &store.JobCancelParams{ID: b.byID["k-cancel"], Now: now})
	require.NoError(t, err)

	finish := func(state job.State, outcome job.Outcome, now time.Time) {
		rows, err := st.JobAcquire(ctx, &store.JobAcquireParams{Queue: "q", Max: 10, Owner: "n1", LeaseDuration: time.Minute, Now: now})
		require.NoError(t, err)
		var fin []*store.JobFinishParams
		for _, r := range rows {
			st, oc := job.StateSuccess, job.OutcomeSuccess
			switch {
			case r.IdempotencyKey == "k-fatal":
				st, oc = job.StateDead, job.OutcomeError
			case r.IdempotencyKey == "k-retry" && state == job.StateRetry:
				st, oc = state, outcome
			}
			fin = append(fin, &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: st, Outcome: oc, Error: "e", RunAt: now, FinishedAt: now.Add(time.Millisecond)})
		}
		_, err = st.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: fin, Now: now.Add(time.Millisecond)})
		require.NoError(t, err)
	}
	finish(job.StateRetry, job.OutcomeError, now.Add(time.Second))
	_, err = st.JobSchedule(ctx, &store.JobScheduleParams{Now: now.Add(2 * time.Second), Max: 10})
	require.NoError(t, err)
	finish(job.StateSuccess, job.OutcomeSuccess, now.Add(3*time.Second))
	return b
}

func (b *checkBundle) load(t *testing.T) *chaos.Snapshot {
	t.Helper()
	s, err := chaos.Load(b.ctx, b.st)
	require.NoError(t, err)
	return s
}

func (b *checkBundle) row(s *chaos.Snapshot, key string) *job.Row {
	for _, r := range s.Jobs {
		if r.IdempotencyKey == key {
			return r
		}
	}
	return nil
}

func kinds(vs []chaos.Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Kind)
	}
	return out
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			b := setupCheck(t, backend)

			// Consumers that saw everything once: no violation.
			all := map[string]int{}
			for _, tr := range b.load(t).Transitions {
				all[tr.EventID] = 1
			}
			b.exp.Deliveries = []chaos.Delivery{{Name: "sse", Seen: all, ExactlyOnce: true}, {Name: "webhook", Seen: all}}
			vs, err := chaos.Check(b.ctx, b.st, b.exp)
			require.NoError(t, err)
			require.Empty(t, vs, "a correct database has no violation")
			seen := func(drop, twice, extra string) map[string]int {
				m := map[string]int{}
				for id := range all {
					if id != drop {
						m[id] = 1
					}
				}
				if twice != "" {
					m[twice] = 2
				}
				if extra != "" {
					m[extra] = 1
				}
				return m
			}
			var someID string
			for id := range all {
				someID = id
				break
			}

			// Every kind of violation, made by hand on a fresh snapshot.
			cases := []struct {
				kind    string
				breakIt func(s *chaos.Snapshot, exp *chaos.Expectations)
			}{
				{chaos.KindMissing, func(_ *chaos.Snapshot, exp *chaos.Expectations) {
					exp.Jobs = map[string]chaos.Script{"k-nowhere": chaos.ScriptSuccess}
				}},
				{chaos.KindDuplicate, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					c := *b.row(s, "k-success")
					c.ID = uuid.Must(uuid.NewV7())
					s.Jobs = append(s.Jobs, &c)
				}},
				{chaos.KindNotTerminal, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					b.row(s, "k-success").State = job.StateQueued
				}},
				{chaos.KindWrongState, func(_ *chaos.Snapshot, exp *chaos.Expectations) {
					exp.Jobs = map[string]chaos.Script{"k-success": chaos.ScriptFatal}
				}},
				{chaos.KindDoubleCompletion, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					r := b.row(s, "k-success")
					a := *s.Attempts[r.ID][0]
					a.Attempt++
					a.StartedAt = a.FinishedAt.Add(time.Hour)
					a.FinishedAt = a.StartedAt.Add(time.Second)
					s.Attempts[r.ID] = append(s.Attempts[r.ID], &a)
				}},
				{chaos.KindOverlap, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					r := b.row(s, "k-retry")
					first := s.Attempts[r.ID][0]
					first.FinishedAt = s.Attempts[r.ID][1].StartedAt.Add(time.Millisecond)
				}},
				{chaos.KindAttempts, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					b.row(s, "k-retry").MaxAttempts = 1
				}},
				{chaos.KindOutbox, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					id := b.row(s, "k-fatal").ID
					for i, tr := range s.Transitions {
						if tr.JobID == id && tr.From == job.StateQueued {
							s.Transitions = append(s.Transitions[:i:i], s.Transitions[i+1:]...)
							break
						}
					}
				}},
				{chaos.KindOutbox, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					id := b.row(s, "k-success").ID
					for _, tr := range s.Transitions {
						if tr.JobID == id && tr.To == job.StateSuccess {
							s.Transitions = append(s.Transitions, tr) // published twice
							break
						}
					}
				}},
				{chaos.KindUndelivered, func(_ *chaos.Snapshot, exp *chaos.Expectations) {
					exp.Deliveries = []chaos.Delivery{{Name: "webhook", Seen: seen(someID, "", "")}}
				}},
				{chaos.KindRedelivered, func(_ *chaos.Snapshot, exp *chaos.Expectations) {
					exp.Deliveries = []chaos.Delivery{{Name: "sse", Seen: seen("", someID, ""), ExactlyOnce: true}}
				}},
				{chaos.KindPhantomEvent, func(_ *chaos.Snapshot, exp *chaos.Expectations) {
					exp.Deliveries = []chaos.Delivery{{Name: "sse", Seen: seen("", "", "999999-0"), ExactlyOnce: true}}
				}},
				{chaos.KindExpiredLease, func(s *chaos.Snapshot, exp *chaos.Expectations) {
					exp.AllowNonTerminal = true
					r := b.row(s, "k-success")
					r.State = job.StateRunning
					r.LeaseExpiresAt = time.Now().Add(-time.Hour)
				}},
			}
			for _, c := range cases {
				s := b.load(t)
				exp := b.exp
				c.breakIt(s, &exp)
				got := kinds(s.Check(exp))
				require.Contains(t, got, c.kind, "the checker must catch a %s violation", c.kind)
			}
		})
	}
}

// Rescued counts, from the attempt history, the attempts the rescuer
// ended after their lease expired; the holder's late outcome is refused
// and counts nothing.
func TestSnapshotRescued(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			b := setupCheck(t, backend)
			require.Zero(t, b.load(t).Rescued(), "no lease expired in the scripted jobs")

			now := time.Now()
			res, err := b.st.JobInsertMany(b.ctx, &store.JobInsertManyParams{Now: now, Jobs: []*store.JobInsertParams{{
				ID: uuid.Must(uuid.NewV7()), Type: "t", Queue: "r", Payload: json.RawMessage(`{}`),
				IdempotencyKey: "k-rescued", State: job.StateQueued, MaxAttempts: 3,
			}}})
			require.NoError(t, err)
			id := res[0].Job.ID
			acquire := func(owner string, at time.Time) *job.Row {
				rows, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "r", Max: 1, Owner: owner, LeaseDuration: time.Second, Now: at})
				require.NoError(t, err)
				require.Len(t, rows, 1)
				return rows[0]
			}
			first := acquire("paused", now)
			// The lease ran out: the rescuer's end of attempt 1.
			ok, err := b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: now.Add(2 * time.Second), ExpiredOnly: true, Jobs: []*store.JobFinishParams{{
				ID: id, Attempt: first.Attempt, State: job.StateRetry, Outcome: job.OutcomeExpired, Error: "lease expired", RunAt: now.Add(2 * time.Second),
			}}})
			require.NoError(t, err)
			require.Equal(t, []job.State{job.StateRetry}, ok)
			_, err = b.st.JobSchedule(b.ctx, &store.JobScheduleParams{Now: now.Add(3 * time.Second), Max: 10})
			require.NoError(t, err)
			second := acquire("other", now.Add(3*time.Second))
			success := func(attempt int) []job.State {
				ok, err := b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: now.Add(4 * time.Second), Jobs: []*store.JobFinishParams{{
					ID: id, Attempt: attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess, FinishedAt: now.Add(4 * time.Second),
				}}})
				require.NoError(t, err)
				return ok
			}
			require.Equal(t, []job.State{""}, success(first.Attempt), "the paused holder's late completion is fenced")
			require.Equal(t, []job.State{job.StateSuccess}, success(second.Attempt))

			s := b.load(t)
			require.Equal(t, 1, s.Rescued())
			b.exp.Jobs["k-rescued"] = chaos.ScriptSuccess
			require.Empty(t, s.Check(b.exp))
		})
	}
}

// checkStep is the job of every step of the checker's workflow.
type checkStep struct {
	Run struct {
		Step  string `json:"step"`
		Index int    `json:"index"`
	} `json:"run"`
	Input struct {
		FailHard bool `json:"failHard"`
	} `json:"input"`
	Item json.RawMessage `json:"item"`
}

func (checkStep) JobType() string { return "check.step" }

type flowBundle struct {
	ctx context.Context
	rd  chaos.Reader
	exp chaos.Expectations
}

// setupFlows runs, on a fresh database with a real worker, two runs of a
// workflow with a chain, a fan-out of 3 and its fan-in, a step skipped by
// its `if`, a step failing with onFailure continue, and a step that fails
// the run when the input says so: "r-ok" SUCCEEDED, "r-fail" FAILED.
func setupFlows(t *testing.T, backend testdb.Backend) *flowBundle {
	t.Helper()
	ctx := context.Background()
	url := backend.URL(t)
	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, client.Close()) })
	def, err := docket.NewWorkflow("check").
		Job("a", "check.step").
		Job("fan", "check.step", docket.After("a"), docket.ForEach("[10, 20, 30]")).
		Job("join", "check.step", docket.After("fan")).
		Job("maybe", "check.step", docket.After("a"), docket.If("input.failHard")).
		Job("tolerated", "check.step", docket.After("a"), docket.ContinueOnFailure(), docket.StepMaxAttempts(1)).
		Job("must", "check.step", docket.After("join"), docket.StepMaxAttempts(1)).
		Definition()
	require.NoError(t, err)
	_, _, err = client.WorkflowPut(ctx, def)
	require.NoError(t, err)

	w := docket.NewWorker(client, docket.WorkerConfig{
		Queues: map[string]int{"check.step": 4}, PollInterval: 20 * time.Millisecond, LeaderTTL: 300 * time.Millisecond,
		WorkflowSweepInterval: 100 * time.Millisecond,
	})
	docket.AddHandler(w, func(ctx context.Context, j *docket.Job[checkStep]) error {
		switch {
		case j.Args.Run.Step == "tolerated", j.Args.Run.Step == "must" && j.Args.Input.FailHard:
			return docket.Fatal(errFlowScripted)
		}
		return docket.SetResult(ctx, map[string]any{"step": j.Args.Run.Step, "index": j.Args.Run.Index, "item": j.Args.Item})
	})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		w.Stop(sctx)
	})
	for key, fail := range map[string]bool{"r-ok": false, "r-fail": true} {
		_, err := client.RunStart(ctx, "check", map[string]bool{"failHard": fail}, &docket.RunStartOpts{IdempotencyKey: key})
		require.NoError(t, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		open, err := client.RunList(ctx, docket.RunListParams{States: []docket.RunState{docket.RunRunning, docket.RunPaused}, Limit: 1})
		require.NoError(t, err)
		if len(open) == 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "the runs did not finish within 30 s")
		time.Sleep(20 * time.Millisecond)
	}
	return &flowBundle{ctx: ctx, rd: teststore.Open(t, url), exp: chaos.Expectations{
		Runs: map[string]flow.RunState{"r-ok": flow.RunSucceeded, "r-fail": flow.RunFailed},
	}}
}

var errFlowScripted = errors.New("scripted step failure")

func (b *flowBundle) load(t *testing.T) *chaos.Snapshot {
	t.Helper()
	s, err := chaos.Load(b.ctx, b.rd)
	require.NoError(t, err)
	return s
}

func runByKey(s *chaos.Snapshot, key string) *flow.Run {
	for _, r := range s.Flows.Runs {
		if r.IdempotencyKey == key {
			return r
		}
	}
	return nil
}

func stepOf(s *chaos.Snapshot, key, step string, index int) *flow.StepInstance {
	r := runByKey(s, key)
	for _, in := range s.Flows.Steps[r.ID] {
		if in.Step == step && in.Index == index {
			return in
		}
	}
	return nil
}

// TestCheckWorkflows: a real history of runs holds every workflow
// invariant, and each invariant, broken by hand in a copy of it, is
// caught.
func TestCheckWorkflows(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			b := setupFlows(t, backend)
			s := b.load(t)
			require.Len(t, s.Flows.Runs, 2)
			require.Equal(t, flow.RunSucceeded, runByKey(s, "r-ok").State)
			require.Equal(t, flow.RunFailed, runByKey(s, "r-fail").State)
			require.Equal(t, flow.StepSkipped, stepOf(s, "r-ok", "maybe", 0).State, "the if skipped it")
			require.Equal(t, flow.StepFailed, stepOf(s, "r-ok", "tolerated", 0).State, "failed, tolerated")
			require.Equal(t, flow.StepSucceeded, stepOf(s, "r-ok", "fan", 2).State)
			require.Empty(t, s.Check(b.exp), "a correct history has no violation")

			cases := []struct {
				name    string
				kind    string
				breakIt func(s *chaos.Snapshot, exp *chaos.Expectations)
			}{
				{"run key missing", chaos.KindMissing, func(_ *chaos.Snapshot, exp *chaos.Expectations) {
					exp.Runs = map[string]flow.RunState{"r-nowhere": flow.RunSucceeded}
				}},
				{"run still running", chaos.KindRunNotTerminal, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					runByKey(s, "r-ok").State = flow.RunRunning
				}},
				{"run ended otherwise", chaos.KindRunWrongState, func(_ *chaos.Snapshot, exp *chaos.Expectations) {
					exp.Runs = map[string]flow.RunState{"r-ok": flow.RunFailed}
				}},
				{"run finished twice", chaos.KindRunTerminal, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					id := runByKey(s, "r-fail").ID
					for _, tr := range s.Flows.RunTransitions {
						if tr.RunID == id && tr.To == flow.RunFailed {
							tr.From, tr.To = flow.RunFailed, flow.RunSucceeded
							s.Flows.RunTransitions = append(s.Flows.RunTransitions, tr)
							break
						}
					}
				}},
				{"run insert not published", chaos.KindRunOutbox, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					id := runByKey(s, "r-ok").ID
					for i, tr := range s.Flows.RunTransitions {
						if tr.RunID == id && tr.From == "" {
							s.Flows.RunTransitions = append(s.Flows.RunTransitions[:i:i], s.Flows.RunTransitions[i+1:]...)
							break
						}
					}
				}},
				{"definition unreadable", chaos.KindRunGraph, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					clear(s.Flows.Graphs)
				}},
				{"step released twice", chaos.KindDoubleRelease, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					in := stepOf(s, "r-ok", "join", 0)
					for _, tr := range s.Flows.StepTransitions {
						if tr.RunID == in.RunID && tr.Step == "join" && tr.To == flow.StepRunning {
							s.Flows.StepTransitions = append(s.Flows.StepTransitions, tr)
							break
						}
					}
				}},
				{"step given a second job", chaos.KindDoubleRelease, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					in := stepOf(s, "r-ok", "fan", 1)
					for _, j := range s.Jobs {
						if j.ID == in.JobID {
							c := *j
							c.ID = uuid.Must(uuid.NewV7())
							s.Jobs = append(s.Jobs, &c)
							break
						}
					}
				}},
				{"step instance row twice", chaos.KindDoubleRelease, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					r := runByKey(s, "r-ok")
					c := *stepOf(s, "r-ok", "a", 0)
					s.Flows.Steps[r.ID] = append(s.Flows.Steps[r.ID], &c)
				}},
				{"step job without an instance", chaos.KindDoubleRelease, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					r := runByKey(s, "r-fail")
					var keep []*flow.StepInstance
					for _, in := range s.Flows.Steps[r.ID] {
						if in.Step != "a" {
							keep = append(keep, in)
						}
					}
					s.Flows.Steps[r.ID] = keep
				}},
				{"step job of no run", chaos.KindDoubleRelease, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					in := stepOf(s, "r-ok", "a", 0)
					for _, j := range s.Jobs {
						if j.ID == in.JobID {
							c := *j
							c.ID = uuid.Must(uuid.NewV7())
							c.Payload = bytes.Replace(c.Payload, []byte(in.RunID.String()), []byte(uuid.Must(uuid.NewV7()).String()), 1)
							s.Jobs = append(s.Jobs, &c)
							break
						}
					}
				}},
				{"step path broken", chaos.KindStepOutbox, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					in := stepOf(s, "r-ok", "a", 0)
					for i, tr := range s.Flows.StepTransitions {
						if tr.RunID == in.RunID && tr.Step == "a" && tr.To == flow.StepSucceeded {
							s.Flows.StepTransitions = append(s.Flows.StepTransitions[:i:i], s.Flows.StepTransitions[i+1:]...)
							break
						}
					}
				}},
				{"step released before a parent ended", chaos.KindStepBeforeParent, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					join := stepOf(s, "r-ok", "join", 0)
					join.StartedAt = stepOf(s, "r-ok", "fan", 2).FinishedAt.Add(-time.Millisecond)
				}},
				{"step job attempt before a parent ended", chaos.KindStepBeforeParent, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					join := stepOf(s, "r-ok", "join", 0)
					s.Attempts[join.JobID][0].StartedAt = stepOf(s, "r-ok", "fan", 1).FinishedAt.Add(-time.Millisecond)
				}},
				{"step released while a parent runs", chaos.KindStepBeforeParent, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					stepOf(s, "r-ok", "fan", 0).State = flow.StepRunning
				}},
				{"succeeded with a failed step", chaos.KindSucceededEarly, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					stepOf(s, "r-ok", "must", 0).State = flow.StepFailed
				}},
				{"succeeded with a step never released", chaos.KindSucceededEarly, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					r := runByKey(s, "r-ok")
					var keep []*flow.StepInstance
					for _, in := range s.Flows.Steps[r.ID] {
						if in.Step != "must" {
							keep = append(keep, in)
						}
					}
					s.Flows.Steps[r.ID] = keep
				}},
				{"fan-in saw another output", chaos.KindFanIn, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					stepOf(s, "r-ok", "fan", 1).Output = json.RawMessage(`{"other":true}`)
				}},
				{"fan-in saw the outputs out of order", chaos.KindFanIn, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					one, two := stepOf(s, "r-ok", "fan", 1), stepOf(s, "r-ok", "fan", 2)
					one.Output, two.Output = two.Output, one.Output
				}},
				{"fan-in missed an instance", chaos.KindFanIn, func(s *chaos.Snapshot, _ *chaos.Expectations) {
					r := runByKey(s, "r-ok")
					c := *stepOf(s, "r-ok", "fan", 2)
					c.Index = 3
					s.Flows.Steps[r.ID] = append(s.Flows.Steps[r.ID], &c)
				}},
			}
			for _, c := range cases {
				s := b.load(t)
				exp := b.exp
				c.breakIt(s, &exp)
				got := kinds(s.Check(exp))
				require.Contains(t, got, c.kind, "%s: the checker must catch a %s violation", c.name, c.kind)
			}
		})
	}
}

// crowdStep is the job of the job steps around the human step of the
// crowd checker's workflow.
type crowdStep struct {
	Run struct {
		Step string `json:"step"`
	} `json:"run"`
}

func (crowdStep) JobType() string { return "crowdcheck.step" }

const crowdCheckTask = `{"title": "Which?",
 "fields": [{"name": "pick", "kind": "choice", "required": true, "options": [{"value": "a"}, {"value": "b"}]}],
 "judgmentsPerUnit": {"min": 2}, "assignmentSeconds": 30}`

// crowdCheckRuns is how many runs of fetch → label (human) → ship the
// crowd fixture drives to SUCCEEDED: one unit for each case of
// TestCheckCrowd to break.
const crowdCheckRuns = 12

type crowdBundle struct {
	ctx     context.Context
	backend string
	rd      chaos.Reader
	db      *sql.DB
	exp     chaos.Expectations
	// expired and released are the assignments a contributor let lapse
	// and one gave back, each on a unit of its own (expiredUnit,
	// releasedUnit); others are the other finalized units.
	expired, released         uuid.UUID
	expiredUnit, releasedUnit uuid.UUID
	others                    []uuid.UUID
	// lurker is a contributor who judged none of the units.
	lurker uuid.UUID
}

// setupCrowd runs, on a fresh database with a real worker for the job
// steps and contributors through the client, crowdCheckRuns runs of
// fetch → label (a human step, 2 judgments per unit) → ship. Before the
// two judging contributors work every unit, one contributor takes a unit
// and vanishes (the reaper, here AssignmentsExpire on a clock past the
// lease, expires it) and another takes one and releases it. Every run
// SUCCEEDED, every unit is FINALIZED with 2 judgments.
func setupCrowd(t *testing.T, backend testdb.Backend) *crowdBundle {
	t.Helper()
	ctx := context.Background()
	url := backend.URL(t)
	client := taskClient(t, url, "which", crowdCheckTask)
	def, err := docket.NewWorkflow("crowdcheck").
		Job("fetch", "crowdcheck.step").
		Human("label", "which", docket.After("fetch")).
		Job("ship", "crowdcheck.step", docket.After("label")).
		Definition()
	require.NoError(t, err)
	_, _, err = client.WorkflowPut(ctx, def)
	require.NoError(t, err)

	w := docket.NewWorker(client, docket.WorkerConfig{
		Queues: map[string]int{"crowdcheck.step": 4}, PollInterval: 20 * time.Millisecond, LeaderTTL: 300 * time.Millisecond,
		WorkflowSweepInterval: 100 * time.Millisecond,
	})
	docket.AddHandler(w, func(ctx context.Context, j *docket.Job[crowdStep]) error {
		return docket.SetResult(ctx, map[string]any{"step": j.Args.Run.Step})
	})
	require.NoError(t, w.Start(ctx))
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		w.Stop(sctx)
	}
	t.Cleanup(stop)
	for i := range crowdCheckRuns {
		_, err := client.RunStart(ctx, "crowdcheck", map[string]int{"n": i}, &docket.RunStartOpts{IdempotencyKey: fmt.Sprintf("c-%d", i)})
		require.NoError(t, err)
	}
	var pool *docket.Pool
	waitFor(t, "every run's unit", func() bool {
		pools, err := client.PoolList(ctx, docket.PoolListParams{Workflow: "crowdcheck"})
		require.NoError(t, err)
		if len(pools) == 0 {
			return false
		}
		pool = pools[0]
		return pool.Counts.Judgable == crowdCheckRuns
	})
	contributor := func() uuid.UUID { return newContributor(t, client) }
	b := &crowdBundle{ctx: ctx, backend: backend.Name, rd: teststore.Open(t, url), exp: chaos.Expectations{Runs: map[string]flow.RunState{}}}
	for i := range crowdCheckRuns {
		b.exp.Runs[fmt.Sprintf("c-%d", i)] = flow.RunSucceeded
	}
	vanisher, releaser := contributor(), contributor()
	b.lurker = contributor()
	taken, err := client.AssignmentTake(ctx, pool.ID, vanisher)
	require.NoError(t, err)
	b.expired, b.expiredUnit = taken.Assignment.ID, taken.Unit.ID
	taken, err = client.AssignmentTake(ctx, pool.ID, releaser)
	require.NoError(t, err)
	b.released, b.releasedUnit = taken.Assignment.ID, taken.Unit.ID
	_, err = client.AssignmentRelease(ctx, b.released, releaser)
	require.NoError(t, err)
	later, err := docket.NewClient(ctx, docket.Config{DatabaseURL: url, Now: func() time.Time { return time.Now().Add(time.Hour) }})
	require.NoError(t, err)
	n, err := later.AssignmentsExpire(ctx)
	require.NoError(t, err)
	require.NoError(t, later.Close())
	require.Equal(t, 1, n, "the vanished contributor's assignment expired")

	for k, who := range []uuid.UUID{contributor(), contributor()} {
		for {
			taken, err := client.AssignmentTake(ctx, pool.ID, who)
			if docket.IsNoUnit(err) {
				break
			}
			require.NoError(t, err)
			_, err = client.JudgmentSubmit(ctx, taken.Assignment.ID, who, json.RawMessage(fmt.Sprintf(`{"pick": %q}`, []string{"a", "b"}[k])))
			require.NoError(t, err)
		}
	}
	waitFor(t, "every run to succeed", func() bool {
		open, err := client.RunList(ctx, docket.RunListParams{States: []docket.RunState{docket.RunRunning, docket.RunPaused}, Limit: 1})
		require.NoError(t, err)
		return len(open) == 0
	})
	// The history is complete: the worker stops before the tests break the
	// tables by hand, or its leader's reaper would expire an assignment a
	// case left ACTIVE past its expiry before the checker sees it.
	stop()
	units, err := client.UnitList(ctx, pool.ID, docket.UnitListParams{Limit: 100})
	require.NoError(t, err)
	require.Len(t, units, crowdCheckRuns)
	for _, u := range units {
		require.Equal(t, docket.UnitFinalized, u.State)
		require.Equal(t, 2, u.JudgmentCount)
		if u.ID != b.expiredUnit && u.ID != b.releasedUnit {
			b.others = append(b.others, u.ID)
		}
	}
	b.db = openCheckDB(t, url)
	return b
}

// taskClient is a client on a migrated database at url, with the task
// taskJSON put under name.
func taskClient(t *testing.T, url, name, taskJSON string) *docket.Client {
	t.Helper()
	ctx := context.Background()
	client, err := docket.NewClient(ctx, docket.Config{DatabaseURL: url, AutoMigrate: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, client.Close()) })
	tmpl, err := docket.ParseTask([]byte(taskJSON))
	require.NoError(t, err)
	_, _, err = client.TaskPut(ctx, name, tmpl)
	require.NoError(t, err)
	return client
}

// newContributor creates a contributor and returns its id.
func newContributor(t *testing.T, client *docket.Client) uuid.UUID {
	t.Helper()
	who, err := client.ContributorCreate(context.Background(), docket.ContributorCreateParams{ExternalID: uuid.NewString()})
	require.NoError(t, err)
	return who.ID
}

// openCheckDB opens the database at url for the checker (crowdcheck.Open),
// closed when the test ends.
func openCheckDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := crowdcheck.Open(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !done() {
		require.False(t, time.Now().After(deadline), "%s: not within 30 s", what)
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *crowdBundle) check(t *testing.T) []chaos.Violation {
	t.Helper()
	s, err := chaos.Load(b.ctx, b.rd)
	require.NoError(t, err)
	s.Crowd, err = chaos.LoadCrowd(b.ctx, b.db)
	require.NoError(t, err)
	return s.Check(b.exp)
}

func (b *crowdBundle) exec(t *testing.T, query string) {
	t.Helper()
	_, err := b.db.ExecContext(b.ctx, query)
	require.NoError(t, err, "%s", query)
}

// hourSQL is an hour in a time column's arithmetic.
func (b *crowdBundle) hourSQL() string {
	if b.backend == "postgres" {
		return "interval '1 hour'"
	}
	return "3600000000" // unix microseconds
}

// falseSQL is false as the backend stores a boolean.
func (b *crowdBundle) falseSQL() string {
	if b.backend == "postgres" {
		return "false"
	}
	return "0"
}

// trueSQL is true as the backend stores a boolean.
func (b *crowdBundle) trueSQL() string {
	if b.backend == "postgres" {
		return "true"
	}
	return "1"
}

func (b *crowdBundle) scalar(t *testing.T, query string) string {
	t.Helper()
	var v string
	require.NoError(t, b.db.QueryRowContext(b.ctx, query).Scan(&v), "%s", query)
	return v
}

// TestCheckCrowd: a real history of runs through a human step, with a
// vanished and a released assignment, holds every human work invariant;
// then the database is broken by hand, one unit at a time, once for each
// invariant, and the checker must report that invariant on that unit.
func TestCheckCrowd(t *testing.T) {
	t.Parallel()
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			b := setupCrowd(t, backend)
			require.Empty(t, b.check(t), "a correct history has no violation")

			assignmentOf := func(unit uuid.UUID) string {
				return b.scalar(t, fmt.Sprintf(`SELECT id FROM docket_assignments WHERE unit_id = '%s' AND state = 'SUBMITTED' ORDER BY id LIMIT 1`, unit))
			}
			runOf := func(unit uuid.UUID) string {
				return b.scalar(t, fmt.Sprintf(`SELECT run_id FROM docket_units WHERE id = '%s'`, unit))
			}
			u := b.others
			cases := []struct {
				name    string
				kind    string
				unit    uuid.UUID
				breakIt func(unit uuid.UUID)
			}{
				{"slot lost", chaos.KindSlotOverAssigned, u[0], func(unit uuid.UUID) {
					b.exec(t, fmt.Sprintf(`UPDATE docket_units SET slots_taken = slots_taken + 1 WHERE id = '%s'`, unit))
				}},
				{"slot handed out over the target", chaos.KindSlotOverAssigned, b.expiredUnit, func(unit uuid.UUID) {
					b.exec(t, fmt.Sprintf(`UPDATE docket_assignments SET state = 'ACTIVE', expires_at = started_at + %s WHERE id = '%s'`, b.hourSQL(), b.expired))
					b.exec(t, fmt.Sprintf(`UPDATE docket_units SET slots_taken = slots_taken + 1 WHERE id = '%s'`, unit))
				}},
				{"expired assignment left ACTIVE", chaos.KindExpiredAssignment, b.releasedUnit, func(unit uuid.UUID) {
					b.exec(t, fmt.Sprintf(`UPDATE docket_assignments SET state = 'ACTIVE', expires_at = started_at - %s WHERE id = '%s'`, b.hourSQL(), b.released))
					b.exec(t, fmt.Sprintf(`UPDATE docket_units SET slots_taken = slots_taken + 1 WHERE id = '%s'`, unit))
				}},
				{"a third judgment", chaos.KindJudgmentsOverTarget, u[1], func(unit uuid.UUID) {
					a := assignmentOf(unit)
					na, nj := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
					b.exec(t, fmt.Sprintf(`INSERT INTO docket_assignments (id, unit_id, pool_id, contributor_id, state, started_at, expires_at, heartbeat_at, finished_at)
						SELECT '%s', unit_id, pool_id, '%s', state, started_at, expires_at, heartbeat_at, finished_at FROM docket_assignments WHERE id = '%s'`, na, b.lurker, a))
					b.exec(t, fmt.Sprintf(`INSERT INTO docket_judgments (id, assignment_id, unit_id, pool_id, contributor_id, data, trust, golden, tainted, started_at, submitted_at)
						SELECT '%s', '%s', unit_id, pool_id, '%s', data, trust, golden, tainted, started_at, submitted_at FROM docket_judgments WHERE assignment_id = '%s'`, nj, na, b.lurker, a))
					b.exec(t, fmt.Sprintf(`UPDATE docket_units SET slots_taken = 3, judgment_count = 3 WHERE id = '%s'`, unit))
				}},
				{"judgment count off", chaos.KindJudgmentCount, u[2], func(unit uuid.UUID) {
					b.exec(t, fmt.Sprintf(`UPDATE docket_units SET judgment_count = 1 WHERE id = '%s'`, unit))
				}},
				{"judgment of an assignment not SUBMITTED", chaos.KindJudgmentUntied, u[3], func(unit uuid.UUID) {
					b.exec(t, fmt.Sprintf(`UPDATE docket_assignments SET state = 'EXPIRED' WHERE id = '%s'`, assignmentOf(unit)))
					b.exec(t, fmt.Sprintf(`UPDATE docket_units SET slots_taken = 1 WHERE id = '%s'`, unit))
				}},
				{"judgment stored after expiry", chaos.KindLateJudgment, u[4], func(unit uuid.UUID) {
					b.exec(t, fmt.Sprintf(`UPDATE docket_judgments SET submitted_at = submitted_at + %s WHERE assignment_id = '%s'`, b.hourSQL(), assignmentOf(unit)))
				}},
				{"one contributor judged twice", chaos.KindContributorTwice, u[5], func(unit uuid.UUID) {
					a := assignmentOf(unit)
					other := b.scalar(t, fmt.Sprintf(`SELECT contributor_id FROM docket_judgments WHERE unit_id = '%s' AND assignment_id <> '%s'`, unit, a))
					b.exec(t, fmt.Sprintf(`UPDATE docket_judgments SET contributor_id = '%s' WHERE assignment_id = '%s'`, other, a))
				}},
				{"step completed twice", chaos.KindHumanStepCompletion, u[6], func(unit uuid.UUID) {
					s, err := chaos.LoadFlows(b.ctx, b.rd)
					require.NoError(t, err)
					run := uuid.MustParse(runOf(unit))
					var row string
					for _, tr := range s.StepTransitions {
						if tr.RunID == run && tr.Step == "label" && tr.To == flow.StepSucceeded {
							row, _, _ = strings.Cut(tr.EventID, "-")
						}
					}
					require.NotEmpty(t, row)
					b.exec(t, `INSERT INTO docket_outbox (event_type, data, created_at) SELECT event_type, data, created_at FROM docket_outbox WHERE id = `+row)
				}},
				{"step SUCCEEDED, unit not FINALIZED", chaos.KindHumanStepCompletion, u[7], func(unit uuid.UUID) {
					b.exec(t, fmt.Sprintf(`UPDATE docket_units SET state = 'JUDGABLE', result = NULL WHERE id = '%s'`, unit))
				}},
				{"run not advanced past the step", chaos.KindHumanStepCompletion, u[8], func(unit uuid.UUID) {
					b.exec(t, fmt.Sprintf(`DELETE FROM docket_steps WHERE run_id = '%s' AND step = 'ship'`, runOf(unit)))
				}},
				{"result other than the step's output", chaos.KindHumanStepOutput, u[9], func(unit uuid.UUID) {
					b.exec(t, fmt.Sprintf(`UPDATE docket_units SET result = '{"pick": "neither"}' WHERE id = '%s'`, unit))
				}},
			}
			for _, c := range cases {
				c.breakIt(c.unit)
				var got []string
				for _, v := range b.check(t) {
					if v.UnitID == c.unit {
						got = append(got, v.Kind)
					}
				}
				require.Contains(t, got, c.kind, "%s: the checker must catch a %s violation on unit %s", c.name, c.kind, c.unit)
			}

			// A result changed by quality control's repair after its step
			// completed (an audit row whose old result is the step's
			// output) is no violation: the run is not rewound.
			repaired := u[9]
			b.exec(t, fmt.Sprintf(`INSERT INTO docket_unit_audits (id, unit_id, pool_id, old_result, new_result, action,
					cause_contributor_id, cause_check, cause_untaint, cause_reason, why, at)
				SELECT '%s', u.id, u.pool_id, s.output, u.result, 'recompute', '%s', 'trust', %s, 'r', 'w', u.updated_at
				FROM docket_units u JOIN docket_steps s ON s.unit_id = u.id WHERE u.id = '%s'`,
				uuid.Must(uuid.NewV7()), b.lurker, b.falseSQL(), repaired))
			for _, v := range b.check(t) {
				require.False(t, v.UnitID == repaired && v.Kind == chaos.KindHumanStepOutput, "a repaired result is compared by its first one: %+v", v)
			}
		})
	}
}
