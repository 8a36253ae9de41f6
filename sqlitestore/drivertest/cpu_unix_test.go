//go:build unix

package drivertest

import "syscall"

// processCPU is the CPU time (user and system) the test process has used,
// in nanoseconds, every thread together: SQLite's and the driver's work
// included, which a benchmark's ns/op on a disk hides behind the fsync.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
