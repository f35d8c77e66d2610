//go:build unix

package main

import (
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// isolate runs cmd in a process group of its own, so a Ctrl-C meant for the
// worker does not reach the programs it runs (the worker decides when they
// stop), and stopping a program stops whatever it started too: SIGTERM to
// the group when cmd's context is done, SIGKILL grace later. Call the
// returned function once cmd has exited.
func isolate(cmd *exec.Cmd, grace time.Duration) func() {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var (
		mu     sync.Mutex
		killer *time.Timer
		exited bool
	)
	cmd.Cancel = func() error {
		pgid := -cmd.Process.Pid
		mu.Lock()
		defer mu.Unlock()
		if !exited {
			killer = time.AfterFunc(grace, func() {
				mu.Lock()
				defer mu.Unlock()
				if !exited {
					_ = syscall.Kill(pgid, syscall.SIGKILL)
				}
			})
		}
		return syscall.Kill(pgid, syscall.SIGTERM)
	}
	// Pipes held open by a leftover child do not keep the worker waiting.
	cmd.WaitDelay = grace + 2*time.Second
	return func() {
		mu.Lock()
		defer mu.Unlock()
		exited = true
		if killer != nil {
			killer.Stop()
			// The program was stopped: leave nothing of it running.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}
