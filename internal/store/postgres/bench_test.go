package postgres

import (
	"testing"

	"github.com/docket-run/docket/internal/store"
	"github.com/docket-run/docket/internal/store/storetest"
)

// BenchmarkStore runs the shared hot-path benchmarks on a fresh schema of
// the server named by DOCKET_TEST_DATABASE_URL. Point it at a durable
// server (scripts/testdb.sh with DOCKET_TESTDB_DURABLE=1) for figures that
// mean anything; the test server has fsync off.
func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, func(b *testing.B) store.Store { return setup(b).s })
}

// BenchmarkFindWork measures finding work (PoolListEligible) among 10,000
// open pools and 10,000 contributors: p50_ms and p99_ms of one call.
//
//	go test -run '^$' -bench FindWork -benchtime 2000x ./internal/store/postgres/
func BenchmarkFindWork(b *testing.B) {
	storetest.BenchmarkFindWork(b, setup(b).s)
}
