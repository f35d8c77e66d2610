package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/storetest"
)

// BenchmarkStore runs the shared hot-path benchmarks on a durable file
// (WAL, synchronous=FULL):
//
//	go test -run '^$' -bench . -benchtime 20x ./internal/store/sqlite/
func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, func(b *testing.B) store.Store {
		return migrated(b, filepath.Join(b.TempDir(), "docket.db"))
	})
}

// BenchmarkFindWork measures finding work (PoolListEligible) among 10,000
// open pools and 10,000 contributors, on a durable file: p50_ms and p99_ms
// of one call.
//
//	go test -run '^$' -bench FindWork -benchtime 2000x ./internal/store/sqlite/
func BenchmarkFindWork(b *testing.B) {
	storetest.BenchmarkFindWork(b, migrated(b, filepath.Join(b.TempDir(), "docket.db")))
}
