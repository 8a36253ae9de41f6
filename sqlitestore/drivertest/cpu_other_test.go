//go:build !unix

package drivertest

// processCPU is not read on this system: the CPU metrics report 0.
func processCPU() int64 { return 0 }
