package loadtest

import "syscall"

// childAttr puts the server in a process group of its own and has the
// kernel kill it if this program dies, so no run leaves one behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
