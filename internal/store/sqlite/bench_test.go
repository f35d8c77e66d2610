package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// Benchmarks of the hot path on a durable file (synchronous=FULL):
//
//	go test -run '^$' -bench . -benchtime 20x ./internal/store/sqlite/
//
// Each reports jobs/s; one iteration is one call of the given batch size.

func BenchmarkJobInsertMany(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := migrated(b, filepath.Join(b.TempDir(), "docket.db"))
			ctx := context.Background()
			ps := make([]*store.JobInsertParams, batch)
			b.ResetTimer()
			for range b.N {
				for i := range ps {
					ps[i] = newJob("bench")
					ps[i].Payload = json.RawMessage(`{"to":"someone@example.com","template":"welcome"}`)
				}
				if _, err := s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: ps, Now: base}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// BenchmarkAcquireFinish works a pre-inserted backlog: acquire a batch, then
// finish it as SUCCESS (two durable transactions per batch).
func BenchmarkAcquireFinish(b *testing.B) {
	for _, batch := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := migrated(b, filepath.Join(b.TempDir(), "docket.db"))
			ctx := context.Background()
			insertN(b, s, "bench", b.N*batch)
			b.ResetTimer()
			var acquire, finish time.Duration
			for range b.N {
				t0 := time.Now()
				rows, err := s.JobAcquire(ctx, &store.JobAcquireParams{
					Queue: "bench", Max: batch, Owner: "n", LeaseDuration: time.Minute, Now: base.Add(time.Second),
				})
				if err != nil {
					b.Fatal(err)
				}
				if len(rows) != batch {
					b.Fatalf("acquired %d, want %d", len(rows), batch)
				}
				t1 := time.Now()
				fs := make([]*store.JobFinishParams, len(rows))
				for i, r := range rows {
					fs[i] = &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: job.StateSuccess,
						Result: json.RawMessage(`{"ok":true}`)}
				}
				if _, err := s.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: fs, Now: base.Add(2 * time.Second)}); err != nil {
					b.Fatal(err)
				}
				acquire += t1.Sub(t0)
				finish += time.Since(t1)
			}
			jobs := float64(b.N * batch)
			b.ReportMetric(jobs/b.Elapsed().Seconds(), "jobs/s")
			b.ReportMetric(jobs/acquire.Seconds(), "acquired/s")
			b.ReportMetric(jobs/finish.Seconds(), "finished/s")
		})
	}
}
