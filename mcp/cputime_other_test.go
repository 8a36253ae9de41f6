//go:build !linux

package ctokenmcp

// processCPU is unavailable here; CPU metrics are not reported.
func processCPU() int64 { return -1 }
