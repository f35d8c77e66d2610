package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcessCPU is the CPU time process pid has run so far, from the
// scheduler's nanosecond count (/proc/PID/schedstat: Linux, and a process
// on this machine, such as a PostgreSQL backend of a local cluster). The
// count is the process's main thread's: the whole of a single-threaded
// process, as a backend is, but not of a Go program's other threads.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/%d/schedstat is empty", pid)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/schedstat: %w", pid, err)
	}
	return time.Duration(ns), nil
}
