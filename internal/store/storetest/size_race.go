//go:build race

package storetest

// judgeFinalizeSQLite is how many transactions JudgeAndFinalizeConcurrently
// runs at once on SQLite under the race detector, where a SQLite
// statement costs about ten times as much (its C, transpiled to Go, is
// instrumented). SQLite's write transactions queue for the store's one
// writer connection whatever their number, so a hundred queue as four
// hundred do; the four hundred are for PostgreSQL, where they deadlocked
// without one counter row per transaction.
const judgeFinalizeSQLite = 100
