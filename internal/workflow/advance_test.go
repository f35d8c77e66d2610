package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/crowd"
	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
	"github.com/docket-run/docket/internal/workflow"
)

// bundle is one test's store, advancer and clock.
type bundle struct {
	ctx   context.Context
	st    store.Store
	adv   *workflow.Advancer
	clock atomic.Int64 // unix nanoseconds
	// ran counts the attempts of each job type.
	mu  sync.Mutex
	ran map[string]int
}

func (b *bundle) now() time.Time { return time.Unix(0, b.clock.Load()).UTC() }

func (b *bundle) advanceClock(d time.Duration) { b.clock.Add(int64(d)) }

func (b *bundle) advancer() (*workflow.Advancer, error) { return b.adv, nil }

// eachBackend runs fn on a fresh store of each backend.
func eachBackend(t *testing.T, fn func(t *testing.T, b *bundle)) {
	for _, backend := range testdb.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			b := &bundle{ctx: context.Background(), st: teststore.Open(t, backend.URL(t)), ran: map[string]int{}}
			b.clock.Store(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
			adv, err := workflow.NewAdvancer(b.now)
			require.NoError(t, err)
			b.adv = adv
			fn(t, b)
		})
	}
}

// put stores a definition given as JSON and returns its name.
func (b *bundle) put(t *testing.T, src string) string {
	t.Helper()
	def, err := flow.Decode([]byte(src))
	require.NoError(t, err)
	canon, err := flow.Canonical(def)
	require.NoError(t, err)
	hash, err := flow.Hash(def)
	require.NoError(t, err)
	_, _, err = b.st.WorkflowPut(b.ctx, &store.WorkflowPutParams{Name: def.Name, Definition: canon, Hash: hash, Now: b.now()})
	require.NoError(t, err)
	return def.Name
}

func (b *bundle) start(t *testing.T, name, input string) *flow.Run {
	t.Helper()
	res, err := b.adv.Start(b.ctx, b.st, []*workflow.StartParams{{Workflow: name, Input: json.RawMessage(input)}})
	require.NoError(t, err)
	return res[0].Run
}

// payload is what a step job receives.
type payload struct {
	Run   workflow.StepRef           `json:"run"`
	Input json.RawMessage            `json:"input"`
	Steps map[string]json.RawMessage `json:"steps"`
	Item  json.RawMessage            `json:"item"`
	Index *int                       `json:"index"`
}

// handler ends one job: its result, or an error (the job goes DEAD).
type handler func(p *payload) (json.RawMessage, error)

// work acquires the queued jobs of the queues, ends them by handlers
// (acquiring RUNNING, then finishing), and advances their runs, until no
// job is left. It returns how many jobs ran.
func (b *bundle) work(t *testing.T, handlers map[string]handler) int {
	t.Helper()
	total := 0
	for round := 0; round < 1000; round++ {
		var rows []*job.Row
		for q := range handlers {
			got, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: q, Max: 1000, Owner: "test", LeaseDuration: time.Minute, Now: b.now()})
			require.NoError(t, err)
			rows = append(rows, got...)
		}
		if len(rows) == 0 {
			return total
		}
		total += len(rows)
		var fins []*store.JobFinishParams
		runs := map[uuid.UUID]bool{}
		for _, row := range rows {
			var p payload
			require.NoError(t, json.Unmarshal(row.Payload, &p), "payload %s", row.Payload)
			id, ok := workflow.IsStepPayload(row.Payload)
			require.True(t, ok)
			require.Equal(t, id, p.Run.RunID)
			runs[id] = true
			b.mu.Lock()
			b.ran[row.Type]++
			b.mu.Unlock()
			out, err := handlers[row.Type](&p)
			fin := &store.JobFinishParams{ID: row.ID, Attempt: row.Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess, Result: out}
			if err != nil {
				fin = &store.JobFinishParams{ID: row.ID, Attempt: row.Attempt, State: job.StateDead, Outcome: job.OutcomeError, Error: err.Error()}
			}
			fins = append(fins, fin)
		}
		ok, err := b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Jobs: fins, Now: b.now()})
		require.NoError(t, err)
		for _, a := range ok {
			require.NotEmpty(t, a, "the finish was written")
		}
		// Alternate rounds advance each run on its own and every run of
		// the round in one transaction (the queue's way), so that each
		// test covers both.
		if round%2 == 0 {
			for id := range runs {
				_, err := b.adv.AdvanceRun(b.ctx, b.st, id)
				require.NoError(t, err)
			}
		} else {
			require.NoError(t, b.adv.AdvanceTogether(b.ctx, b.st, slices.Collect(maps.Keys(runs))))
		}
	}
	t.Fatal("jobs kept coming")
	return total
}

func (b *bundle) get(t *testing.T, id uuid.UUID) (*flow.Run, map[string][]*flow.StepInstance) {
	t.Helper()
	run, err := b.st.RunGet(b.ctx, id)
	require.NoError(t, err)
	list, err := b.st.StepList(b.ctx, id)
	require.NoError(t, err)
	steps := map[string][]*flow.StepInstance{}
	for _, s := range list {
		steps[s.Step] = append(steps[s.Step], s)
	}
	return run, steps
}

// states is "step:STATE" for each instance, for compact assertions.
func states(steps map[string][]*flow.StepInstance) map[string]flow.StepState {
	out := map[string]flow.StepState{}
	for name, insts := range steps {
		for _, in := range insts {
			key := name
			if len(insts) > 1 {
				key = fmt.Sprintf("%s[%d]", name, in.Index)
			}
			out[key] = in.State
		}
	}
	return out
}

// echo returns {"step": <step>, "input": <input>, "parents": <steps>}.
func echo(p *payload) (json.RawMessage, error) {
	return json.Marshal(map[string]any{"step": p.Run.Step, "input": p.Input, "parents": p.Steps})
}

const (
	S = flow.StepSucceeded
	F = flow.StepFailed
	K = flow.StepSkipped
	C = flow.StepCanceled
	R = flow.StepRunning
)

func TestChain(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"chain","steps":[
			{"name":"a","job":{"type":"inc"}},
			{"name":"b","after":["a"],"job":{"type":"inc"}},
			{"name":"c","after":["b"],"job":{"type":"inc"}}]}`)
		run := b.start(t, name, `{"n":1}`)
		_, steps := b.get(t, run.ID)
		require.Equal(t, map[string]flow.StepState{"a": R}, states(steps), "only the root is released at start")
		inc := func(p *payload) (json.RawMessage, error) {
			var n struct{ N float64 }
			src := p.Input
			for _, v := range p.Steps {
				var view struct{ Output json.RawMessage }
				require.NoError(t, json.Unmarshal(v, &view))
				src = view.Output
			}
			require.NoError(t, json.Unmarshal(src, &n))
			return json.Marshal(map[string]float64{"n": n.N + 1})
		}
		require.Equal(t, 3, b.work(t, map[string]handler{"inc": inc}))
		run, steps = b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State)
		require.Equal(t, map[string]flow.StepState{"a": S, "b": S, "c": S}, states(steps))
		require.JSONEq(t, `{"c":{"n":4}}`, string(run.Output), "the output of the step without dependents")
		// Advancing a finished run again changes nothing.
		mark := outboxCount(t, b)
		again, err := b.adv.AdvanceRun(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		require.Equal(t, flow.RunSucceeded, again.State)
		require.Equal(t, mark, outboxCount(t, b), "a second advancement writes nothing")
	})
}

func outboxCount(t *testing.T, b *bundle) int {
	t.Helper()
	evs, err := b.st.OutboxList(b.ctx, &store.OutboxListParams{Limit: 100000})
	require.NoError(t, err)
	return len(evs)
}

func TestDiamondPayloadAndEvents(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"diamond","steps":[
			{"name":"top","job":{"type":"echo"}},
			{"name":"left","after":["top"],"job":{"type":"echo"}},
			{"name":"right","after":["top"],"job":{"type":"echo"}},
			{"name":"join","after":["left","right"],"job":{"type":"join"}}]}`)
		run := b.start(t, name, `{"x":"in"}`)
		var joined *payload
		b.work(t, map[string]handler{"echo": echo, "join": func(p *payload) (json.RawMessage, error) {
			joined = p
			return json.RawMessage(`"joined"`), nil
		}})
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State)
		require.Equal(t, map[string]flow.StepState{"top": S, "left": S, "right": S, "join": S}, states(steps))
		require.Equal(t, workflow.StepRef{RunID: run.ID, Step: "join"}, joined.Run)
		require.JSONEq(t, `{"x":"in"}`, string(joined.Input))
		require.Len(t, joined.Steps, 2, "the parents only")
		var left struct {
			Output struct{ Step string }
		}
		require.NoError(t, json.Unmarshal(joined.Steps["left"], &left))
		require.Equal(t, "left", left.Output.Step)
		require.JSONEq(t, `{"join":"joined"}`, string(run.Output))

		evs, err := b.st.OutboxList(b.ctx, &store.OutboxListParams{Limit: 100000})
		require.NoError(t, err)
		var runTo []flow.RunState
		stepTo := map[string][]flow.StepState{}
		for _, ev := range evs {
			switch ev.Type {
			case flow.EventRunStateChanged:
				var d flow.RunStateChangedData
				require.NoError(t, json.Unmarshal(ev.Data, &d))
				for _, tr := range d.Transitions {
					runTo = append(runTo, tr.To)
				}
			case flow.EventStepStateChanged:
				var d flow.StepStateChangedData
				require.NoError(t, json.Unmarshal(ev.Data, &d))
				for _, tr := range d.Transitions {
					stepTo[tr.Step] = append(stepTo[tr.Step], tr.To)
				}
			}
		}
		require.Equal(t, []flow.RunState{flow.RunRunning, flow.RunSucceeded}, runTo)
		for _, s := range []string{"top", "left", "right", "join"} {
			require.Equal(t, []flow.StepState{R, S}, stepTo[s], "events of %s", s)
		}
	})
}

func TestIfSkips(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"cond","steps":[
			{"name":"score","job":{"type":"score"}},
			{"name":"review","after":["score"],"if":"steps.score.output.confidence < 0.8","job":{"type":"echo"}},
			{"name":"after_review","after":["review"],"job":{"type":"echo"}},
			{"name":"publish","after":["score","review"],"job":{"type":"echo"}},
			{"name":"bad","after":["score"],"if":"steps.score.output.nope > 1","job":{"type":"echo"},"onFailure":"continue"}]}`)
		high := b.start(t, name, `{}`)
		b.work(t, map[string]handler{"echo": echo, "score": func(*payload) (json.RawMessage, error) {
			return json.RawMessage(`{"confidence":0.9}`), nil
		}})
		run, steps := b.get(t, high.ID)
		require.Equal(t, flow.RunSucceeded, run.State, run.Error)
		require.Equal(t, map[string]flow.StepState{"score": S, "review": K, "after_review": K, "publish": S, "bad": F}, states(steps),
			"review skipped; so is a step after only it; publish runs after a skipped branch; a CEL error fails its step")
		require.Contains(t, steps["bad"][0].Error, `step "bad": if:`)
		require.Contains(t, steps["review"][0].Error, "is false")

		low := b.start(t, name, `{}`)
		b.work(t, map[string]handler{"echo": echo, "score": func(*payload) (json.RawMessage, error) {
			return json.RawMessage(`{"confidence":0.5}`), nil
		}})
		_, steps = b.get(t, low.ID)
		require.Equal(t, S, steps["review"][0].State)
		require.Equal(t, S, steps["after_review"][0].State)
	})
}

func TestForEachAndFanIn(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"fan","steps":[
			{"name":"list","job":{"type":"list"}},
			{"name":"each","after":["list"],"forEach":"steps.list.output.items","if":"item != 13","job":{"type":"square"}},
			{"name":"sum","after":["each"],"job":{"type":"sum"}}]}`)
		items := make([]int, 100)
		for i := range items {
			items[i] = i
		}
		run := b.start(t, name, `{}`)
		var got []json.RawMessage
		n := b.work(t, map[string]handler{
			"list": func(*payload) (json.RawMessage, error) { return json.Marshal(map[string]any{"items": items}) },
			"square": func(p *payload) (json.RawMessage, error) {
				var item float64
				require.NoError(t, json.Unmarshal(p.Item, &item))
				require.Equal(t, int(item), *p.Index)
				return json.Marshal(item * item)
			},
			"sum": func(p *payload) (json.RawMessage, error) {
				var view struct{ Output []json.RawMessage }
				require.NoError(t, json.Unmarshal(p.Steps["each"], &view))
				got = view.Output
				return json.RawMessage(`"ok"`), nil
			},
		})
		require.Equal(t, 1+99+1, n, "item 13 is skipped by its instance's if")
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State, run.Error)
		require.Len(t, steps["each"], 100)
		require.Len(t, got, 100, "fan-in sees every instance")
		for i, out := range got {
			want := fmt.Sprint(i * i)
			if i == 13 {
				want = "null"
			}
			require.JSONEq(t, want, string(out), "output %d in index order", i)
		}
		require.Equal(t, K, steps["each"][13].State)
	})
}

func TestEmptyForEachAndTooMany(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"empty","steps":[
			{"name":"each","forEach":"input.items","job":{"type":"square"}},
			{"name":"sum","after":["each"],"job":{"type":"sum"}}]}`)
		var seen json.RawMessage
		hs := map[string]handler{
			"square": echo,
			"sum": func(p *payload) (json.RawMessage, error) {
				seen = p.Steps["each"]
				return nil, nil
			},
		}
		run := b.start(t, name, `{"items":[]}`)
		require.Equal(t, 1, b.work(t, hs), "only sum runs")
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State)
		require.Len(t, steps["each"], 1)
		require.Equal(t, S, steps["each"][0].State)
		require.JSONEq(t, `[]`, string(steps["each"][0].Output))
		require.JSONEq(t, `{"state":"SUCCEEDED","output":[],"confidence":[]}`, string(seen))
		require.JSONEq(t, `{"sum":null}`, string(run.Output))

		big := b.start(t, name, fmt.Sprintf(`{"items":%s}`, jsonRange(flow.MaxForEachItems+1)))
		run, steps = b.get(t, big.ID)
		require.Equal(t, flow.RunFailed, run.State)
		require.Equal(t, F, steps["each"][0].State)
		require.Contains(t, steps["each"][0].Error, "yielded 10001 items; a step fans out to at most 10000")
		require.Contains(t, run.Error, `step "each"[0] failed`)
	})
}

func jsonRange(n int) string {
	b, _ := json.Marshal(make([]int, n))
	return string(b)
}

func TestFailurePolicies(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"fails","steps":[
			{"name":"a","job":{"type":"echo"}},
			{"name":"tolerated","after":["a"],"job":{"type":"boom"},"onFailure":"continue"},
			{"name":"needs_it","after":["tolerated"],"job":{"type":"echo"}},
			{"name":"cleanup","after":["tolerated"],"trigger":"all_done","job":{"type":"echo"}},
			{"name":"fatal","after":["cleanup"],"job":{"type":"boom"}},
			{"name":"slow","after":["cleanup"],"job":{"type":"slow"}},
			{"name":"never","after":["fatal"],"job":{"type":"echo"}}]}`)
		boom := func(*payload) (json.RawMessage, error) { return nil, fmt.Errorf("boom") }
		run := b.start(t, name, `{}`)
		b.work(t, map[string]handler{"echo": echo, "boom": boom}) // slow is never worked: it stays QUEUED
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunFailed, run.State)
		require.Contains(t, run.Error, `step "fatal"[0] failed: job`)
		require.Contains(t, run.Error, "boom")
		require.Equal(t, map[string]flow.StepState{"a": S, "tolerated": F, "needs_it": K, "cleanup": S, "fatal": F, "slow": C}, states(steps))
		slow, err := b.st.JobGet(b.ctx, steps["slow"][0].JobID)
		require.NoError(t, err)
		require.Equal(t, job.StateCanceled, slow.State, "the released job that had not started is canceled")
	})
}

func TestCancelMidRun(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"cancel","steps":[
			{"name":"running","job":{"type":"held"}},
			{"name":"queued","job":{"type":"later"}},
			{"name":"wait","signal":{}},
			{"name":"after","after":["running"],"job":{"type":"echo"}}]}`)
		run := b.start(t, name, `{}`)
		rows, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "held", Max: 1, Owner: "w", LeaseDuration: time.Minute, Now: b.now()})
		require.NoError(t, err)
		require.Len(t, rows, 1)

		got, err := b.adv.Cancel(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		require.Equal(t, flow.RunRunning, got.State, "a step job still runs: the run waits for it")
		require.True(t, got.CancelRequested)
		_, steps := b.get(t, run.ID)
		require.Equal(t, map[string]flow.StepState{"running": R, "queued": C, "wait": C}, states(steps))
		held, err := b.st.JobGet(b.ctx, rows[0].ID)
		require.NoError(t, err)
		require.True(t, held.CancelRequested, "the running job is asked to stop")
		queued, err := b.st.JobGet(b.ctx, steps["queued"][0].JobID)
		require.NoError(t, err)
		require.Equal(t, job.StateCanceled, queued.State)

		again, err := b.adv.Cancel(b.ctx, b.st, run.ID)
		require.NoError(t, err, "a repeated cancel is a no-op")
		require.Equal(t, flow.RunRunning, again.State)
		for _, op := range []func(context.Context, workflow.Store, uuid.UUID) (*flow.Run, error){b.adv.Pause, b.adv.Resume, b.adv.Retry} {
			_, err = op(b.ctx, b.st, run.ID)
			require.ErrorIs(t, err, workflow.ErrConflict, "a run being canceled")
		}
		_, err = b.adv.AdvanceRun(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		run, _ = b.get(t, run.ID)
		require.Equal(t, flow.RunRunning, run.State, "nothing new: still waiting")

		// The holder honours the cancel: the instance ends CANCELED,
		// nothing after it is released, and the run is CANCELED.
		ok, err := b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: b.now(), Jobs: []*store.JobFinishParams{{
			ID: rows[0].ID, Attempt: rows[0].Attempt, State: job.StateCanceled, Outcome: job.OutcomeCanceled, Error: "stopped"}}})
		require.NoError(t, err)
		require.Equal(t, []job.State{job.StateCanceled}, ok)
		_, err = b.adv.AdvanceRun(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		run, steps = b.get(t, run.ID)
		require.Equal(t, flow.RunCanceled, run.State)
		require.Equal(t, "canceled", run.Error)
		require.Equal(t, map[string]flow.StepState{"running": C, "queued": C, "wait": C}, states(steps))
		_, err = b.adv.Pause(b.ctx, b.st, run.ID)
		require.ErrorIs(t, err, workflow.ErrConflict)

		// A run with nothing running is CANCELED at once.
		idle := b.start(t, name, `{}`)
		got, err = b.adv.Cancel(b.ctx, b.st, idle.ID)
		require.NoError(t, err)
		require.Equal(t, flow.RunCanceled, got.State)
		_, steps = b.get(t, idle.ID)
		require.Equal(t, map[string]flow.StepState{"running": C, "queued": C, "wait": C}, states(steps))
	})
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"pause","steps":[
			{"name":"a","job":{"type":"echo"}},
			{"name":"b","after":["a"],"job":{"type":"echo"}}]}`)
		run := b.start(t, name, `{}`)
		got, err := b.adv.Pause(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		require.Equal(t, flow.RunPaused, got.State)
		_, err = b.adv.Pause(b.ctx, b.st, run.ID)
		require.NoError(t, err, "a repeated pause is a no-op")
		require.Equal(t, 1, b.work(t, map[string]handler{"echo": echo}), "the running step finishes; nothing new is released")
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunPaused, run.State)
		require.Equal(t, map[string]flow.StepState{"a": S}, states(steps))

		got, err = b.adv.Resume(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		require.Equal(t, flow.RunRunning, got.State)
		_, steps = b.get(t, run.ID)
		require.Equal(t, R, steps["b"][0].State, "resume releases what became ready")
		_, err = b.adv.Resume(b.ctx, b.st, run.ID)
		require.NoError(t, err, "a repeated resume is a no-op")
		b.work(t, map[string]handler{"echo": echo})
		run, _ = b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State)
		_, err = b.adv.Resume(b.ctx, b.st, run.ID)
		require.ErrorIs(t, err, workflow.ErrConflict)
		_, err = b.adv.Retry(b.ctx, b.st, run.ID)
		require.ErrorIs(t, err, workflow.ErrConflict)
	})
}

func TestRetryRerunsFailedAndDownstream(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"retry","steps":[
			{"name":"ok","job":{"type":"ok"}},
			{"name":"side","job":{"type":"ok"}},
			{"name":"flaky","after":["ok"],"job":{"type":"flaky"}},
			{"name":"each","after":["flaky"],"forEach":"steps.flaky.output.items","job":{"type":"ok"}},
			{"name":"last","after":["each","side"],"job":{"type":"ok"}}]}`)
		var fail atomic.Bool
		fail.Store(true)
		const items = `{"items":[1,2,3]}`
		hs := map[string]handler{
			"ok": echo,
			"flaky": func(*payload) (json.RawMessage, error) {
				if fail.Load() {
					return nil, fmt.Errorf("flaky failed")
				}
				return json.RawMessage(items), nil
			},
		}
		run := b.start(t, name, `{}`)
		b.work(t, hs)
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunFailed, run.State)
		okJob := steps["ok"][0].JobID
		require.Equal(t, map[string]int{"ok": 2, "flaky": 1}, b.ranCopy())

		fail.Store(false)
		got, err := b.adv.Retry(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		require.Equal(t, flow.RunRunning, got.State)
		_, err = b.adv.Retry(b.ctx, b.st, run.ID)
		require.NoError(t, err, "a repeated retry is a no-op")
		b.work(t, hs)
		run, steps = b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State, run.Error)
		require.Equal(t, okJob, steps["ok"][0].JobID, "the succeeded step keeps its job and output")
		require.Equal(t, 1, steps["ok"][0].Generation)
		require.Equal(t, 2, steps["flaky"][0].Generation)
		require.Equal(t, map[string]int{"ok": 2 + 3 + 1, "flaky": 2}, b.ranCopy(), "only flaky and what follows ran again")

		_, err = b.adv.Retry(b.ctx, b.st, run.ID)
		require.ErrorIs(t, err, workflow.ErrConflict, "a SUCCEEDED run is not retried")
	})
}

func (b *bundle) ranCopy() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int{}
	for k, v := range b.ran {
		out[k] = v
	}
	return out
}

func TestSignals(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"approve","steps":[
			{"name":"fetch","job":{"type":"echo"}},
			{"name":"approve","after":["fetch"],"signal":{"timeout":"1h"}},
			{"name":"optional","after":["fetch"],"signal":{"timeout":"10m"},"onFailure":"continue"},
			{"name":"publish","after":["approve"],"job":{"type":"echo"}}]}`)
		run := b.start(t, name, `{}`)
		_, err := b.adv.Signal(b.ctx, b.st, run.ID, "approve", json.RawMessage(`{"ok":true}`))
		require.ErrorIs(t, err, workflow.ErrConflict, "not waiting yet")
		_, err = b.adv.Signal(b.ctx, b.st, run.ID, "fetch", nil)
		require.ErrorIs(t, err, workflow.ErrConflict, "not a signal step")
		_, err = b.adv.Signal(b.ctx, b.st, run.ID, "nosuch", nil)
		require.ErrorIs(t, err, workflow.ErrNoStep, "no such step")
		require.NotErrorIs(t, err, workflow.ErrConflict)
		b.work(t, map[string]handler{"echo": echo})

		// The optional wait times out (SKIPPED, onFailure continue), seen
		// by the sweeper.
		b.advanceClock(11 * time.Minute)
		sw := &workflow.Sweeper{Advancer: b.advancer, Store: b.st, Log: discard(), Now: b.now}
		sw.Sweep(b.ctx)
		_, steps := b.get(t, run.ID)
		require.Equal(t, K, steps["optional"][0].State)
		require.Contains(t, steps["optional"][0].Error, "no signal within its timeout of 10m")
		require.Equal(t, R, steps["approve"][0].State)

		got, err := b.adv.Signal(b.ctx, b.st, run.ID, "approve", json.RawMessage(`{"by":"ann"}`))
		require.NoError(t, err)
		require.Equal(t, flow.RunRunning, got.State)
		_, err = b.adv.Signal(b.ctx, b.st, run.ID, "approve", json.RawMessage(`{"by":"bob"}`))
		require.ErrorIs(t, err, workflow.ErrConflict, "signaled already")
		var seen json.RawMessage
		b.work(t, map[string]handler{"echo": func(p *payload) (json.RawMessage, error) {
			seen = p.Steps["approve"]
			return nil, nil
		}})
		require.JSONEq(t, `{"state":"SUCCEEDED","output":{"by":"ann"},"confidence":null}`, string(seen))
		run, _ = b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State)
		// An unknown step is not found in a finished run too.
		_, err = b.adv.Signal(b.ctx, b.st, run.ID, "nosuch", nil)
		require.ErrorIs(t, err, workflow.ErrNoStep, "no such step, run finished")

		// A wait that times out with onFailure fail fails the run.
		timeout := b.start(t, name, `{}`)
		b.work(t, map[string]handler{"echo": echo})
		b.advanceClock(2 * time.Hour)
		sw.Sweep(b.ctx)
		run, steps = b.get(t, timeout.ID)
		require.Equal(t, flow.RunFailed, run.State)
		require.Equal(t, F, steps["approve"][0].State)
		require.Contains(t, run.Error, "no signal within its timeout of 1h")
	})
}

func TestIdempotentStart(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"once","steps":[{"name":"a","job":{"type":"echo"}}]}`)
		var wg sync.WaitGroup
		ids := make([]uuid.UUID, 50)
		errs := make([]error, 50)
		for i := range ids {
			wg.Go(func() {
				res, err := b.adv.Start(b.ctx, b.st, []*workflow.StartParams{{Workflow: name, Input: json.RawMessage(`{}`), IdempotencyKey: "k1"}})
				errs[i] = err
				if err == nil {
					ids[i] = res[0].Run.ID
				}
			})
		}
		wg.Wait()
		for i := range ids {
			require.NoError(t, errs[i])
			require.Equal(t, ids[0], ids[i])
		}
		runs, err := b.st.RunList(b.ctx, &store.RunListParams{Workflow: name})
		require.NoError(t, err)
		require.Len(t, runs, 1)
		require.Equal(t, 1, b.work(t, map[string]handler{"echo": echo}), "one run, one job")
	})
}

// TestSweeperCompletesRun: a job ends and nobody advances its run (the
// process died after the commit): the sweeper does.
func TestSweeperCompletesRun(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"swept","steps":[
			{"name":"a","job":{"type":"echo"}},
			{"name":"b","after":["a"],"job":{"type":"echo"}}]}`)
		run := b.start(t, name, `{}`)
		sw := &workflow.Sweeper{Advancer: b.advancer, Store: b.st, Log: discard(), Now: b.now}
		for range 2 {
			rows, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "echo", Max: 10, Owner: "w", LeaseDuration: time.Minute, Now: b.now()})
			require.NoError(t, err)
			require.Len(t, rows, 1)
			_, err = b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: b.now(), Jobs: []*store.JobFinishParams{{
				ID: rows[0].ID, Attempt: rows[0].Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess}}})
			require.NoError(t, err)
			sw.Sweep(b.ctx)
		}
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State)
		require.Equal(t, map[string]flow.StepState{"a": S, "b": S}, states(steps))
		left, err := b.st.StepRunsToAdvance(b.ctx, &store.StepRunsToAdvanceParams{})
		require.NoError(t, err)
		require.Empty(t, left)
	})
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestRetryShrinksFanOut: after a retry, a fan-out over a list that got
// shorter drops the instances past its end: they are SKIPPED as leftovers
// and the fan-in sees the new list only.
func TestRetryShrinksFanOut(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"shrink","steps":[
			{"name":"gate","job":{"type":"gate"},"onFailure":"continue"},
			{"name":"list","after":["gate"],"trigger":"all_done","job":{"type":"list"}},
			{"name":"each","after":["list"],"forEach":"steps.list.output","job":{"type":"echo"}},
			{"name":"fin","after":["each"],"job":{"type":"fin"}}]}`)
		var first atomic.Bool
		first.Store(true)
		var finSaw []json.RawMessage
		hs := map[string]handler{
			"echo": func(p *payload) (json.RawMessage, error) { return p.Item, nil },
			"gate": func(*payload) (json.RawMessage, error) {
				if first.Load() {
					return nil, fmt.Errorf("gate closed")
				}
				return json.RawMessage(`"open"`), nil
			},
			"list": func(p *payload) (json.RawMessage, error) {
				var gate struct{ State string }
				require.NoError(t, json.Unmarshal(p.Steps["gate"], &gate))
				if gate.State == "FAILED" {
					return json.RawMessage(`["a","b","c"]`), nil
				}
				return json.RawMessage(`["z"]`), nil
			},
			"fin": func(p *payload) (json.RawMessage, error) {
				var view struct{ Output []json.RawMessage }
				require.NoError(t, json.Unmarshal(p.Steps["each"], &view))
				finSaw = view.Output
				if first.Load() {
					return nil, fmt.Errorf("fin failed")
				}
				return nil, nil
			},
		}
		run := b.start(t, name, `{}`)
		b.work(t, hs)
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunFailed, run.State)
		require.Len(t, steps["each"], 3)
		require.Len(t, finSaw, 3)

		first.Store(false)
		_, err := b.adv.Retry(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		b.work(t, hs)
		run, steps = b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State, run.Error)
		require.Equal(t, map[string]flow.StepState{"gate": S, "list": S, "each[0]": S, "each[1]": K, "each[2]": K, "fin": S}, states(steps))
		require.Len(t, finSaw, 1, "the fan-in sees the new list only")
		require.JSONEq(t, `"z"`, string(finSaw[0]))
		for _, in := range steps["each"] {
			require.Equal(t, 2, in.Generation)
		}
	})
}

// TestAdvanceReadsTheClockOnceLocked: an advancement waiting for the
// run's lock (another transaction holds it, say one recording a parent's
// end) reads the time once it has the lock, not before: otherwise the
// steps it releases start, by their started_at, before the parents whose
// ends the lock holder recorded meanwhile (found by the chaos run, seed
// 11: a fan-in started 20 ms before its last fan-out instances ended).
// Both the single advancement and the batched one (the queue's, the
// sweeper's). On SQLite the one writer serialises the transactions before
// they begin, so the clock was never read early there.
func TestAdvanceReadsTheClockOnceLocked(t *testing.T) {
	t.Parallel()
	for _, together := range []bool{false, true} {
		t.Run(fmt.Sprintf("together=%v", together), func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, b *bundle) {
				var watching atomic.Bool
				read := make(chan struct{}, 1)
				adv, err := workflow.NewAdvancer(func() time.Time {
					if watching.Load() {
						select {
						case read <- struct{}{}:
						default:
						}
					}
					return b.now()
				})
				require.NoError(t, err)
				b.adv = adv
				name := b.put(t, `{"name":"pair","steps":[
					{"name":"a","job":{"type":"q"}},
					{"name":"b","after":["a"],"job":{"type":"q"}}]}`)
				run := b.start(t, name, `{}`)
				rows, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "q", Max: 1, Owner: "test", LeaseDuration: time.Minute, Now: b.now()})
				require.NoError(t, err)
				require.Len(t, rows, 1)
				_, err = b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: b.now(), Jobs: []*store.JobFinishParams{{
					ID: rows[0].ID, Attempt: rows[0].Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess, Result: json.RawMessage(`{}`)}}})
				require.NoError(t, err)

				locked, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
				go func() {
					held <- b.st.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
						if _, err := tx.RunLock(ctx, run.ID); err != nil {
							return err
						}
						close(locked)
						<-release
						return nil
					})
				}()
				select {
				case <-locked:
				case err := <-held:
					t.Fatalf("lock the run: %v", err)
				}
				watching.Store(true)
				advanced := make(chan error, 1)
				go func() {
					if together {
						advanced <- adv.AdvanceTogether(b.ctx, b.st, []uuid.UUID{run.ID})
						return
					}
					advanced <- b.st.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
						_, err := adv.Advance(ctx, tx, run.ID)
						return err
					})
				}()
				// The advancement reads the clock early (the defect), or
				// waits at the lock without reading it.
				select {
				case <-read:
				case <-time.After(300 * time.Millisecond):
				}
				b.advanceClock(time.Hour) // time passes while the lock is held
				locked2 := b.now()
				watching.Store(false)
				close(release)
				require.NoError(t, <-held)
				require.NoError(t, <-advanced)

				_, steps := b.get(t, run.ID)
				require.Equal(t, flow.StepSucceeded, steps["a"][0].State)
				require.Equal(t, flow.StepRunning, steps["b"][0].State)
				require.False(t, steps["b"][0].StartedAt.Before(locked2), "b started at %s, before the lock was free at %s", steps["b"][0].StartedAt, locked2)
				require.False(t, steps["a"][0].FinishedAt.Before(locked2), "a's end recorded at %s, before the lock was free at %s", steps["a"][0].FinishedAt, locked2)
			})
		})
	}
}

// cancelFailing is the store with JobCancelMany (the ask to running jobs
// after a cancel's commit) failing as a database that went away does.
type cancelFailing struct {
	store.Store
}

var errCancelDown = errors.New("connection refused")

func (cancelFailing) JobCancelMany(context.Context, *store.JobCancelManyParams) ([]store.JobCancelManyResult, error) {
	return nil, errCancelDown
}

// A cancel whose ask to a running job fails reports it (the cancel itself
// is committed), and asking again asks the job again; a job that ended
// meanwhile (it cannot be canceled any more) is no error.
func TestCancelReportsFailedJobCancel(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"cancel_fail","steps":[
			{"name":"a","job":{"type":"held"}},
			{"name":"b","job":{"type":"held2"}}]}`)
		run := b.start(t, name, `{}`)
		var held []*job.Row
		for _, q := range []string{"held", "held2"} {
			rows, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: q, Max: 1, Owner: "w", LeaseDuration: time.Minute, Now: b.now()})
			require.NoError(t, err)
			require.Len(t, rows, 1)
			held = append(held, rows...)
		}

		got, err := b.adv.Cancel(b.ctx, cancelFailing{b.st}, run.ID)
		require.ErrorIs(t, err, errCancelDown)
		require.NotNil(t, got)
		require.True(t, got.CancelRequested, "the cancel is committed")
		for _, r := range held {
			row, err := b.st.JobGet(b.ctx, r.ID)
			require.NoError(t, err)
			require.False(t, row.CancelRequested)
		}

		// One job ends before the cancel is asked again: asking it is
		// refused (it is finished), which is no error; the other is asked.
		ended, err := b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: b.now(), Jobs: []*store.JobFinishParams{{
			ID: held[0].ID, Attempt: held[0].Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess}}})
		require.NoError(t, err)
		require.Equal(t, []job.State{job.StateSuccess}, ended)
		got, err = b.adv.Cancel(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		require.True(t, got.CancelRequested)
		row, err := b.st.JobGet(b.ctx, held[1].ID)
		require.NoError(t, err)
		require.True(t, row.CancelRequested, "asked again, the running job is asked to stop")
	})
}

// A job whose payload claims to be a step of a run (any job's payload is
// its inserter's to write) cannot advance that run: advancement reads the
// ends of the jobs the run's instances hold, not the payloads of jobs
// that ended. Its end is a no-op, by the queue's path (AdvanceRuns) and
// by the completer's (AdvanceRunsTx in the transaction of the end).
func TestSpoofedStepPayloadDoesNotAdvance(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"spoof","steps":[
			{"name":"a","job":{"type":"real"}},
			{"name":"b","after":["a"],"job":{"type":"real"}}]}`)
		run := b.start(t, name, `{}`)
		_, before := b.get(t, run.ID)
		require.Len(t, before["a"], 1)
		realJob := before["a"][0].JobID

		for round, path := range []string{"queue", "completer"} {
			forged := fmt.Sprintf(`{"run":{"id":%q,"step":"a","index":0},"input":{},"steps":{}}`, run.ID)
			id, ok := workflow.IsStepPayload([]byte(forged))
			require.True(t, ok, "the forged payload reads as a step job's")
			require.Equal(t, run.ID, id)
			jobID := uuid.Must(uuid.NewV7())
			_, err := b.st.JobInsertMany(b.ctx, &store.JobInsertManyParams{Now: b.now(), Jobs: []*store.JobInsertParams{{
				ID: jobID, Type: "forger", Queue: "forger", Payload: json.RawMessage(forged), State: job.StateQueued, MaxAttempts: 1,
			}}})
			require.NoError(t, err)
			rows, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "forger", Max: 1, Owner: "w", LeaseDuration: time.Minute, Now: b.now()})
			require.NoError(t, err)
			require.Len(t, rows, 1)
			fin := &store.JobFinishManyParams{Now: b.now(), Jobs: []*store.JobFinishParams{{
				ID: jobID, Attempt: rows[0].Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess, Result: json.RawMessage(`{"forged":true}`)}}}
			switch path {
			case "queue":
				_, err = b.st.JobFinishMany(b.ctx, fin)
				require.NoError(t, err)
				require.NoError(t, b.adv.AdvanceRuns(b.ctx, b.st, []uuid.UUID{id, id}))
			case "completer":
				require.NoError(t, b.st.InTx(b.ctx, func(ctx context.Context, tx store.Tx) error {
					if _, err := tx.JobFinishMany(ctx, fin); err != nil {
						return err
					}
					return b.adv.AdvanceRunsTx(ctx, tx, []uuid.UUID{id})
				}))
			}
			got, steps := b.get(t, run.ID)
			require.Equal(t, flow.RunRunning, got.State, "round %d (%s)", round, path)
			require.Equal(t, map[string]flow.StepState{"a": R}, states(steps), "nothing ended, nothing released (%s)", path)
			require.Equal(t, realJob, steps["a"][0].JobID)
			require.Nil(t, steps["a"][0].Output)
		}

		// The real job's end still advances the run.
		require.Equal(t, 2, b.work(t, map[string]handler{"real": func(*payload) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }}))
		got, _ := b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, got.State)
	})
}

// The sweeper finds a signal wait that timed out however many older waits
// have no timeout: it reads waits by their timeout (an indexed range), not
// the oldest ones (it read the 1,000 oldest, and missed this one).
func TestSweeperTimesOutBehindManyWaits(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		forever := b.put(t, `{"name":"forever","steps":[{"name":"wait","signal":{}}]}`)
		timed := b.put(t, `{"name":"timed","steps":[{"name":"wait","signal":{"timeout":"1m"}}]}`)
		const older = 1100 // more than a sweep reads at once
		params := make([]*workflow.StartParams, older)
		for i := range params {
			params[i] = &workflow.StartParams{Workflow: forever, Input: json.RawMessage(`{}`)}
		}
		_, err := b.adv.Start(b.ctx, b.st, params)
		require.NoError(t, err)
		b.advanceClock(time.Second)
		run := b.start(t, timed, `{}`)
		b.advanceClock(2 * time.Minute)
		sw := &workflow.Sweeper{Advancer: b.advancer, Store: b.st, Log: discard(), Now: b.now}
		sw.Sweep(b.ctx)
		got, steps := b.get(t, run.ID)
		require.Equal(t, F, steps["wait"][0].State)
		require.Contains(t, steps["wait"][0].Error, "no signal within its timeout of 1m")
		require.Equal(t, flow.RunFailed, got.State)
	})
}

// Advanced together (the queue's batches, the completer's transaction), a
// run's SUCCEEDED event follows its last step's end in the outbox, as when
// advanced alone: the run's end is written after the batch's step ends.
func TestBatchedRunEndFollowsStepEnds(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"one","steps":[{"name":"only","job":{"type":"echo"}}]}`)
		runs := []*flow.Run{b.start(t, name, `{}`), b.start(t, name, `{}`)}
		rows, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "echo", Max: 10, Owner: "w", LeaseDuration: time.Minute, Now: b.now()})
		require.NoError(t, err)
		require.Len(t, rows, 2)
		var fins []*store.JobFinishParams
		for _, r := range rows {
			fins = append(fins, &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess})
		}
		_, err = b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: b.now(), Jobs: fins})
		require.NoError(t, err)
		require.NoError(t, b.adv.AdvanceTogether(b.ctx, b.st, []uuid.UUID{runs[0].ID, runs[1].ID}))

		evs, err := b.st.OutboxList(b.ctx, &store.OutboxListParams{Limit: 100000})
		require.NoError(t, err)
		stepEnded, runEnded := map[uuid.UUID]int{}, map[uuid.UUID]int{}
		for i, ev := range evs {
			switch ev.Type {
			case flow.EventRunStateChanged:
				var d flow.RunStateChangedData
				require.NoError(t, json.Unmarshal(ev.Data, &d))
				for _, tr := range d.Transitions {
					if tr.To == flow.RunSucceeded {
						runEnded[tr.RunID] = i + 1
					}
				}
			case flow.EventStepStateChanged:
				var d flow.StepStateChangedData
				require.NoError(t, json.Unmarshal(ev.Data, &d))
				for _, tr := range d.Transitions {
					if tr.To == flow.StepSucceeded {
						stepEnded[tr.RunID] = i + 1
					}
				}
			}
		}
		for _, r := range runs {
			got, _ := b.get(t, r.ID)
			require.Equal(t, flow.RunSucceeded, got.State)
			require.NotZero(t, stepEnded[r.ID])
			require.Greater(t, runEnded[r.ID], stepEnded[r.ID], "run %s ended after its step", r.ID)
		}
	})
}

// TestSignalPastTimeoutRefused: a signal that comes after its step's
// timeout is late even when the sweeper has not recorded the timeout
// yet: it is a conflict, nothing changes, and the sweeper then fails
// the step as it would have without the signal.
func TestSignalPastTimeoutRefused(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"late","steps":[
			{"name":"approve","signal":{"timeout":"1h"}},
			{"name":"publish","after":["approve"],"job":{"type":"echo"}}]}`)
		run := b.start(t, name, `{}`)
		b.advanceClock(time.Hour)
		_, err := b.adv.Signal(b.ctx, b.st, run.ID, "approve", json.RawMessage(`{"ok":true}`))
		require.ErrorIs(t, err, workflow.ErrConflict, "past its timeout")
		require.ErrorContains(t, err, "timed out")
		got, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunRunning, got.State)
		require.Equal(t, R, steps["approve"][0].State, "nothing changed")
		require.Zero(t, b.work(t, map[string]handler{"echo": echo}), "publish was not released")

		sw := &workflow.Sweeper{Advancer: b.advancer, Store: b.st, Log: discard(), Now: b.now}
		sw.Sweep(b.ctx)
		got, steps = b.get(t, run.ID)
		require.Equal(t, flow.RunFailed, got.State)
		require.Equal(t, F, steps["approve"][0].State)
	})
}

// TestVersionThatNoLongerCompiles: a run of a version that no longer
// compiles (stored by an older docket: its expressions, or even its
// structure, fail today's rules) fails at its next advancement, and is
// canceled by Cancel, without a panic, and either way the work it
// released stops: its queued job is CANCELED, its signal wait ends.
func TestVersionThatNoLongerCompiles(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		for name, def := range map[string]string{
			// An expression that does not compile.
			"stale-expr": `{"name":"stale-expr","steps":[
				{"name":"work","job":{"type":"stale.work"}},
				{"name":"wait","signal":{}},
				{"name":"after","after":["work"],"if":"no_such_function()","job":{"type":"stale.work"}}]}`,
			// A structure that does not either (a cycle): no graph.
			"stale-graph": `{"name":"stale-graph","steps":[
				{"name":"work","job":{"type":"stale.work"}},
				{"name":"wait","signal":{}},
				{"name":"x","after":["y"],"job":{"type":"stale.work"}},
				{"name":"y","after":["x"],"job":{"type":"stale.work"}}]}`,
		} {
			// Stored as it was, unchecked.
			_, _, err := b.st.WorkflowPut(b.ctx, &store.WorkflowPutParams{Name: name, Definition: json.RawMessage(def), Hash: "sha256:" + name, Now: b.now()})
			require.NoError(t, err)
			_, err = b.adv.Start(b.ctx, b.st, []*workflow.StartParams{{Workflow: name}})
			require.Error(t, err, "no new run starts on it")

			// Runs started before, their first steps released.
			started := func() (uuid.UUID, uuid.UUID) {
				runID, jobID := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
				_, err := b.st.RunInsertMany(b.ctx, &store.RunInsertManyParams{Runs: []*store.RunInsertParams{{ID: runID, Workflow: name, Version: 1, Input: json.RawMessage(`{}`)}}, Now: b.now()})
				require.NoError(t, err)
				_, err = b.st.JobInsertMany(b.ctx, &store.JobInsertManyParams{Jobs: []*store.JobInsertParams{{ID: jobID, Type: "stale.work", Queue: "stale.work", Priority: 1,
					Payload: json.RawMessage(`{"run":{"id":"` + runID.String() + `","step":"work","index":0},"input":{},"steps":{}}`), State: job.StateQueued, MaxAttempts: 1}}, Now: b.now()})
				require.NoError(t, err)
				_, err = b.st.StepInsertMany(b.ctx, &store.StepInsertManyParams{Steps: []*store.StepInsertParams{
					{RunID: runID, Step: "work", Kind: flow.KindJob, State: flow.StepRunning, JobID: jobID},
					{RunID: runID, Step: "wait", Kind: flow.KindSignal, State: flow.StepRunning}}, Now: b.now()})
				require.NoError(t, err)
				return runID, jobID
			}
			check := func(runID, jobID uuid.UUID, want flow.RunState) {
				t.Helper()
				run, steps := b.get(t, runID)
				require.Equal(t, want, run.State, name)
				require.Equal(t, C, steps["work"][0].State, name)
				require.Equal(t, C, steps["wait"][0].State, name)
				row, err := b.st.JobGet(b.ctx, jobID)
				require.NoError(t, err)
				require.Equal(t, job.StateCanceled, row.State, "%s: its job does not run", name)
			}

			failing, failingJob := started()
			_, err = b.adv.AdvanceRun(b.ctx, b.st, failing)
			require.NoError(t, err)
			check(failing, failingJob, flow.RunFailed)

			canceled, canceledJob := started()
			_, err = b.adv.Cancel(b.ctx, b.st, canceled)
			require.NoError(t, err)
			check(canceled, canceledJob, flow.RunCanceled)

			// A wait past its timeout is not left to the sweeper's list
			// for ever: the sweep fails its run.
			waiting := uuid.Must(uuid.NewV7())
			_, err = b.st.RunInsertMany(b.ctx, &store.RunInsertManyParams{Runs: []*store.RunInsertParams{{ID: waiting, Workflow: name, Version: 1, Input: json.RawMessage(`{}`)}}, Now: b.now()})
			require.NoError(t, err)
			_, err = b.st.StepInsertMany(b.ctx, &store.StepInsertManyParams{Steps: []*store.StepInsertParams{
				{RunID: waiting, Step: "wait", Kind: flow.KindSignal, State: flow.StepRunning, TimeoutAt: b.now().Add(time.Minute)}}, Now: b.now()})
			require.NoError(t, err)
			b.advanceClock(2 * time.Minute)
			sw := &workflow.Sweeper{Advancer: b.advancer, Store: b.st, Log: discard(), Now: b.now}
			sw.Sweep(b.ctx)
			run, steps := b.get(t, waiting)
			require.Equal(t, flow.RunFailed, run.State, name)
			require.Equal(t, C, steps["wait"][0].State, name)
		}
	})
}

// TestCancelStaleVersionCancelsRedo: canceling a run of a version whose
// expressions no longer compile, while a review holds a redo of the step
// it reviews, cancels that redo too: the graph is kept for the cancel
// (its reviews), not only its order. With the graph dropped the redo's
// unit stayed open, judgable in its pool, for a canceled run.
func TestCancelStaleVersionCancelsRedo(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		const name = "stale-review"
		_, _, err := b.st.TaskPut(b.ctx, &store.TaskPutParams{Name: "stale.label", Definition: json.RawMessage(`{"title":"x"}`), Hash: "sha256:stale.label", Now: b.now()})
		require.NoError(t, err)
		// Stored as it was, unchecked: ship's `if` does not compile today.
		_, _, err = b.st.WorkflowPut(b.ctx, &store.WorkflowPutParams{Name: name, Definition: json.RawMessage(`{"name":"stale-review","steps":[
			{"name":"label","human":{"task":"stale.label"}},
			{"name":"review","after":["label"],"human":{"task":"stale.label","review":"label"}},
			{"name":"ship","after":["review"],"if":"no_such_function()","job":{"type":"stale.work"}}]}`), Hash: "sha256:" + name, Now: b.now()})
		require.NoError(t, err)
		pools := map[string]uuid.UUID{}
		for _, step := range []string{"label", "review"} {
			pool, _, err := b.st.PoolCreate(b.ctx, &store.PoolCreateParams{ID: uuid.Must(uuid.NewV7()), Workflow: name, WorkflowVersion: 1, Step: step,
				Task: "stale.label", TaskVersion: 1, JudgmentsPerUnit: 1, AssignmentSeconds: 60, Now: b.now()})
			require.NoError(t, err)
			pools[step] = pool.ID
		}
		// A run started before: label SUCCEEDED, then its review rejected
		// it, so label's unit is open again (the redo) while review's
		// instance waits for it.
		runID := uuid.Must(uuid.NewV7())
		_, err = b.st.RunInsertMany(b.ctx, &store.RunInsertManyParams{Runs: []*store.RunInsertParams{{ID: runID, Workflow: name, Version: 1, Input: json.RawMessage(`{}`)}}, Now: b.now()})
		require.NoError(t, err)
		units := map[string]uuid.UUID{}
		for step, pool := range pools {
			units[step] = uuid.Must(uuid.NewV7())
			_, err := b.st.UnitInsertMany(b.ctx, &store.UnitInsertManyParams{PoolID: pool, State: crowd.UnitJudgable, Now: b.now(),
				Units: []*store.UnitInsertParams{{ID: units[step], RunID: runID, Input: json.RawMessage(`{}`)}}})
			require.NoError(t, err)
		}
		_, err = b.st.StepInsertMany(b.ctx, &store.StepInsertManyParams{Steps: []*store.StepInsertParams{
			{RunID: runID, Step: "label", Kind: flow.KindHuman, State: flow.StepRunning, UnitID: units["label"]},
			{RunID: runID, Step: "review", Kind: flow.KindHuman, State: flow.StepRunning, UnitID: units["review"]}}, Now: b.now()})
		require.NoError(t, err)
		_, err = b.st.StepTransition(b.ctx, &store.StepTransitionParams{RunID: runID, Step: "label", Generation: 1, From: flow.StepRunning, To: flow.StepSucceeded,
			Output: json.RawMessage(`{"same":"yes"}`), Now: b.now()})
		require.NoError(t, err)

		_, err = b.adv.Cancel(b.ctx, b.st, runID)
		require.NoError(t, err)
		run, steps := b.get(t, runID)
		require.Equal(t, flow.RunCanceled, run.State)
		require.Equal(t, S, steps["label"][0].State)
		require.Equal(t, C, steps["review"][0].State)
		for step, id := range units {
			u, err := b.st.UnitGet(b.ctx, id)
			require.NoError(t, err)
			require.Equal(t, crowd.UnitCanceled, u.State, "%s's unit", step)
		}
	})
}

// TestStepJobCanceledByHand: a step's job canceled on its own (not by
// its run's cancel) fails its step, which says so without an empty
// reason: it read "job … was canceled: ", a colon and nothing, since a
// cancel by hand records no error.
func TestStepJobCanceledByHand(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"canceled-job","steps":[{"name":"a","job":{"type":"echo"}}]}`)
		run := b.start(t, name, `{}`)
		_, steps := b.get(t, run.ID)
		jobID := steps["a"][0].JobID
		_, err := b.st.JobCancel(b.ctx, &store.JobCancelParams{ID: jobID, Now: b.now()})
		require.NoError(t, err)
		_, err = b.adv.AdvanceRun(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		got, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunFailed, got.State)
		require.Equal(t, F, steps["a"][0].State)
		require.Equal(t, "job "+jobID.String()+" was canceled", steps["a"][0].Error)
		require.Equal(t, `step "a"[0] failed: job `+jobID.String()+" was canceled", got.Error)
	})
}

// TestRetryWhileFanOutInstanceRuns: a run fails while an instance of a
// fan-out runs on (its job outlives the failure) and the fan-out's queued
// instance is canceled; a retry before that job ends must run the
// canceled instance again. The fan-out folded RUNNING at the retry, so it
// was left as it was: once its running job ended, the step was CANCELED,
// its dependent canceled, and the run SUCCEEDED without them.
func TestRetryWhileFanOutInstanceRuns(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"outlive","steps":[
			{"name":"gate","job":{"type":"gate","maxAttempts":1}},
			{"name":"each","forEach":"input.items","job":{"type":"slow"}},
			{"name":"fin","after":["each"],"job":{"type":"ok"}}]}`)
		var closed atomic.Bool
		closed.Store(true)
		hs := map[string]handler{
			"ok": echo,
			"gate": func(*payload) (json.RawMessage, error) {
				if closed.Load() {
					return nil, fmt.Errorf("gate closed")
				}
				return nil, nil
			},
		}
		run := b.start(t, name, `{"items":[1,2]}`)
		held, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "slow", Max: 1, Owner: "test", LeaseDuration: time.Minute, Now: b.now()})
		require.NoError(t, err)
		require.Len(t, held, 1)
		b.work(t, hs) // gate fails the run; each's queued instance is canceled
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunFailed, run.State)
		require.Equal(t, map[string]flow.StepState{"gate": F, "each[0]": R, "each[1]": C}, states(steps), "fin was never released")

		closed.Store(false)
		_, err = b.adv.Retry(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		// The job that outlived the failure ends now.
		_, err = b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: b.now(), Jobs: []*store.JobFinishParams{
			{ID: held[0].ID, Attempt: held[0].Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess, Result: json.RawMessage(`"old"`)}}})
		require.NoError(t, err)
		// Advanced the completer's way (the batched advancement, which
		// holds the end it records until its flush); the test below
		// advances the run on its own.
		require.NoError(t, b.adv.AdvanceTogether(b.ctx, b.st, []uuid.UUID{run.ID}))
		hs["slow"] = func(p *payload) (json.RawMessage, error) { return p.Item, nil }
		b.work(t, hs)
		run, steps = b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State, run.Error)
		require.Equal(t, map[string]flow.StepState{"gate": S, "each[0]": S, "each[1]": S, "fin": S}, states(steps))
		for _, in := range steps["each"] {
			require.Greater(t, in.Generation, 1, "each[%d] ran again", in.Index)
		}
		require.Equal(t, map[string]int{"gate": 2, "slow": 2, "ok": 1}, b.ranCopy())
	})
}

// TestRetryWhileFanOutInstanceRunsShrinks: as above, with a FAILED
// instance, and the fan-out's list got shorter after the retry: the instance that was running at the
// retry, past the new end, is dropped like the others, not kept as a
// SUCCEEDED instance of the earlier generation in the fan-in.
func TestRetryWhileFanOutInstanceRunsShrinks(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"outlive-shrink","steps":[
			{"name":"gate","job":{"type":"gate","maxAttempts":1},"onFailure":"continue"},
			{"name":"list","after":["gate"],"trigger":"all_done","job":{"type":"list"}},
			{"name":"each","after":["list"],"forEach":"steps.list.output","job":{"type":"slow"}},
			{"name":"bad","job":{"type":"bad","maxAttempts":1}},
			{"name":"fin","after":["each","bad"],"job":{"type":"fin"}}]}`)
		var first atomic.Bool
		first.Store(true)
		var finSaw []json.RawMessage
		hs := map[string]handler{
			"gate": func(*payload) (json.RawMessage, error) {
				if first.Load() {
					return nil, fmt.Errorf("gate closed")
				}
				return nil, nil
			},
			"list": func(*payload) (json.RawMessage, error) {
				if first.Load() {
					return json.RawMessage(`["a","b","c"]`), nil
				}
				return json.RawMessage(`["z"]`), nil
			},
		}
		run := b.start(t, name, `{}`)
		b.work(t, hs)
		// each's three jobs: the first succeeds, the second fails, the
		// third runs on; bad fails the run.
		rows, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "slow", Max: 3, Owner: "test", LeaseDuration: time.Minute, Now: b.now()})
		require.NoError(t, err)
		require.Len(t, rows, 3)
		var held *job.Row
		var fins []*store.JobFinishParams
		for _, row := range rows {
			var p payload
			require.NoError(t, json.Unmarshal(row.Payload, &p))
			switch p.Run.Index {
			case 0:
				fins = append(fins, &store.JobFinishParams{ID: row.ID, Attempt: row.Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess, Result: p.Item})
			case 1:
				fins = append(fins, &store.JobFinishParams{ID: row.ID, Attempt: row.Attempt, State: job.StateDead, Outcome: job.OutcomeError, Error: "lost"})
			case 2:
				held = row
			}
		}
		require.NotNil(t, held)
		_, err = b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Jobs: fins, Now: b.now()})
		require.NoError(t, err)
		_, err = b.adv.AdvanceRun(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		b.work(t, map[string]handler{"bad": func(*payload) (json.RawMessage, error) { return nil, fmt.Errorf("bad") }})
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunFailed, run.State)
		require.Equal(t, []flow.StepState{S, F, R}, []flow.StepState{steps["each"][0].State, steps["each"][1].State, steps["each"][2].State})

		first.Store(false)
		_, err = b.adv.Retry(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		_, err = b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: b.now(), Jobs: []*store.JobFinishParams{
			{ID: held.ID, Attempt: held.Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess, Result: json.RawMessage(`"old"`)}}})
		require.NoError(t, err)
		_, err = b.adv.AdvanceRun(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		hs["slow"] = func(p *payload) (json.RawMessage, error) { return p.Item, nil }
		hs["bad"] = echo
		hs["fin"] = func(p *payload) (json.RawMessage, error) {
			var view struct{ Output []json.RawMessage }
			require.NoError(t, json.Unmarshal(p.Steps["each"], &view))
			finSaw = view.Output
			return nil, nil
		}
		b.work(t, hs)
		run, steps = b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State, run.Error)
		require.Equal(t, map[string]flow.StepState{"gate": S, "list": S, "each[0]": S, "each[1]": K, "each[2]": K, "bad": S, "fin": S}, states(steps))
		require.Len(t, finSaw, 1, "the fan-in sees the new list only")
		require.JSONEq(t, `"z"`, string(finSaw[0]))
	})
}

// TestUnstorableExpressionValueFailsStep: an input or forEach value with a
// string no backend stores alike (CEL makes a NUL from "\u0000") fails its
// step, on every backend, at the start of the run as later: PostgreSQL
// refused the job's payload, which failed the run's start (a 500) or every
// advancement of the run.
func TestUnstorableExpressionValueFailsStep(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"nul","steps":[
			{"name":"first","input":"'a\\u0000b'","onFailure":"continue","job":{"type":"ok"}},
			{"name":"p","job":{"type":"ok"}},
			{"name":"each","after":["p"],"forEach":"['x', 'y\\u0000']","onFailure":"continue","job":{"type":"ok"}},
			{"name":"per","after":["p"],"forEach":"[1, 2]","input":"index == 1 ? 'n\\u0000' : 'ok'","onFailure":"continue","job":{"type":"ok"}}]}`)
		run := b.start(t, name, `{}`)
		_, steps := b.get(t, run.ID)
		require.Equal(t, F, steps["first"][0].State)
		require.Equal(t, `step "first": input: `+store.NULMessage, steps["first"][0].Error)
		b.work(t, map[string]handler{"ok": echo})
		run, steps = b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State, run.Error)
		require.Equal(t, map[string]flow.StepState{"first": F, "p": S, "each": F, "per": F}, states(steps))
		require.Equal(t, `step "each": forEach: item 1: `+store.NULMessage, steps["each"][0].Error)
		require.Equal(t, `step "per"[1]: input: `+store.NULMessage, steps["per"][0].Error)
	})
}

// TestCancelFanOutInOneStatement: canceling a run cancels the instances
// of a fan-out whose jobs have not started — QUEUED or RETRY — in one
// store call (one step.state_changed outbox row for them all; a fan-out
// of 10,000 took 77 s on PostgreSQL one instance at a time), and their
// jobs in one more (JobCancelMany: one job.state_changed row; 28 s one
// job at a time), while the instance whose job runs is left to finish,
// asked to stop by one call after the commit.
func TestCancelFanOutInOneStatement(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"cancel-many","steps":[
			{"name":"each","forEach":"[1, 2, 3, 4, 5]","job":{"type":"fan"}}]}`)
		run := b.start(t, name, `{}`)
		rows, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "fan", Max: 2, Owner: "w", LeaseDuration: time.Minute, Now: b.now()})
		require.NoError(t, err)
		require.Len(t, rows, 2)
		// The first acquired fails and waits for its retry; the second runs.
		_, err = b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: b.now(), Jobs: []*store.JobFinishParams{{
			ID: rows[0].ID, Attempt: rows[0].Attempt, State: job.StateRetry, Outcome: job.OutcomeError, Error: "later", RunAt: b.now().Add(time.Hour)}}})
		require.NoError(t, err)

		before, err := b.st.OutboxList(b.ctx, &store.OutboxListParams{Limit: 100000})
		require.NoError(t, err)
		counted := &countingStore{Store: b.st}
		got, err := b.adv.Cancel(b.ctx, counted, run.ID)
		require.NoError(t, err)
		require.True(t, got.CancelRequested)
		after, err := b.st.OutboxList(b.ctx, &store.OutboxListParams{Limit: 100000})
		require.NoError(t, err)
		stepRows, jobRows := 0, 0
		for _, ev := range after[len(before):] {
			switch ev.Type {
			case "step.state_changed":
				stepRows++
			case "job.state_changed":
				jobRows++
			}
		}
		require.Equal(t, 1, stepRows, "the four instances are canceled by one store call")
		require.Equal(t, 1, jobRows, "their four jobs too")
		require.Equal(t, map[string]int{"JobCancelMany": 1}, counted.calls, "one call cancels the jobs, none a job")
		require.Equal(t, 1, counted.asks, "one call asks the running job to stop, after the commit")

		_, steps := b.get(t, run.ID)
		for _, in := range steps["each"] {
			want := C
			if in.JobID == rows[1].ID {
				want = R
			}
			require.Equal(t, want, in.State, "each[%d]", in.Index)
			j, err := b.st.JobGet(b.ctx, in.JobID)
			require.NoError(t, err)
			if want == C {
				require.Equal(t, job.StateCanceled, j.State, "each[%d]'s job", in.Index)
			} else {
				require.True(t, j.CancelRequested, "the running job is asked to stop")
			}
		}
	})
}

// countingStore counts the calls of its transactions that change jobs
// and units (by method), and its own asks to running jobs.
type countingStore struct {
	store.Store
	calls map[string]int
	asks  int
}

func (s *countingStore) InTx(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	return s.Store.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return fn(ctx, &countingTx{Tx: tx, s: s})
	})
}

func (s *countingStore) JobCancelMany(ctx context.Context, p *store.JobCancelManyParams) ([]store.JobCancelManyResult, error) {
	s.asks++
	return s.Store.JobCancelMany(ctx, p)
}

func (s *countingStore) count(method string) {
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[method]++
}

type countingTx struct {
	store.Tx
	s *countingStore
}

func (t *countingTx) JobTransition(ctx context.Context, p *store.JobTransitionParams) (*job.Row, error) {
	t.s.count("JobTransition")
	return t.Tx.JobTransition(ctx, p)
}

func (t *countingTx) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobCancelResult, error) {
	t.s.count("JobCancel")
	return t.Tx.JobCancel(ctx, p)
}

func (t *countingTx) JobCancelMany(ctx context.Context, p *store.JobCancelManyParams) ([]store.JobCancelManyResult, error) {
	t.s.count("JobCancelMany")
	return t.Tx.JobCancelMany(ctx, p)
}

func (t *countingTx) UnitGet(ctx context.Context, id uuid.UUID) (*crowd.Unit, error) {
	t.s.count("UnitGet")
	return t.Tx.UnitGet(ctx, id)
}

func (t *countingTx) UnitTransition(ctx context.Context, p *store.UnitTransitionParams) (*crowd.Unit, error) {
	t.s.count("UnitTransition")
	return t.Tx.UnitTransition(ctx, p)
}

func (t *countingTx) UnitCancelMany(ctx context.Context, p *store.UnitCancelManyParams) ([]store.UnitCancelManyResult, error) {
	t.s.count("UnitCancelMany")
	return t.Tx.UnitCancelMany(ctx, p)
}

// TestCancelHumanFanOutInOneStatement: canceling a run cancels the
// units of a human fan-out by one store call (UnitCancelMany), not a
// read and a transition each: every unit CANCELED but a FINALIZED one
// (left so, its instance CANCELED with the others, as before), the
// pool's counters moved for the four, and the assignment in progress
// left as it is.
func TestCancelHumanFanOutInOneStatement(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		_, _, err := b.st.TaskPut(b.ctx, &store.TaskPutParams{Name: "same", Definition: json.RawMessage(sameTask), Hash: "sha256:same", Now: b.now()})
		require.NoError(t, err)
		name := b.put(t, `{"name":"units-cancel","steps":[
			{"name":"label","forEach":"input.ids","input":"{'id': item}","human":{"task":"same"}}]}`)
		run := b.start(t, name, `{"ids":[0,1,2,3,4]}`)
		_, steps := b.get(t, run.ID)
		require.Len(t, steps["label"], 5)
		// One unit is finalized behind the run's back, one is taken by
		// a contributor who has not answered yet.
		done := steps["label"][0].UnitID
		conf := 1.0
		_, err = b.st.UnitFinalize(b.ctx, &store.UnitFinalizeParams{ID: done, Result: json.RawMessage(`{"same":"yes"}`), Confidence: &conf, Now: b.now()})
		require.NoError(t, err)
		u, err := b.st.UnitGet(b.ctx, steps["label"][1].UnitID)
		require.NoError(t, err)
		c, err := b.st.ContributorCreate(b.ctx, &store.ContributorCreateParams{ID: uuid.Must(uuid.NewV7()), ExternalID: "ext-cancel", Name: "Ada", Now: b.now()})
		require.NoError(t, err)
		taken, err := b.st.AssignmentTake(b.ctx, &store.AssignmentTakeParams{ID: uuid.Must(uuid.NewV7()), PoolID: u.PoolID, ContributorID: c.ID,
			Duration: time.Hour, Strategy: crowd.StrategyCandidates, Candidates: []uuid.UUID{u.ID}, Now: b.now()})
		require.NoError(t, err)
		require.NotNil(t, taken)
		pool, err := b.st.PoolGet(b.ctx, u.PoolID)
		require.NoError(t, err)
		countsBefore := pool.Counts

		counted := &countingStore{Store: b.st}
		got, err := b.adv.Cancel(b.ctx, counted, run.ID)
		require.NoError(t, err)
		require.Equal(t, flow.RunCanceled, got.State)
		require.Equal(t, map[string]int{"UnitCancelMany": 1}, counted.calls, "one call cancels the units, none a unit")

		_, steps = b.get(t, run.ID)
		for _, st := range steps["label"] {
			u, err := b.st.UnitGet(b.ctx, st.UnitID)
			require.NoError(t, err)
			require.Equal(t, C, st.State, "label[%d]", st.Index)
			if st.UnitID == done {
				require.Equal(t, crowd.UnitFinalized, u.State)
				continue
			}
			require.Equal(t, crowd.UnitCanceled, u.State, "label[%d]'s unit", st.Index)
		}
		pool, err = b.st.PoolGet(b.ctx, u.PoolID)
		require.NoError(t, err)
		want := countsBefore
		want.Canceled += want.New + want.Judgable + want.Paused
		want.New, want.Judgable, want.Paused = 0, 0, 0
		require.Equal(t, want, pool.Counts)
		require.Equal(t, 4, pool.Counts.Canceled)
		a, err := b.st.AssignmentGet(b.ctx, taken.Assignment.ID)
		require.NoError(t, err)
		require.Equal(t, taken.Assignment.State, a.State, "the assignment in progress is left as it is")
	})
}

// TestRetryRefusedWhileDownstreamRuns: a retry of a FAILED run while a
// step downstream of a failed one still runs (here "report", all_done
// after "a", released by a's failure) would keep that step, the state
// table forbidding a running step's reset, and the run could then end
// SUCCEEDED with report's output computed from a's failure. The retry is
// refused (ErrConflict naming the step) and writes nothing; once report
// ended, the retry runs a, report and boom again.
func TestRetryRefusedWhileDownstreamRuns(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"retry-downstream","steps":[
			{"name":"a","job":{"type":"a","maxAttempts":1},"onFailure":"continue"},
			{"name":"report","after":["a"],"trigger":"all_done","job":{"type":"report"}},
			{"name":"boom","after":["a"],"trigger":"all_done","job":{"type":"boom","maxAttempts":1}}]}`)
		var first atomic.Bool
		first.Store(true)
		fails := func(what string) handler {
			return func(*payload) (json.RawMessage, error) {
				if first.Load() {
					return nil, fmt.Errorf("%s failed", what)
				}
				return json.RawMessage(`"ok"`), nil
			}
		}
		report := func(p *payload) (json.RawMessage, error) {
			var a struct{ State string }
			require.NoError(t, json.Unmarshal(p.Steps["a"], &a))
			return json.Marshal("a was " + a.State)
		}
		run := b.start(t, name, `{}`)
		b.work(t, map[string]handler{"a": fails("a")})
		// report's job is taken, and runs on while boom fails the run.
		held, err := b.st.JobAcquire(b.ctx, &store.JobAcquireParams{Queue: "report", Max: 1, Owner: "test", LeaseDuration: time.Minute, Now: b.now()})
		require.NoError(t, err)
		require.Len(t, held, 1)
		b.work(t, map[string]handler{"boom": fails("boom")})
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunFailed, run.State)
		require.Equal(t, map[string]flow.StepState{"a": F, "report": R, "boom": F}, states(steps))

		first.Store(false)
		_, err = b.adv.Retry(b.ctx, b.st, run.ID)
		require.ErrorIs(t, err, workflow.ErrConflict)
		require.ErrorContains(t, err, `step "report" is still RUNNING; retry after it ends`)
		again, steps2 := b.get(t, run.ID)
		require.Equal(t, run, again, "the refused retry wrote nothing")
		require.Equal(t, steps, steps2, "the refused retry wrote nothing")

		out, err := report(&payload{Steps: map[string]json.RawMessage{"a": json.RawMessage(`{"state":"FAILED"}`)}})
		require.NoError(t, err)
		_, err = b.st.JobFinishMany(b.ctx, &store.JobFinishManyParams{Now: b.now(), Jobs: []*store.JobFinishParams{
			{ID: held[0].ID, Attempt: held[0].Attempt, State: job.StateSuccess, Outcome: job.OutcomeSuccess, Result: out}}})
		require.NoError(t, err)
		_, err = b.adv.AdvanceRun(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		_, err = b.adv.Retry(b.ctx, b.st, run.ID)
		require.NoError(t, err)
		b.work(t, map[string]handler{"a": fails("a"), "boom": fails("boom"), "report": report})
		run, steps = b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State, run.Error)
		require.JSONEq(t, `"a was SUCCEEDED"`, string(steps["report"][0].Output), "report ran again on a's new output")
		require.Equal(t, 2, steps["report"][0].Generation)
	})
}
