package docket_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The multi-process tests re-run this binary as a worker process.
	if role := os.Getenv(childRoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	goleak.VerifyTestMain(m)
}
