//go:build !race

package sqlite_test

// Sizes of TestCrowdRace without the race detector (see
// crowdrace_size_race_test.go).
const (
	crowdRaceUnits        = 300
	crowdRaceContributors = 30
	crowdRaceAbandonEvery = 10
)
