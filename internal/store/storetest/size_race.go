//go:build race

// CI (scripts/test.sh) runs every package with -race, so these are the
// sizes CI proves; the larger ones, in size_norace.go, run in a plain
// go test.

package storetest

// judgeFinalizeSQLite is how many transactions JudgeAndFinalizeConcurrently
// runs at once on SQLite under the race detector, where a SQLite
// statement costs about ten times as much (its C, transpiled to Go, is
// instrumented). SQLite's write transactions queue for the store's one
// writer connection whatever their number, so a hundred queue as four
// hundred do; the four hundred are for PostgreSQL, where they deadlocked
// without one counter row per transaction.
const judgeFinalizeSQLite = 100

// batchRunsSQLite is the size of the Flows/RunInsert/Batch10000 batch on
// SQLite under the race detector. SQLite inserts a batch's runs one
// prepared statement each, in one transaction, and reads each in-batch
// duplicate back by its key: nothing in it depends on the batch's size
// (no parameter limit, no chunking), so 2,500 runs (1,250 keys, as many
// duplicates) take every path 10,000 do. PostgreSQL, which sends a batch
// as arrays, keeps 10,000.
const batchRunsSQLite = 2_500
