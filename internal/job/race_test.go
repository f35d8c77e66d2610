//go:build race

package job

// raceEnabled: built with -race, which changes what allocates.
const raceEnabled = true
