//go:build !race

package servertest

const raceEnabled = false
