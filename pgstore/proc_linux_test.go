package pgstore

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// procAttr runs a server as cred's user, in a process group of its own,
// killed when the test binary dies (a test timeout skips TestMain's
// cleanup; the backends follow their postmaster).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
}

// children lists the processes whose parent is pid, from /proc.
func children(pid int) []int {
	var kids []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so start after ")".
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		if c, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			kids = append(kids, c)
		}
	}
	return kids
}
