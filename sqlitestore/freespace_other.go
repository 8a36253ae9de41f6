//go:build !(linux || darwin || freebsd)

package sqlitestore

import (
	"errors"
	"runtime"
)

// freeSpace is not measured on this platform.
func freeSpace(string) (int64, error) {
	return 0, errors.New("free space is not measured on " + runtime.GOOS)
}
