//go:build !linux

package loadtest

import "syscall"

// childAttr is nothing outside Linux: the server shares this program's
// process group (a ^C reaches it too) and outlives a SIGKILL of it.
func childAttr() *syscall.SysProcAttr { return nil }
