//go:build unix

package drivertest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// lockProbeEnv makes the test binary a child that reports whether another
// process holds a lock on SQLite's SHARED byte range of the file it names.
const lockProbeEnv = "CTOKEN_DRIVERTEST_LOCK_PROBE"

func init() {
	if path := os.Getenv(lockProbeEnv); path != "" {
		held, err := sharedRangeLocked(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lock probe:", err)
			os.Exit(1)
		}
		fmt.Println(held)
		os.Exit(0)
	}
}

// sharedRangeLocked asks the kernel (F_GETLK) whether a write lock on the
// SHARED range (PENDING_BYTE+2, 510 bytes: SQLite's unix VFS) would
// conflict with a lock another process holds. POSIX and OFD locks both
// answer.
func sharedRangeLocked(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, err
	}
	defer f.Close() // this process holds no lock on the file
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0x40000000 + 2, Len: 510}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil {
		return false, err
	}
	return lk.Type != syscall.F_UNLCK, nil
}

// othersSeeSQLiteLock reports whether another process sees this one's
// SQLite SHARED lock on path (a connection in WAL mode holds it while
// open).
func othersSeeSQLiteLock(t *testing.T, path string) bool {
	t.Helper()
	exe, err := os.Executable()
	must(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), lockProbeEnv+"="+path)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lock probe: %v", err)
	}
	return strings.TrimSpace(string(out)) == "true"
}
