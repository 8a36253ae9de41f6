//go:build linux || darwin || freebsd

package sqlitestore

import (
	"fmt"
	"os"
	"syscall"
)

// freeSpace returns the bytes an unprivileged writer may still use on
// dir's file system.
func freeSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// fileID names the file info describes on its file system (device and
// inode): a copy has another, a rename or a move within the file
// system keeps it.
func fileID(info os.FileInfo) string {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d:%d", uint64(st.Dev), uint64(st.Ino))
}
