//go:build unix

package docket_test

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/testdb"
)

// burnArgs is the no-op job of BenchmarkBurnAllocs (the same shape as
// `docket bench`'s).
type burnArgs struct{}

func (burnArgs) JobType() string { return "bench.noop" }

// burnJobsDefault is the jobs of one burn; DOCKET_BURN_JOBS changes it.
const burnJobsDefault = 20_000

// BenchmarkBurnAllocs measures what the Go process spends per job on the
// hot path, in figures a shared machine does not move: each op inserts a
// burn of no-op jobs (InsertMany, 5,000 a call: COPY on PostgreSQL) and
// works it down with a Worker as `docket bench` runs it (5,000 slots,
// acquisitions of 2,000), from Start to a Stop that has flushed every
// completion. It reports the heap allocations and bytes per job of the
// insert and of the work (runtime.MemStats of the whole process: the
// engine, the store, pgx or the SQLite driver, the runtime), and the
// process's CPU per job, which is only indicative on a busy machine.
//
//	DOCKET_TEST_DATABASE_URL=… go test -run '^$' -bench BurnAllocs -benchtime 3x .
func BenchmarkBurnAllocs(b *testing.B) {
	jobs := burnJobsDefault
	if s := os.Getenv("DOCKET_BURN_JOBS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("DOCKET_BURN_JOBS=%q: want a positive number", s)
		}
		jobs = n
	}
	for _, backend := range testdb.Backends() {
		b.Run(backend.Name, func(b *testing.B) { benchBurnAllocs(b, backend, jobs) })
	}
}

// burnFigures accumulates one phase's cost over the burns.
type burnFigures struct {
	allocs, bytes uint64
	cpu           time.Duration
}

func (f *burnFigures) measure(b *testing.B, phase func()) {
	var before, after runtime.MemStats
	cpu0 := processCPU(b)
	runtime.ReadMemStats(&before)
	phase()
	runtime.ReadMemStats(&after)
	f.cpu += processCPU(b) - cpu0
	f.allocs += after.Mallocs - before.Mallocs
	f.bytes += after.TotalAlloc - before.TotalAlloc
}

func (f *burnFigures) report(b *testing.B, phase string, jobs int) {
	n := float64(jobs)
	b.ReportMetric(float64(f.allocs)/n, phase+"-allocs/job")
	b.ReportMetric(float64(f.bytes)/n, phase+"-B/job")
	b.ReportMetric(float64(f.cpu.Microseconds())/n, phase+"-cpu-µs/job")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchBurnAllocs(b *testing.B, backend testdb.Backend, jobs int) {
	ctx := context.Background()
	client, err := docket.NewClient(ctx, docket.Config{
		DatabaseURL: backend.URL(b), AutoMigrate: true, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = client.Close() })
	batch := make([]docket.InsertParams, 5000)
	for i := range batch {
		batch[i].Args = burnArgs{}
	}
	var insert, work burnFigures
	b.ResetTimer()
	for i := range b.N {
		insert.measure(b, func() {
			for left := jobs; left > 0; left -= len(batch) {
				if _, err := client.InsertMany(ctx, batch[:min(left, len(batch))]); err != nil {
					b.Fatal(err)
				}
			}
		})
		work.measure(b, func() { burnDown(b, client, jobs) })
		b.StopTimer()
		counts, err := client.CountByState(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if got, want := counts[docket.JobStateSuccess], (i+1)*jobs; got != want {
			b.Fatalf("after burn %d: %d jobs SUCCESS, want %d (%v)", i+1, got, want, counts)
		}
		b.StartTimer()
	}
	total := burnFigures{allocs: insert.allocs + work.allocs, bytes: insert.bytes + work.bytes, cpu: insert.cpu + work.cpu}
	insert.report(b, "insert", b.N*jobs)
	work.report(b, "work", b.N*jobs)
	total.report(b, "total", b.N*jobs)
}

// burnDown works jobs no-op jobs down and returns once a Stop has written
// every completion.
func burnDown(b *testing.B, client *docket.Client, jobs int) {
	w := docket.NewWorker(client, docket.WorkerConfig{
		Queues:     map[string]int{burnArgs{}.JobType(): 5000},
		FetchBatch: 2000,
	})
	var returned atomic.Int64
	all := make(chan struct{})
	docket.AddHandler(w, func(context.Context, *docket.Job[burnArgs]) error {
		if returned.Add(1) == int64(jobs) {
			close(all)
		}
		return nil
	})
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("burn of %d jobs: %d handlers returned in 5 minutes", jobs, returned.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w.Stop(ctx)
}
