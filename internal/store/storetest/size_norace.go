//go:build !race

package storetest

// judgeFinalizeSQLite: see size_race.go.
const judgeFinalizeSQLite = 400

// batchRunsSQLite: see size_race.go.
const batchRunsSQLite = 10_000
