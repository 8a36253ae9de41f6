//go:build !linux

package ctoken

// threadCPU is unavailable here; cpu-ns/op is not reported.
func threadCPU() int64 { return -1 }
