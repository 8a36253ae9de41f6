//go:build !(linux || darwin || freebsd)

package sqlitestore

import (
	"errors"
	"os"
	"runtime"
)

// freeSpace is not measured on this platform.
func freeSpace(string) (int64, error) {
	return 0, errors.New("free space is not measured on " + runtime.GOOS)
}

// fileID is not known on this platform: no clean stop is proven.
func fileID(os.FileInfo) string { return "" }
