//go:build !unix

package natsembed

// lockDir does not lock where flock is missing: run one embedded server per
// storage directory.
func lockDir(string) (func(), error) { return func() {}, nil }
