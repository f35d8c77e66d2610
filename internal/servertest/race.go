//go:build race

package servertest

// raceEnabled: the tests run with -race, and so does the server they start
// (unless Options.Plain).
const raceEnabled = true
