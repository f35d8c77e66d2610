package workflow_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
	"github.com/google/uuid"
)

// padded is a run input with items 0..n-1 and a pad of size bytes that no
// instance needs.
func padded(n, size int) string {
	return fmt.Sprintf(`{"items":%s,"cfg":{"lang":"en"},"pad":%q}`, jsonIndexes(n), strings.Repeat("x", size))
}

func jsonIndexes(n int) string {
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	b, _ := json.Marshal(xs)
	return string(b)
}

// TestInputExpression: a step with `input` carries the expression's value
// as "input", without "steps" (a fan-out instance with its item and
// index): the stored payloads are small however large the run's input
// is, while a step without it carries the whole input. A step after the
// fan-out sees its outputs as usual.
func TestInputExpression(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"carry","steps":[
			{"name":"each","forEach":"input.items","input":"{'id': item, 'lang': input.cfg.lang}","job":{"type":"sq"}},
			{"name":"whole","forEach":"input.items","if":"index < 2","job":{"type":"sq"}},
			{"name":"count","after":["each"],"input":"{'n': size(steps.each.output), 'first': steps.each.output[0]}","job":{"type":"count"}}]}`)
		const n, pad = 50, 20_000
		run := b.start(t, name, padded(n, pad))
		_, steps := b.get(t, run.ID)
		require.Len(t, steps["each"], n)
		for _, st := range steps["each"] {
			require.Equal(t, R, st.State)
			row, err := b.st.JobGet(b.ctx, st.JobID)
			require.NoError(t, err)
			want := fmt.Sprintf(`{"run":{"id":%q,"step":"each","index":%d},"input":{"id":%d,"lang":"en"},"item":%d,"index":%d}`,
				run.ID, st.Index, st.Index, st.Index, st.Index)
			require.JSONEq(t, want, string(row.Payload), "instance %d carries its value, no steps", st.Index)
			require.Less(t, len(row.Payload), 150, "instance %d: the stored payload leaves the run's input out", st.Index)
		}
		for _, st := range steps["whole"] {
			if st.State != R {
				continue
			}
			row, err := b.st.JobGet(b.ctx, st.JobID)
			require.NoError(t, err)
			require.Greater(t, len(row.Payload), pad, "without input, an instance carries the whole run input")
			var p payload
			require.NoError(t, json.Unmarshal(row.Payload, &p))
			require.NotNil(t, p.Steps, "the documented shape: steps present")
			require.JSONEq(t, padded(n, pad), string(p.Input))
		}

		var counted *payload
		b.work(t, map[string]handler{
			"sq": func(p *payload) (json.RawMessage, error) {
				if p.Run.Step == "each" {
					require.Nil(t, p.Steps, "no steps member")
					var in struct{ ID int }
					require.NoError(t, json.Unmarshal(p.Input, &in))
					require.Equal(t, *p.Index, in.ID)
				}
				return json.Marshal(*p.Index * 2)
			},
			"count": func(p *payload) (json.RawMessage, error) {
				counted = p
				return json.RawMessage(`"ok"`), nil
			},
		})
		run, _ = b.get(t, run.ID)
		require.Equal(t, flow.RunSucceeded, run.State, run.Error)
		require.NotNil(t, counted)
		require.JSONEq(t, fmt.Sprintf(`{"n":%d,"first":0}`, n), string(counted.Input), "a step without forEach: the value only")
		require.Nil(t, counted.Item)
		require.Nil(t, counted.Index)
		require.Nil(t, counted.Steps)
	})
}

// TestInputExpressionFails: an `input` that fails for one instance fails
// the step before any of its jobs is made, naming the instance.
func TestInputExpressionFails(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"badcarry","steps":[
			{"name":"each","forEach":"input.items","input":"{'u': item.url}","job":{"type":"fetch"}}]}`)
		run := b.start(t, name, `{"items":[{"url":"a"},{"href":"b"},{"url":"c"}]}`)
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunFailed, run.State)
		require.Len(t, steps["each"], 1)
		require.Equal(t, F, steps["each"][0].State)
		require.Equal(t, `step "each"[1]: input: no such key: url`, steps["each"][0].Error)
		jobs, err := b.st.JobList(b.ctx, &store.JobListParams{Types: []string{"fetch"}, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, jobs, "no job is made for a step that fails")
	})
}

// TestFanOutByteCap: a fan-out whose instances would carry more than
// flow.MaxFanOutBytes fails the step, with what it would have written and
// the way out; nothing is written for it. With an `input` that keeps what
// an instance needs the same fan-out runs; an `input` that keeps too much
// fails the same way.
func TestFanOutByteCap(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		name := b.put(t, `{"name":"cap","steps":[
			{"name":"whole","forEach":"input.items","job":{"type":"heavy"},"onFailure":"continue"},
			{"name":"slim","forEach":"input.items","input":"{'id': item}","job":{"type":"light"}},
			{"name":"fat","forEach":"input.items","input":"input","job":{"type":"heavy"},"onFailure":"continue"}]}`)
		const n, pad = 1700, 40_000 // 1,700 × 40 kB = 68 MB > 64 MiB
		run := b.start(t, name, padded(n, pad))
		run, steps := b.get(t, run.ID)
		require.Equal(t, flow.RunRunning, run.State, "slim runs")

		require.Equal(t, 1, len(steps["whole"]))
		require.Equal(t, F, steps["whole"][0].State)
		msg := steps["whole"][0].Error
		require.Contains(t, msg, `step "whole": its 1700 instances would carry `)
		require.Contains(t, msg, "a fan-out carries at most 67108864 bytes (64 MiB) in all: give the step an input expression")
		var total int
		_, err := fmt.Sscanf(msg[strings.Index(msg, "carry ")+len("carry "):], "%d", &total)
		require.NoError(t, err)
		require.Greater(t, total, n*pad)
		require.Less(t, total, n*(pad+len(jsonIndexes(n))+200))

		require.Equal(t, 1, len(steps["fat"]))
		require.Equal(t, F, steps["fat"][0].State)
		require.Contains(t, steps["fat"][0].Error, `step "fat": its instances would carry more than 67108864 bytes (64 MiB, the most a fan-out carries in all), past it at instance `)
		jobs, err := b.st.JobList(b.ctx, &store.JobListParams{Types: []string{"heavy"}, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, jobs, "nothing is written for a step over the cap")

		require.Len(t, steps["slim"], n)
		for _, st := range steps["slim"] {
			require.Equal(t, R, st.State)
		}
	})
}

const sameTask = `{"title": "Same product?",
 "fields": [{"name": "same", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}],
 "judgmentsPerUnit": {"min": 1}}`

// TestInputExpressionHumanStep: a human step's unit input honours
// `input` as a job's payload does (without the "run" member), for each
// unit of a fan-out and for a step without forEach; without `input` the
// unit carries the documented shape.
func TestInputExpressionHumanStep(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		_, _, err := b.st.TaskPut(b.ctx, &store.TaskPutParams{Name: "same", Definition: json.RawMessage(sameTask), Hash: "sha256:same", Now: b.now()})
		require.NoError(t, err)
		name := b.put(t, `{"name":"pairs","steps":[
			{"name":"label","forEach":"input.pairs","input":"{'pair': item, 'lang': input.cfg.lang}","human":{"task":"same"}},
			{"name":"check","input":"input.cfg","human":{"task":"same"}},
			{"name":"plain","human":{"task":"same"}}]}`)
		in := `{"pairs":[["a","b"],["c","d"]],"cfg":{"lang":"en"},"pad":"` + strings.Repeat("x", 5000) + `"}`
		run := b.start(t, name, in)
		_, steps := b.get(t, run.ID)
		require.Len(t, steps["label"], 2)
		for _, st := range steps["label"] {
			require.Equal(t, R, st.State)
			u, err := b.st.UnitGet(b.ctx, st.UnitID)
			require.NoError(t, err)
			want := fmt.Sprintf(`{"input":{"pair":%s,"lang":"en"},"item":%s,"index":%d}`,
				[]string{`["a","b"]`, `["c","d"]`}[st.Index], []string{`["a","b"]`, `["c","d"]`}[st.Index], st.Index)
			require.JSONEq(t, want, string(u.Input))
			require.Less(t, len(u.Input), 100, "the unit input leaves the run's input out")
		}
		u, err := b.st.UnitGet(b.ctx, steps["check"][0].UnitID)
		require.NoError(t, err)
		require.JSONEq(t, `{"input":{"lang":"en"}}`, string(u.Input))
		u, err = b.st.UnitGet(b.ctx, steps["plain"][0].UnitID)
		require.NoError(t, err)
		require.JSONEq(t, `{"input":`+in+`,"steps":{}}`, string(u.Input))
	})
}

// TestHumanFanOutUnits: the units of a human fan-out, inserted together,
// belong each to its own instance, with the instance's input. (A value
// that cannot be stored, a NUL character, fails the step before any unit
// is made: TestUnstorableExpressionValueFailsStep.)
func TestHumanFanOutUnits(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		_, _, err := b.st.TaskPut(b.ctx, &store.TaskPutParams{Name: "same", Definition: json.RawMessage(sameTask), Hash: "sha256:same", Now: b.now()})
		require.NoError(t, err)
		name := b.put(t, `{"name":"units","steps":[
			{"name":"label","forEach":"input.ids","input":"{'id': item}","human":{"task":"same"}}]}`)
		run := b.start(t, name, `{"ids":[0,1,2,3,4]}`)
		_, steps := b.get(t, run.ID)
		require.Len(t, steps["label"], 5)
		units := map[uuid.UUID]bool{}
		for _, st := range steps["label"] {
			require.Equal(t, R, st.State, "instance %d", st.Index)
			require.False(t, units[st.UnitID], "instance %d shares its unit", st.Index)
			units[st.UnitID] = true
			u, err := b.st.UnitGet(b.ctx, st.UnitID)
			require.NoError(t, err)
			require.Equal(t, st.Index, u.StepIndex)
			require.JSONEq(t, fmt.Sprintf(`{"input":{"id":%d},"item":%d,"index":%d}`, st.Index, st.Index, st.Index), string(u.Input))
		}
		require.Len(t, units, 5)
	})
}

// TestPerInstanceIfEnds: the instances a per-instance `if` skips, and
// those whose `if` fails, end at release (in one statement) with the
// message naming the instance, in generation 1, while the others run.
func TestPerInstanceIfEnds(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *bundle) {
		const cond = "item.n < 0.5 || (item.n > 1.5 && item.n < 2.5) || (item.n > 3.5 && item.n < 4.5)"
		name := b.put(t, `{"name":"ifs","steps":[
			{"name":"each","forEach":"input.items","if":"`+cond+`","job":{"type":"sq"}}]}`)
		run := b.start(t, name, `{"items":[{"n":0},{"n":1},{"n":2},{"m":3},{"n":4},{"n":5}]}`)
		_, steps := b.get(t, run.ID)
		require.Len(t, steps["each"], 6)
		for _, st := range steps["each"] {
			require.Equal(t, 1, st.Generation, "instance %d", st.Index)
			switch st.Index {
			case 0, 2, 4:
				require.Equal(t, R, st.State, "instance %d", st.Index)
				require.NotEqual(t, uuid.Nil, st.JobID)
			case 1, 5:
				require.Equal(t, flow.StepSkipped, st.State, "instance %d", st.Index)
				require.Equal(t, fmt.Sprintf(`step "each"[%d]: if %q is false`, st.Index, cond), st.Error)
				require.Equal(t, uuid.Nil, st.JobID)
			case 3:
				require.Equal(t, flow.StepFailed, st.State)
				require.Contains(t, st.Error, "no such key")
				require.Equal(t, uuid.Nil, st.JobID)
			}
		}
	})
}
