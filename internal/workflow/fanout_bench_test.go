package workflow_test

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
	"github.com/docket-run/docket/internal/workflow"
	"github.com/google/uuid"
)

// BenchmarkFanOutStart is the time to start a run whose one step fans out
// over a list in the run's input, {"items": [0, 1, …, 9999]} (48,891
// bytes): every instance released, with its job, in the start's one
// transaction. Variants:
//
//   - whole: 10,000 instances, each carrying the whole run input (the
//     default payload): 489 MB, past flow.MaxFanOutBytes, so the step
//     fails at once without writing them;
//   - whole1300: 1,300 instances (items below 1,300) carrying the whole
//     input: 63.6 MB, just under the cap;
//   - input: 10,000 instances with "input": "{'id': item}";
//   - if100: a per-instance `if` keeps the first 100 of the 10,000 items,
//     which carry the whole input (4.9 MB): the cost of evaluating it
//     10,000 times;
//   - human: 10,000 units of a human step with "input": "{'id': item}"
//     (payload-MB counts the units' inputs).
//
// payload-MB is what the instances' job payloads hold in all (one
// payload's length times the instances released); cpu-ms/op the test
// process's CPU time (user and system: SQLite's work is in it,
// PostgreSQL's is not). The timings depend on
// the machine and the database; docs/benchmarks.md has runs. Run with
// -benchtime=1x; DOCKET_TEST_DATABASE_URL names the PostgreSQL database.
func BenchmarkFanOutStart(b *testing.B) {
	items := make([]int, flow.MaxForEachItems)
	for i := range items {
		items[i] = i
	}
	input, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		b.Fatal(err)
	}
	variants := []struct{ name, def string }{
		{"whole", `{"name":"fan","steps":[{"name":"each","forEach":"input.items","job":{"type":"t"}}]}`},
		{"whole1300", `{"name":"fan","steps":[{"name":"each","forEach":"input.items.filter(x, x < 1300.0)","job":{"type":"t"}}]}`},
		{"input", `{"name":"fan","steps":[{"name":"each","forEach":"input.items","input":"{'id': item}","job":{"type":"t"}}]}`},
		{"if100", `{"name":"fan","steps":[{"name":"each","forEach":"input.items","if":"index < 100","job":{"type":"t"}}]}`},
		{"human", `{"name":"fan","steps":[{"name":"each","forEach":"input.items","input":"{'id': item}","human":{"task":"label"}}]}`},
	}
	const labelTask = `{"title": "Label", "fields": [{"name": "ok", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}]}`
	for _, backend := range testdb.Backends() {
		for _, v := range variants {
			b.Run(backend.Name+"/"+v.name, func(b *testing.B) {
				ctx := context.Background()
				def, err := flow.Decode([]byte(v.def))
				if err != nil {
					b.Skipf("this version does not take the definition: %v", err)
				}
				st := teststore.Open(b, backend.URL(b))
				canon, err := flow.Canonical(def)
				if err != nil {
					b.Fatal(err)
				}
				hash, err := flow.Hash(def)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := st.TaskPut(ctx, &store.TaskPutParams{Name: "label", Definition: json.RawMessage(labelTask), Hash: "sha256:label", Now: time.Now()}); err != nil {
					b.Fatal(err)
				}
				if _, _, err := st.WorkflowPut(ctx, &store.WorkflowPutParams{Name: def.Name, Definition: canon, Hash: hash}); err != nil {
					b.Fatal(err)
				}
				adv, err := workflow.NewAdvancer(nil)
				if err != nil {
					b.Fatal(err)
				}
				var last *flow.Run
				cpu0 := cpuTime()
				for b.Loop() {
					res, err := adv.Start(ctx, st, []*workflow.StartParams{{Workflow: def.Name, Input: input}})
					if err != nil {
						b.Fatal(err)
					}
					last = res[0].Run
				}
				b.StopTimer()
				b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
				list, err := st.StepList(ctx, last.ID)
				if err != nil {
					b.Fatal(err)
				}
				released, size := 0, 0
				for _, in := range list {
					if in.State != flow.StepRunning {
						if in.Error != "" && in.State != flow.StepSkipped {
							b.Logf("%s[%d] %s: %s", in.Step, in.Index, in.State, in.Error)
						}
						continue
					}
					released++
					if size == 0 && in.UnitID != uuid.Nil {
						u, err := st.UnitGet(ctx, in.UnitID)
						if err != nil {
							b.Fatal(err)
						}
						size = len(u.Input)
					}
					if size == 0 {
						row, err := st.JobGet(ctx, in.JobID)
						if err != nil {
							b.Fatal(err)
						}
						size = len(row.Payload)
					}
				}
				b.ReportMetric(float64(released), "instances")
				b.ReportMetric(float64(released*size)/1e6, "payload-MB")
			})
		}
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
