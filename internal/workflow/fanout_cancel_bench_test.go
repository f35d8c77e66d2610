package workflow_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/testdb"
	"github.com/docket-run/docket/internal/teststore"
	"github.com/docket-run/docket/internal/workflow"
)

// BenchmarkFanOutCancel is the time to cancel (Advancer.Cancel, what
// POST /v1/runs/{id}/cancel runs) a run whose one step fans out over
// 10,000 items, started (untimed) just before. Variants:
//
//   - job: 10,000 job instances, every job QUEUED: all are canceled
//     with their jobs in the cancel's transaction, and the run is
//     CANCELED;
//   - running1000: the same with 1,000 of the jobs acquired (RUNNING):
//     9,000 canceled, the 1,000 asked to stop, the run waits for them;
//   - human: 10,000 units of a human step, every one canceled.
//
// cpu-ms/op is the test process's CPU time (SQLite's work is in it,
// PostgreSQL's is not). Run with -benchtime=1x; DOCKET_TEST_DATABASE_URL
// names the PostgreSQL database; docs/benchmarks.md has runs.
func BenchmarkFanOutCancel(b *testing.B) {
	items := make([]int, flow.MaxForEachItems)
	for i := range items {
		items[i] = i
	}
	input, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		b.Fatal(err)
	}
	variants := []struct {
		name, def string
		running   int // jobs acquired before the cancel
	}{
		{"job", `{"name":"fan","steps":[{"name":"each","forEach":"input.items","input":"{'id': item}","job":{"type":"t"}}]}`, 0},
		{"running1000", `{"name":"fan","steps":[{"name":"each","forEach":"input.items","input":"{'id': item}","job":{"type":"t"}}]}`, 1000},
		{"human", `{"name":"fan","steps":[{"name":"each","forEach":"input.items","input":"{'id': item}","human":{"task":"label"}}]}`, 0},
	}
	const labelTask = `{"title": "Label", "fields": [{"name": "ok", "kind": "choice", "required": true, "options": [{"value": "yes"}, {"value": "no"}]}]}`
	for _, backend := range testdb.Backends() {
		for _, v := range variants {
			b.Run(backend.Name+"/"+v.name, func(b *testing.B) {
				ctx := context.Background()
				def, err := flow.Decode([]byte(v.def))
				if err != nil {
					b.Fatal(err)
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
				var (
					last *flow.Run
					cpu  time.Duration
				)
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					res, err := adv.Start(ctx, st, []*workflow.StartParams{{Workflow: def.Name, Input: input}})
					if err != nil {
						b.Fatal(err)
					}
					if v.running > 0 {
						rows, err := st.JobAcquire(ctx, &store.JobAcquireParams{Queue: "t", Max: v.running, Owner: "bench", LeaseDuration: time.Hour, Now: time.Now()})
						if err != nil {
							b.Fatal(err)
						}
						if len(rows) != v.running {
							b.Fatalf("acquired %d jobs, want %d", len(rows), v.running)
						}
					}
					cpu0 := cpuTime()
					b.StartTimer()
					last, err = adv.Cancel(ctx, st, res[0].Run.ID)
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					cpu += cpuTime() - cpu0
				}
				b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
				list, err := st.StepList(ctx, last.ID)
				if err != nil {
					b.Fatal(err)
				}
				canceled, running := 0, 0
				for _, in := range list {
					switch in.State {
					case flow.StepCanceled:
						canceled++
					case flow.StepRunning:
						running++
					}
				}
				if want := len(items) - v.running; canceled != want || running != v.running || (v.running == 0) != (last.State == flow.RunCanceled) {
					b.Fatalf("after the cancel: run %s, %d instances CANCELED (want %d), %d RUNNING (want %d)", last.State, canceled, want, running, v.running)
				}
				b.ReportMetric(float64(canceled), "canceled")
			})
		}
	}
}
