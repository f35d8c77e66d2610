package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/flow"
	"github.com/docket-run/docket/internal/store"
)

// benchRunInsertMany measures RunInsertMany of n runs, each with an
// idempotency key, reporting runs/s.
func benchRunInsertMany(b *testing.B, s store.Store, n int) {
	ctx := context.Background()
	def := &flow.Definition{Name: "bench", Steps: []flow.Step{{Name: "a", Job: &flow.JobStep{Type: "t"}}}}
	canon, err := flow.Canonical(def)
	if err != nil {
		b.Fatal(err)
	}
	hash, err := flow.Hash(def)
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := s.WorkflowPut(ctx, &store.WorkflowPutParams{Name: "bench", Definition: canon, Hash: hash, Now: base}); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		ps := make([]*store.RunInsertParams, n)
		for j := range ps {
			ps[j] = &store.RunInsertParams{
				ID: uuid.Must(uuid.NewV7()), Workflow: "bench", Version: 1,
				Input: json.RawMessage(`{"sku":"A-1","qty":2}`), IdempotencyKey: fmt.Sprintf("%d-%d", i, j),
			}
		}
		b.StartTimer()
		start := time.Now()
		if _, err := s.RunInsertMany(ctx, &store.RunInsertManyParams{Runs: ps, Now: base}); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(b.N*n)/total.Seconds(), "runs/s")
}
