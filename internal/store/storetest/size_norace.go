//go:build !race

package storetest

// judgeFinalizeSQLite: see size_race.go.
const judgeFinalizeSQLite = 400
