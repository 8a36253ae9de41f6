//go:build !linux

package bench

import "time"

// threadCPU is unavailable here; cpu-ns/op is not reported.
func threadCPU() int64 { return -1 }

// processCPU is unavailable here; -cpu-us is not reported.
func processCPU() int64 { return -1 }

// pause sleeps for d.
func pause(d time.Duration) { time.Sleep(d) }
