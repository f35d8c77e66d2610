//go:build !unix

package main

import (
	"os/exec"
	"time"
)

// isolate: without process groups, stopping a program kills it (its own
// children may survive it); pipes they hold do not keep the worker waiting.
func isolate(cmd *exec.Cmd, grace time.Duration) func() {
	cmd.WaitDelay = grace
	return func() {}
}
