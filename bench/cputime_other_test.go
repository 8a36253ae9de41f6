//go:build !linux

package bench

// threadCPU is unavailable here; cpu-ns/op is not reported.
func threadCPU() int64 { return -1 }

// processCPU is unavailable here; -cpu-us is not reported.
func processCPU() int64 { return -1 }
