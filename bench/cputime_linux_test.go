//go:build linux

package bench

import (
	"syscall"
	"time"
	"unsafe"
)

// threadCPU returns the CPU time the calling OS thread has used, in
// nanoseconds (CLOCK_THREAD_CPUTIME_ID), or -1 if unavailable. Benchmarks
// report it per operation as cpu-ns/op, which unlike ns/op does not count
// time spent waiting for a CPU on a busy machine.
func threadCPU() int64 {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return -1
	}
	return ts.Nano()
}

// processCPU returns the CPU time this process has used, every thread, in
// nanoseconds (CLOCK_PROCESS_CPUTIME_ID), or -1 if unavailable.
func processCPU() int64 {
	const clockProcessCPUTimeID = 2
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockProcessCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return -1
	}
	return ts.Nano()
}

// pause sleeps for d in the calling thread (nanosleep: the runtime's
// timers wake a short sleep a millisecond late on some machines).
func pause(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil)
}
