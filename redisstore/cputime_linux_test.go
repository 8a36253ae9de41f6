//go:build linux

package redisstore

import (
	"syscall"
	"unsafe"
)

// processCPU returns the CPU time the whole process has used, every thread
// included, in nanoseconds (CLOCK_PROCESS_CPUTIME_ID), or -1 if
// unavailable. Unlike wall time it does not count time spent waiting for a
// CPU on a busy machine.
func processCPU() int64 {
	const clockProcessCPUTimeID = 2
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockProcessCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return -1
	}
	return ts.Nano()
}
