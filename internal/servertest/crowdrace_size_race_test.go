//go:build race

package servertest_test

// Sizes of TestCrowdRacePostgres and TestCrowdRaceSQLite under the race
// detector, where the serve processes are race-built too and a request
// costs several times as much (on SQLite about ten times: its C,
// transpiled to Go, is instrumented): as many contributors as without it,
// so as many requests contend at once on the two processes, over fewer
// units (a unit's three slots are still raced for by every contributor
// that has not judged it, and the last units' slots by all of them). CI
// (scripts/test.sh) runs with -race, so these are the sizes CI proves; the
// !race file's run in a plain go test.
const (
	crowdRacePostgresUnits = 600
	crowdRaceSQLiteUnits   = 60
)
