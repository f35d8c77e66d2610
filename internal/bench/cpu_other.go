//go:build !unix

package bench

import "time"

// SelfCPU is the CPU time this process has used so far; 0 where the
// platform has no getrusage.
func SelfCPU() time.Duration { return 0 }
