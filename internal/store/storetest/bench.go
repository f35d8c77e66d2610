package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/docket-run/docket/internal/job"
	"github.com/docket-run/docket/internal/store"
)

// RunBenchmarks measures the hot path of a backend, one sub-benchmark per
// inner piece of the engine, each reporting jobs/s so that benchstat shows
// regressions:
//
//	InsertMany/batch=N   one JobInsertMany of N jobs (COPY above 50 on PostgreSQL)
//	Acquire/batch=N      one JobAcquire of N jobs from a standing backlog
//	Finish/batch=N       one JobFinishMany of N acquired jobs (SUCCESS)
//	Transition           one JobTransition (CREATED → QUEUED)
//	RunInsertMany/batch=N  one RunInsertMany of N workflow runs with keys
//
// open must return a migrated, empty store closed via b.Cleanup; each
// sub-benchmark opens its own. Setup (inserting and acquiring what an
// iteration consumes) is not timed. Run them with, e.g.:
//
//	go test -run '^$' -bench . -benchtime 20x -count 6 ./internal/store/postgres/ | tee new.txt
//	benchstat old.txt new.txt
func RunBenchmarks(b *testing.B, open func(b *testing.B) store.Store) {
	for _, n := range []int{1, 100, 1000, 5000} {
		b.Run(fmt.Sprintf("InsertMany/batch=%d", n), func(b *testing.B) {
			benchInsertMany(b, open(b), n)
		})
	}
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("Acquire/batch=%d", n), func(b *testing.B) {
			benchAcquire(b, open(b), n)
		})
	}
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("Finish/batch=%d", n), func(b *testing.B) {
			benchFinish(b, open(b), n)
		})
	}
	b.Run("Transition", func(b *testing.B) {
		benchTransition(b, open(b))
	})
	for _, n := range []int{1000, 100_000} {
		b.Run(fmt.Sprintf("RunInsertMany/batch=%d", n), func(b *testing.B) {
			benchRunInsertMany(b, open(b), n)
		})
	}
}

// benchBacklog is the standing backlog every acquisition benchmark works
// from, so that indexes are of a realistic size.
const benchBacklog = 20_000

const benchQueue = "bench"

func benchJobs(n int, state job.State) []*store.JobInsertParams {
	ps := make([]*store.JobInsertParams, n)
	for i := range ps {
		ps[i] = &store.JobInsertParams{
			ID: uuid.Must(uuid.NewV7()), Type: benchQueue, Queue: benchQueue,
			Priority: 1, Payload: json.RawMessage(`{"to":"someone@example.com"}`),
			State: state, MaxAttempts: 25,
		}
	}
	return ps
}

// benchInsert inserts n jobs in batches of at most 5,000.
func benchInsert(b *testing.B, s store.Store, n int, state job.State) []*store.JobInsertResult {
	b.Helper()
	var out []*store.JobInsertResult
	for n > 0 {
		k := min(n, 5000)
		res, err := s.JobInsertMany(context.Background(), &store.JobInsertManyParams{Jobs: benchJobs(k, state), Now: base})
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, res...)
		n -= k
	}
	return out
}

func reportJobs(b *testing.B, perOp int) {
	b.ReportMetric(float64(b.N*perOp)/b.Elapsed().Seconds(), "jobs/s")
}

func benchInsertMany(b *testing.B, s store.Store, n int) {
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		ps := benchJobs(n, job.StateQueued)
		b.StartTimer()
		if _, err := s.JobInsertMany(ctx, &store.JobInsertManyParams{Jobs: ps, Now: base}); err != nil {
			b.Fatal(err)
		}
	}
	reportJobs(b, n)
}

func benchAcquire(b *testing.B, s store.Store, n int) {
	ctx := context.Background()
	benchInsert(b, s, benchBacklog, job.StateQueued)
	for b.Loop() {
		b.StopTimer()
		benchInsert(b, s, n, job.StateQueued) // keep the backlog standing
		b.StartTimer()
		rows, err := s.JobAcquire(ctx, &store.JobAcquireParams{
			Queue: benchQueue, Max: n, Owner: "bench", LeaseDuration: time.Hour, Now: at(time.Second),
		})
		if err != nil {
			b.Fatal(err)
		}
		if len(rows) != n {
			b.Fatalf("acquired %d jobs, want %d", len(rows), n)
		}
	}
	reportJobs(b, n)
}

func benchFinish(b *testing.B, s store.Store, n int) {
	ctx := context.Background()
	benchInsert(b, s, benchBacklog, job.StateQueued)
	for b.Loop() {
		b.StopTimer()
		benchInsert(b, s, n, job.StateQueued)
		rows, err := s.JobAcquire(ctx, &store.JobAcquireParams{
			Queue: benchQueue, Max: n, Owner: "bench", LeaseDuration: time.Hour, Now: at(time.Second),
		})
		if err != nil {
			b.Fatal(err)
		}
		fs := make([]*store.JobFinishParams, len(rows))
		for i, r := range rows {
			fs[i] = &store.JobFinishParams{ID: r.ID, Attempt: r.Attempt, State: job.StateSuccess,
				Outcome: job.OutcomeSuccess, FinishedAt: at(2 * time.Second)}
		}
		b.StartTimer()
		applied, err := s.JobFinishMany(ctx, &store.JobFinishManyParams{Jobs: fs, Now: at(2 * time.Second)})
		if err != nil {
			b.Fatal(err)
		}
		for i, to := range applied {
			if to == "" {
				b.Fatalf("finish %d was not applied", i)
			}
		}
	}
	reportJobs(b, n)
}

func benchTransition(b *testing.B, s store.Store) {
	ctx := context.Background()
	benchInsert(b, s, benchBacklog, job.StateQueued)
	for b.Loop() {
		b.StopTimer()
		res := benchInsert(b, s, 1, job.StateCreated)
		b.StartTimer()
		if _, err := s.JobTransition(ctx, &store.JobTransitionParams{
			ID: res[0].Job.ID, From: job.StateCreated, To: job.StateQueued, Now: at(time.Second),
		}); err != nil {
			b.Fatal(err)
		}
	}
	reportJobs(b, 1)
}
