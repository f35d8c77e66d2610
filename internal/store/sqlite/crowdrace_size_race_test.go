//go:build race

package sqlite_test

// crowdRaceUnits, crowdRaceContributors and crowdRaceAbandonEvery size
// TestCrowdRace under the race detector, where SQLite (C transpiled to Go,
// every access instrumented) runs a take and a judgment about ten times
// slower: a fifth of the units (180 slots), as many contributors (ten per
// strategy against three slots a unit, so each unit's slots are still
// raced for, and the last ones by all thirty), abandoning every fourth
// take (so dozens of assignments are abandoned and expired while the
// others take; RunCrowdRace requires some, and judgments through every
// strategy). CI (scripts/test.sh) runs with -race, so these are the sizes
// CI proves; the !race file's run in a plain go test.
const (
	crowdRaceUnits        = 60
	crowdRaceContributors = 30
	crowdRaceAbandonEvery = 4
)
