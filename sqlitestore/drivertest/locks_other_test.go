//go:build !unix

package drivertest

import "testing"

// othersSeeSQLiteLock skips: the probe reads POSIX locks.
func othersSeeSQLiteLock(t *testing.T, path string) bool {
	t.Skip("the lock probe needs fcntl(2)")
	return false
}
