//go:build linux || darwin || freebsd

package sqlitestore

import "syscall"

// freeSpace returns the bytes an unprivileged writer may still use on
// dir's file system.
func freeSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
