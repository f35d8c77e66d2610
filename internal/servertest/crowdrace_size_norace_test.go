//go:build !race

package servertest_test

// Sizes of the crowd races without the race detector (see
// crowdrace_size_race_test.go).
const (
	crowdRacePostgresUnits = 2000
	crowdRaceSQLiteUnits   = 300
)
