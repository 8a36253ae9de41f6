//go:build !linux

package redisstore

// processCPU is unavailable here; CPU metrics are not reported.
func processCPU() int64 { return -1 }
