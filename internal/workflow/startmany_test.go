package workflow_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/workflow"
)

// TestStartManyMixed: one Start of runs of a workflow whose roots are
// plain (released together, in one job insert and one step insert) and of
// one whose root has an `if` and one a `forEach` over the input (released
// run by run): every run's roots are as a lone start makes them, and every
// run ends as it should.
func TestStartManyMixed(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		plain := b.put(t, `{"name":"plain","steps":[
			{"name":"a","job":{"type":"echo"}},
			{"name":"wait","signal":{"timeout":"1h"}},
			{"name":"b","after":["a"],"job":{"type":"echo"}}]}`)
		iffy := b.put(t, `{"name":"iffy","steps":[
			{"name":"a","if":"input.go","job":{"type":"echo"}},
			{"name":"fan","forEach":"input.items","job":{"type":"echo"}}]}`)
		params := []*workflow.StartParams{
			{Workflow: plain, Input: json.RawMessage(`{"n":1}`)},
			{Workflow: iffy, Input: json.RawMessage(`{"go":false,"items":[1,2]}`)},
			{Workflow: plain, Input: json.RawMessage(`{"n":2}`), IdempotencyKey: "k"},
			{Workflow: iffy, Input: json.RawMessage(`{"go":true,"items":[]}`)},
			{Workflow: plain, Input: json.RawMessage(`{"n":2}`), IdempotencyKey: "k"},
		}
		before := outboxCount(t, b)
		res, err := b.adv.Start(b.ctx, b.st, params)
		require.NoError(t, err)
		require.Len(t, res, 5)
		require.True(t, res[4].Duplicate)
		require.Equal(t, res[2].Run.ID, res[4].Run.ID)
		require.Greater(t, outboxCount(t, b), before)

		for _, i := range []int{0, 2} {
			run, steps := b.get(t, res[i].Run.ID)
			require.Equal(t, flow.RunRunning, run.State)
			require.Equal(t, map[string]flow.StepState{"a": R, "wait": R}, states(steps))
			require.NotEqual(t, uuid.Nil, steps["a"][0].JobID)
			require.Equal(t, uuid.Nil, steps["wait"][0].JobID)
			require.Equal(t, 1, steps["a"][0].Generation)
		}
		_, steps := b.get(t, res[1].Run.ID)
		require.Equal(t, map[string]flow.StepState{"a": K, "fan[0]": R, "fan[1]": R}, states(steps))
		_, steps = b.get(t, res[3].Run.ID)
		require.Equal(t, map[string]flow.StepState{"a": R, "fan": S}, states(steps))

		// The jobs run with the payload of a lone start.
		var inputs []float64
		b.work(t, map[string]handler{"echo": func(p *payload) (json.RawMessage, error) {
			var in struct{ N float64 }
			if p.Run.Step == "a" && len(p.Steps) == 0 && json.Unmarshal(p.Input, &in) == nil && in.N > 0 {
				inputs = append(inputs, in.N)
			}
			return echo(p)
		}})
		require.ElementsMatch(t, []float64{1, 2}, inputs, "each plain run's root job has its run's input")
		for _, i := range []int{1, 3} {
			run, _ := b.get(t, res[i].Run.ID)
			require.Equal(t, flow.RunSucceeded, run.State, run.Error)
		}
		for _, i := range []int{0, 2} {
			_, err := b.adv.Signal(b.ctx, b.st, res[i].Run.ID, "wait", json.RawMessage(`true`))
			require.NoError(t, err)
		}
		b.work(t, map[string]handler{"echo": echo})
		for _, i := range []int{0, 2} {
			run, steps := b.get(t, res[i].Run.ID)
			require.Equal(t, flow.RunSucceeded, run.State, run.Error)
			require.Equal(t, map[string]flow.StepState{"a": S, "wait": S, "b": S}, states(steps))
		}
	})
}
